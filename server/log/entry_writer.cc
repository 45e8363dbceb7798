#include "server/log/entry_writer.h"

#include <algorithm>
#include <random>
#include <unordered_map>
#include <utility>

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
  Call(EntryWriter* writer, size_t items, size_t records, Callback done)
      : writer_(writer), ids_(items, 0), done_(std::move(done)) {
    // One pending count per record plus one for Append while it queues them.
    pending_ = static_cast<int>(records) + 1;
  }

  std::unique_ptr<char[]> values;  // the bytes of every record, one allocation per call
  std::multimap<Clock::time_point, Call*>::iterator timer;
  bool timer_armed = false;  // guarded by the writer's timer_mu_
  // Some record of the call was handed to librdkafka: a later failure may leave part of it
  // written. Set under the producer's produce_mu.
  std::atomic<bool> produced{false};

  // `n` records will not be reported (never sent), or Append is done queueing.
  void RecordsDone(int n) {
    if (pending_.fetch_sub(n) == n) {
      Finish(Settled(first_error()));
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

  // What a delivery means for an append: a failed append has an unknown outcome whatever its
  // records' (a prefix may be durable), so a record not written or perhaps written fails it
  // alike, with Kafka's reason; the caller retries with the same sequences. A record of the
  // item's entry reported: by itself or in a packed record, whose offset is then the entry's id.
  void OnRecord(uint32_t item, bool first_of_entry, const Delivery& delivery) {
    if (!delivery.written()) {
      Fail(KafkaErrorToStatus(delivery.err, "appending to Kafka"));
    } else if (first_of_entry) {
      if (delivery.offset < 0) {
        // A retried batch that the broker had already written: durable, but its offset unknown.
        Fail(absl::UnavailableError("Kafka acknowledged an entry without its offset; retry"));
      } else {
        ids_[item] = static_cast<uint64_t>(delivery.offset);
      }
    }
    RecordsDone(1);
  }

 private:
  absl::Status first_error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

  // RESOURCE_EXHAUSTED promises that nothing was written; once some records of the call went
  // out (in any slot, also after the refusal), the caller can only be told to retry with its
  // sequences. Decided when every record is settled.
  absl::Status Settled(absl::Status status) const {
    if (!absl::IsResourceExhausted(status) || !produced.load()) return status;
    return absl::UnavailableError(absl::StrCat(
        status.message(),
        "; part of the append may have been written, retry it with the same sequences"));
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

// The records one Flush produced for a slot: the slot's next group leaves when all are reported.
struct EntryWriter::Group {
  ProducerSlot* owner = nullptr;
  const Slot* slot = nullptr;  // the key of `queue` in owner->queues
  SlotQueue* queue = nullptr;  // map nodes stay put
  int unreported = 0;          // guarded by owner->produce_mu
};

// One Kafka record on its way: a call's record of its own, or a packed record of several parts.
struct EntryWriter::Outgoing : DeliveryHandler {
  EntryWriter* writer = nullptr;
  Group* group = nullptr;
  std::vector<Part> parts;
  std::unique_ptr<char[]> packed;  // the value, when parts are packed
  void OnDelivery(const Delivery& delivery) override { writer->OnOutgoing(this, delivery); }
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
  // Producers flush and purge first, so every call completes, then the timer goes. What still
  // waits in a slot's queue fails when the group ahead of it is reported: Flush produces
  // nothing once failing_ is set.
  failing_.store(true);
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
  std::vector<Failed> failed;
  for (auto& p : producers_) {
    std::lock_guard<std::mutex> lock(p->produce_mu);
    p->producer->current()->Purge();
    for (auto& [slot, queue] : p->queues) {
      for (const Part& part : queue.queued) failed.push_back({part, ShuttingDown()});
      queue.queued.clear();
    }
  }
  FailParts(std::move(failed));
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
  source.created_ms = UnixNowMs();
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
  auto* call = new Call(this, items.size(), values.size(), std::move(done));
  call->values = std::move(buffer);

  // Complete a little before the caller's deadline, so the caller hears UNAVAILABLE instead of
  // timing out blind.
  ArmTimer(call, Within(AnswerBy(deadline), options_.append_timeout));

  // A record larger than this cannot share a Kafka record with another.
  const size_t packable_bytes =
      std::min(options_.max_packed_entry_bytes,
               options_.max_record_bytes - kPackedHeaderBytes - 2 * kPackedDirectoryEntryBytes);
  std::map<ProducerSlot*, std::vector<size_t>> by_producer;
  for (size_t i = 0; i < items.size(); ++i) by_producer[&OwnerOf(items[i].slot)].push_back(i);
  std::vector<Failed> failed;
  for (auto& [owner, indexes] : by_producer) {
    std::lock_guard<std::mutex> lock(owner->produce_mu);
    // Queues this call found empty: their slot may be free to flush now.
    std::vector<std::map<Slot, SlotQueue>::iterator> found_empty;
    for (size_t i : indexes) {
      const size_t records = first_record[i + 1] - first_record[i];
      auto queue = owner->queues.try_emplace(items[i].slot).first;
      if (queue->second.queued.empty()) found_empty.push_back(queue);
      for (size_t r = first_record[i]; r < first_record[i + 1]; ++r) {
        Part part;
        part.call = call;
        part.item = static_cast<uint32_t>(i);
        part.first_of_entry = r == first_record[i];
        part.packable =
            options_.packed_records && records == 1 && values[r].size() <= packable_bytes;
        part.namespace_id = items[i].namespace_id;
        part.record = values[r];
        if (failing_.load()) {
          failed.push_back({part, ShuttingDown()});
        } else {
          queue->second.queued.push_back(part);
        }
      }
    }
    for (auto queue : found_empty) {
      if (queue->second.groups_in_flight < options_.slot_flushes_in_flight) {
        Flush(*owner, queue->first, queue->second, &failed);
      }
    }
  }
  FailParts(std::move(failed));
  call->RecordsDone(1);
}

absl::Status EntryWriter::ShuttingDown() {
  return absl::UnavailableError("walserver is shutting down; nothing was written");
}

std::vector<std::vector<EntryWriter::Part>> EntryWriter::Pack(
    std::vector<Part>::const_iterator begin, std::vector<Part>::const_iterator end) const {
  std::vector<std::vector<Part>> packs;
  std::vector<size_t> bytes;  // of each pack's record
  // The first pack a namespace's next part may join: after the one holding its previous part.
  std::unordered_map<uint64_t, size_t> next_pack_of;
  // Packs before this one have no room for any part: no search starts before it.
  size_t first_open = 0;
  constexpr size_t kSmallestPart = kPackedDirectoryEntryBytes + kRecordHeaderBytes;
  for (auto part = begin; part != end; ++part) {
    const size_t need = kPackedDirectoryEntryBytes + part->record.size();
    while (first_open < packs.size() &&
           bytes[first_open] + kSmallestPart > options_.max_record_bytes) {
      ++first_open;
    }
    size_t& at = next_pack_of[part->namespace_id];
    at = std::max(at, first_open);
    while (at < packs.size() && bytes[at] + need > options_.max_record_bytes) ++at;
    if (at == packs.size()) {
      packs.emplace_back();
      bytes.push_back(kPackedHeaderBytes);
    }
    packs[at].push_back(*part);
    bytes[at] += need;
    ++at;
  }
  return packs;
}

void EntryWriter::Flush(ProducerSlot& owner, const Slot& slot, SlotQueue& queue,
                        std::vector<Failed>* failed) {
  if (queue.queued.empty()) return;
  const std::vector<Part> parts = std::exchange(queue.queued, {});
  absl::Status refused;
  Producer* producer = nullptr;
  if (failing_.load()) {
    refused = ShuttingDown();
  } else if (absl::StatusOr<Producer*> live = owner.producer->Live(); live.ok()) {
    producer = *live;
  } else {
    refused = live.status();
  }
  // The records to produce, in queue order: runs of packable parts packed, the others (the
  // chunks of a split entry, a large entry) each a record of its own.
  std::vector<std::unique_ptr<Outgoing>> outgoing;
  for (auto run = parts.begin(); run != parts.end();) {
    if (!run->packable) {
      outgoing.push_back(std::make_unique<Outgoing>());
      outgoing.back()->parts.push_back(*run++);
      continue;
    }
    const auto run_end =
        std::find_if(run, parts.end(), [](const Part& part) { return !part.packable; });
    for (std::vector<Part>& pack : Pack(run, run_end)) {
      outgoing.push_back(std::make_unique<Outgoing>());
      outgoing.back()->parts = std::move(pack);
    }
    run = run_end;
  }
  auto* group = new Group{&owner, &slot, &queue, 0};
  for (std::unique_ptr<Outgoing>& o : outgoing) {
    if (!refused.ok()) {
      // Nothing after a refused record is sent: a namespace's later entries would overtake it.
      for (const Part& part : o->parts) failed->push_back({part, refused});
      continue;
    }
    std::string key_bytes;
    std::string_view key;  // none for a packed record
    std::string_view value;
    if (o->parts.size() == 1) {
      key_bytes = EncodeKey(o->parts[0].namespace_id);
      key = key_bytes;
      value = o->parts[0].record;
    } else {
      std::vector<PackedPart> packed;
      packed.reserve(o->parts.size());
      for (const Part& part : o->parts) packed.push_back({part.namespace_id, part.record});
      const size_t bytes = PackedRecordBytes(packed);
      o->packed.reset(new char[bytes]);  // every byte is written by EncodePackedTo
      EncodePackedTo(packed, o->packed.get());
      value = std::string_view(o->packed.get(), bytes);
    }
    o->writer = this;
    o->group = group;
    if (absl::Status s = producer->Produce(slot.topic, slot.partition, key, value, o.get());
        !s.ok()) {
      for (const Part& part : o->parts) failed->push_back({part, s});
      refused = std::move(s);
      continue;
    }
    ++group->unreported;
    if (o->parts.size() > 1) {
      packed_records_.fetch_add(1, std::memory_order_relaxed);
      packed_entries_.fetch_add(o->parts.size(), std::memory_order_relaxed);
    }
    // Reports take produce_mu before they reach a call, so the calls are still here.
    for (const Part& part : o->parts) part.call->produced.store(true);
    (void)o.release();  // librdkafka's now, until OnOutgoing
  }
  if (group->unreported == 0) {
    delete group;
  } else {
    if (queue.groups_in_flight++ == 0) queue.last_progress = Clock::now();
  }
}

void EntryWriter::OnOutgoing(Outgoing* o, const Delivery& delivery) {
  const std::unique_ptr<Outgoing> outgoing(o);
  std::vector<Failed> failed;
  ProducerSlot& owner = *o->group->owner;
  if (delivery.written() && delivery.offset >= 0) {
    std::lock_guard<std::mutex> lock(acknowledged_mu_);
    int64_t& end = acknowledged_end_[*o->group->slot];
    end = std::max(end, delivery.offset + 1);
  }
  {
    std::lock_guard<std::mutex> lock(owner.produce_mu);
    Group* group = o->group;
    // A failed report is no progress: records expiring one after another at a stale leader
    // would otherwise hide the stall from the stale-leader watch.
    if (delivery.written()) group->queue->last_progress = Clock::now();
    if (--group->unreported == 0) {
      // The slot's next group leaves now, with everything that gathered meanwhile.
      const Slot& slot = *group->slot;
      SlotQueue& queue = *group->queue;
      delete group;
      --queue.groups_in_flight;
      if (queue.groups_in_flight < options_.slot_flushes_in_flight) {
        Flush(owner, slot, queue, &failed);
      }
    }
  }
  for (const Part& part : o->parts) part.call->OnRecord(part.item, part.first_of_entry, delivery);
  FailParts(std::move(failed));
}

int64_t EntryWriter::AcknowledgedEnd(const Slot& slot) const {
  std::lock_guard<std::mutex> lock(acknowledged_mu_);
  auto it = acknowledged_end_.find(slot);
  return it == acknowledged_end_.end() ? 0 : it->second;
}

std::vector<Slot> EntryWriter::StalledSlots(std::chrono::milliseconds quiet) const {
  std::vector<Slot> stalled;
  const Clock::time_point since = Clock::now() - quiet;
  for (const auto& owner : producers_) {
    std::lock_guard<std::mutex> lock(owner->produce_mu);
    for (const auto& [slot, queue] : owner->queues) {
      if (queue.groups_in_flight > 0 && queue.last_progress <= since) stalled.push_back(slot);
    }
  }
  return stalled;
}

void EntryWriter::FailParts(std::vector<Failed> failed) {
  for (Failed& f : failed) {
    f.part.call->Fail(std::move(f.status));
    f.part.call->RecordsDone(1);
  }
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
