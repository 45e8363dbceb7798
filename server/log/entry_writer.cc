#include "server/log/entry_writer.h"

#include <random>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "server/common/deadline.h"
#include "server/common/namespace_key.h"
#include "server/kafka/client.h"
#include "server/kafka/errors.h"
#include "server/kafka/producer.h"
#include "server/log/record_format.h"
#include "spdlog/spdlog.h"

namespace wal {

// One Append call. It completes when its last record is reported or when its timer fires,
// whichever comes first, and is deleted when both have happened.
class EntryWriter::Call {
 public:
  struct Record : DeliveryHandler {
    Call* call = nullptr;
    uint32_t item = 0;
    bool first_of_entry = false;
    std::string_view value;  // in the call's `values`
    void OnDelivery(const Delivery& delivery) override { call->OnRecord(*this, delivery); }
  };

  Call(EntryWriter* writer, size_t items, size_t records, Callback done)
      : records(records), writer_(writer), ids_(items, 0), done_(std::move(done)) {
    // One pending count per record plus one for Append while it produces.
    pending_ = static_cast<int>(records) + 1;
  }

  std::vector<Record> records;
  std::unique_ptr<char[]> values;  // the bytes of every record, one allocation per call
  std::multimap<Clock::time_point, Call*>::iterator timer;
  bool timer_armed = false;  // guarded by the writer's timer_mu_

  // `n` records will not be reported (never sent), or Append is done producing.
  void RecordsDone(int n) {
    if (pending_.fetch_sub(n) == n) {
      Finish(first_error());
      Unref();
    }
  }

  void Fail(absl::Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = std::move(status);
  }

  void Finish(absl::Status status) {
    if (finished_.exchange(true)) return;
    if (writer_->DisarmTimer(this)) Unref();  // the other reference is still held by our caller
    if (status.ok()) {
      done_(std::move(ids_));
    } else {
      done_(std::move(status));
    }
  }

  // Two references: the records (dropped when the last is reported) and the timer.
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

 private:
  // What a delivery means for an append: a failed append has an unknown outcome whatever its
  // records' (a prefix may be durable), so a record not written or perhaps written fails it
  // alike, with Kafka's reason; the caller retries with the same sequences.
  void OnRecord(const Record& r, const Delivery& delivery) {
    if (!delivery.written()) {
      Fail(KafkaErrorToStatus(delivery.err, "appending to Kafka"));
    } else if (r.first_of_entry) {
      if (delivery.offset < 0) {
        // A retried batch that the broker had already written: durable, but its offset unknown.
        Fail(absl::UnavailableError("Kafka acknowledged an entry without its offset; retry"));
      } else {
        ids_[r.item] = static_cast<uint64_t>(delivery.offset);
      }
    }
    RecordsDone(1);
  }

  absl::Status first_error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

  EntryWriter* writer_;
  std::vector<uint64_t> ids_;
  Callback done_;
  std::atomic<int> pending_{0};
  std::atomic<int> refs_{2};
  std::atomic<bool> finished_{false};
  std::mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<EntryWriter>> EntryWriter::Create(const KafkaProperties& properties,
                                                                 const WriterOptions& options,
                                                                 const std::string& name) {
  std::unique_ptr<EntryWriter> writer(new EntryWriter(properties, options, name));
  for (int i = 0; i < std::max(1, options.producers); ++i) {
    auto producer = RecoveringProducer::Create(properties, absl::StrCat(name, "-writer-", i));
    if (!producer.ok()) return producer.status();
    if (absl::Status s =
            (*producer)->current()->Prepare(options.topics, Clock::now() + kKafkaRequestTimeout);
        !s.ok()) {
      return s;
    }
    auto slot = std::make_unique<ProducerSlot>();
    slot->producer = std::move(*producer);
    writer->producers_.push_back(std::move(slot));
  }
  // Nonces tie the chunks of one entry together; a random base keeps two servers (or two runs
  // of one) apart.
  writer->next_nonce_ = std::random_device{}() * uint64_t{0x9e3779b97f4a7c15};
  // Readers tell a torn split entry by the session and origin of the records after it.
  std::random_device random;
  writer->source_.session = (uint64_t{random()} << 32 | random()) | 1;
  writer->source_.origin = OriginOf(name);
  writer->timer_thread_ = std::thread([w = writer.get()] { w->TimerLoop(); });
  return writer;
}

EntryWriter::~EntryWriter() {
  // Producers flush and purge first, so every call completes, then the timer goes.
  for (auto& p : producers_) p->producer.reset();
  {
    std::lock_guard<std::mutex> lock(timer_mu_);
    stop_ = true;
  }
  timer_cv_.notify_all();
  // Not started when Create failed part-way.
  if (timer_thread_.joinable()) timer_thread_.join();
}

void EntryWriter::FailPending() {
  failing_.store(true);
  for (auto& p : producers_) {
    std::lock_guard<std::mutex> lock(p->produce_mu);
    p->producer->current()->Purge();
  }
}

std::vector<const Producer*> EntryWriter::producers() const {
  std::vector<const Producer*> out;
  for (const auto& p : producers_) {
    std::lock_guard<std::mutex> lock(p->produce_mu);
    out.push_back(p->producer->current());
  }
  return out;
}

uint64_t EntryWriter::replacements() const {
  uint64_t total = 0;
  for (const auto& p : producers_) total += p->producer->replacements();
  return total;
}

EntryWriter::ProducerSlot& EntryWriter::OwnerOf(const Slot& slot) {
  const size_t h = std::hash<std::string>()(slot.topic) * 31 + static_cast<size_t>(slot.partition);
  return *producers_[h % producers_.size()];
}

std::unique_ptr<char[]> EntryWriter::Encode(const std::vector<AppendItem>& items,
                                            std::vector<std::string_view>* records,
                                            std::vector<size_t>* first_record) {
  const auto bytes_of = [&](const AppendItem& item) {
    return item.fence ? kRecordHeaderBytes
                      : EntryRecordBytes(item.data.size(), options_.max_record_bytes);
  };
  size_t bytes = 0;
  for (const AppendItem& item : items) bytes += bytes_of(item);
  std::unique_ptr<char[]> buffer(new char[bytes]);  // every byte is written below
  RecordSource source = source_;
  source.created_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  records->reserve(items.size());
  first_record->reserve(items.size() + 1);
  char* out = buffer.get();
  for (const AppendItem& item : items) {
    first_record->push_back(records->size());
    if (item.fence) {
      EncodeFenceTo(item.stamp.epoch, source, out);
      records->emplace_back(out, kRecordHeaderBytes);
    } else {
      EncodeEntryTo(item.data, next_nonce_.fetch_add(1), options_.max_record_bytes, item.stamp,
                    source, item.crc32c, out, records);
    }
    out += bytes_of(item);
  }
  first_record->push_back(records->size());
  return buffer;
}

void EntryWriter::Append(std::vector<AppendItem> items, Clock::time_point deadline, Callback done) {
  std::vector<std::string_view> values;
  std::vector<size_t> first_record;  // of item i, and the count of records after the last
  std::unique_ptr<char[]> buffer = Encode(items, &values, &first_record);
  // Addresses of the records are handed to librdkafka: the vector is sized once, here.
  auto* call = new Call(this, items.size(), values.size(), std::move(done));
  call->values = std::move(buffer);

  // Complete a little before the caller's deadline, so the caller hears UNAVAILABLE instead of
  // timing out blind.
  ArmTimer(call, Within(AnswerBy(deadline), options_.append_timeout));

  // Group by producer; within a producer, produce every record of the call under its lock, so
  // that chunks of one entry are never interleaved with another call's.
  std::map<ProducerSlot*, std::vector<size_t>> by_producer;
  for (size_t i = 0; i < items.size(); ++i) by_producer[&OwnerOf(items[i].slot)].push_back(i);

  int unsent = 0;
  int produced = 0;  // records handed to librdkafka
  bool failed = false;
  for (auto& [owner, indexes] : by_producer) {
    std::lock_guard<std::mutex> lock(owner->produce_mu);
    if (failing_.load() && !failed) {
      call->Fail(absl::UnavailableError("walserver is shutting down; nothing was written"));
      failed = true;
    }
    Producer* producer = nullptr;
    if (!failed) {
      absl::StatusOr<Producer*> live = owner->producer->Live();
      if (live.ok()) {
        producer = *live;
      } else {
        call->Fail(live.status());
        failed = true;
      }
    }
    for (size_t i : indexes) {
      const std::string key = EncodeKey(items[i].namespace_id);
      for (size_t r = first_record[i]; r < first_record[i + 1]; ++r) {
        Call::Record& record = call->records[r];
        record.call = call;
        record.item = static_cast<uint32_t>(i);
        record.first_of_entry = r == first_record[i];
        record.value = values[r];
        if (failed) {
          ++unsent;
          continue;
        }
        absl::Status s = producer->Produce(items[i].slot.topic, items[i].slot.partition, key,
                                           record.value, &record);
        if (!s.ok()) {
          // RESOURCE_EXHAUSTED promises that nothing was written; once some records of the
          // call are on their way, the caller can only be told to retry with its sequences.
          if (absl::IsResourceExhausted(s) && produced > 0) {
            s = absl::UnavailableError(
                absl::StrCat(s.message(),
                             "; part of the append may have been written, retry it with the "
                             "same sequences"));
          }
          call->Fail(std::move(s));
          failed = true;
          ++unsent;
        } else {
          ++produced;
        }
      }
    }
  }
  call->RecordsDone(unsent + 1);
}

void EntryWriter::ArmTimer(Call* call, Clock::time_point when) {
  std::lock_guard<std::mutex> lock(timer_mu_);
  call->timer = timers_.emplace(when, call);
  call->timer_armed = true;
  if (call->timer == timers_.begin()) timer_cv_.notify_one();
}

bool EntryWriter::DisarmTimer(Call* call) {
  std::lock_guard<std::mutex> lock(timer_mu_);
  if (!call->timer_armed) return false;
  timers_.erase(call->timer);
  call->timer_armed = false;
  return true;
}

void EntryWriter::TimerLoop() {
  std::unique_lock<std::mutex> lock(timer_mu_);
  while (!stop_) {
    if (timers_.empty()) {
      timer_cv_.wait(lock);
      continue;
    }
    const auto next = timers_.begin()->first;
    if (Clock::now() < next) {
      timer_cv_.wait_until(lock, next);
      continue;
    }
    Call* call = timers_.begin()->second;
    timers_.erase(timers_.begin());
    call->timer_armed = false;
    lock.unlock();
    call->Finish(absl::UnavailableError(
        "Kafka did not acknowledge the append in time (is Kafka reachable?); the outcome is "
        "unknown and a retry is safe"));
    call->Unref();
    lock.lock();
  }
}

}  // namespace wal
