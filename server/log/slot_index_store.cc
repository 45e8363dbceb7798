#include "server/log/slot_index_store.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/common/deadline.h"
#include "server/kafka/admin.h"
#include "spdlog/spdlog.h"

namespace wal {
namespace {

// The first byte of every saved index; another value is a format this version cannot read.
// 2: saved by servers that read packed records (format 1's savers skipped them, so their
// indexes may lack the namespaces of packed records).
constexpr uint8_t kFormat = 2;

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutFixed64(std::string* out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

// Reads what PutVarint and PutFixed64 wrote; every read fails once the bytes ran out or made
// no sense, and so do all after it.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : rest_(bytes) {}
  bool ok() const { return ok_; }
  bool done() const { return ok_ && rest_.empty(); }

  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0; ok_; shift += 7) {
      if (rest_.empty() || shift > 63) break;
      const auto byte = static_cast<uint8_t>(rest_.front());
      rest_.remove_prefix(1);
      if (shift == 63 && byte > 1) break;  // past 64 bits
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return v;
    }
    ok_ = false;
    return 0;
  }
  uint64_t Fixed64() {
    if (!ok_ || rest_.size() < 8) {
      ok_ = false;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(rest_[i]);
    rest_.remove_prefix(8);
    return v;
  }
  // `base` + a varint, which must stay an offset below SlotIndex::kNoEnd (no record lies there,
  // and one past it would overflow).
  int64_t OffsetAfter(int64_t base) {
    const uint64_t delta = Varint();
    if (base < 0 || delta >= static_cast<uint64_t>(SlotIndex::kNoEnd - base)) {
      ok_ = false;
      return 0;
    }
    return base + static_cast<int64_t>(delta);
  }
  // A count of things each at least `min_bytes` long, no more than `max`.
  size_t Count(size_t max, size_t min_bytes) {
    const uint64_t n = Varint();
    if (n > max || n > rest_.size() / min_bytes) {
      ok_ = false;
      return 0;
    }
    return static_cast<size_t>(n);
  }

 private:
  std::string_view rest_;
  bool ok_ = true;
};

}  // namespace

// One saved index on its way to Kafka; librdkafka calls OnDelivery once, on the producer's
// poll thread.
struct SlotIndexStore::PendingSave final : DeliveryHandler {
  SlotIndexStore* store = nullptr;
  Slot slot;
  uint64_t changes = 0;
  std::string key;
  std::string value;  // librdkafka does not copy it
  bool done = false;  // guarded by store->mu_
  bool written = false;

  void OnDelivery(const Delivery& delivery) override {
    std::lock_guard<std::mutex> lock(store->mu_);
    done = true;
    written = delivery.written();
    store->cv_.notify_all();
  }
};

std::string EncodeSnapshot(const SlotIndex::Snapshot& snapshot) {
  std::string out;
  out.push_back(static_cast<char>(kFormat));
  PutFixed64(&out, snapshot.log.high);
  PutFixed64(&out, snapshot.log.low);
  PutVarint(&out, snapshot.bytes_recorded);
  PutVarint(&out, snapshot.offsets_recorded);
  PutVarint(&out, snapshot.stretches.size());
  int64_t previous_to = 0;
  for (const SlotIndex::Covered& c : snapshot.stretches) {
    PutVarint(&out, static_cast<uint64_t>(c.from - previous_to));
    PutVarint(&out, static_cast<uint64_t>(c.to - c.from));
    previous_to = c.to;
  }
  PutVarint(&out, snapshot.runs.size());
  for (const auto& [namespace_id, runs] : snapshot.runs) {
    PutVarint(&out, namespace_id);
    PutVarint(&out, runs.size());
    // One past the previous run's last. Unsigned: a run ending at kNoEnd (never in an index)
    // is still written, for DecodeSnapshot to refuse.
    uint64_t previous_end = 0;
    for (const SlotIndex::Run& r : runs) {
      PutVarint(&out, static_cast<uint64_t>(r.first) - previous_end);
      PutVarint(&out, static_cast<uint64_t>(r.last - r.first));
      previous_end = static_cast<uint64_t>(r.last) + 1;
    }
  }
  return out;
}

std::optional<SlotIndex::Snapshot> DecodeSnapshot(std::string_view bytes) {
  if (bytes.empty() || static_cast<uint8_t>(bytes.front()) != kFormat) return std::nullopt;
  Reader in(bytes.substr(1));
  SlotIndex::Snapshot snapshot;
  snapshot.log.high = in.Fixed64();
  snapshot.log.low = in.Fixed64();
  snapshot.bytes_recorded = in.Varint();
  snapshot.offsets_recorded = in.Varint();
  if (snapshot.offsets_recorded == 0) return std::nullopt;  // a stretch was recorded
  const size_t stretches = in.Count(SlotIndex::kMaxStretches, 2);
  int64_t previous_to = 0;
  for (size_t i = 0; i < stretches && in.ok(); ++i) {
    const int64_t from = in.OffsetAfter(previous_to);
    const int64_t to = in.OffsetAfter(from);
    // Apart from the one before (touching ones are joined) and not empty.
    if ((i > 0 && from == previous_to) || to == from) return std::nullopt;
    snapshot.stretches.push_back(SlotIndex::Covered{from, to});
    previous_to = to;
  }
  size_t total_runs = 0;
  const size_t namespaces = in.Count(SlotIndex::kMaxRuns, 2);
  for (size_t i = 0; i < namespaces && in.ok(); ++i) {
    const uint64_t namespace_id = in.Varint();
    const size_t count = in.Count(SlotIndex::kMaxRuns - total_runs, 2);
    total_runs += count;
    std::vector<SlotIndex::Run> runs;
    int64_t previous_end = 0;
    for (size_t k = 0; k < count && in.ok(); ++k) {
      const int64_t first = in.OffsetAfter(previous_end);
      const int64_t last = in.OffsetAfter(first);
      runs.push_back(SlotIndex::Run{first, last});
      previous_end = last + 1;
    }
    if (runs.empty() || !snapshot.runs.emplace(namespace_id, std::move(runs)).second) {
      return std::nullopt;  // a namespace twice, or with no runs: not written by EncodeSnapshot
    }
  }
  if (!in.done() || snapshot.stretches.empty()) return std::nullopt;
  return snapshot;
}

std::string SnapshotKey(const Slot& slot) { return absl::StrCat(slot.topic, "/", slot.partition); }

absl::StatusOr<std::unique_ptr<SlotIndexStore>> SlotIndexStore::Start(
    const KafkaProperties& properties, SlotIndexes* indexes, Metrics* metrics,
    SlotIndexStoreOptions options) {
  std::unique_ptr<SlotIndexStore> store(new SlotIndexStore(indexes, metrics, std::move(options)));
  KafkaProperties producer_properties = properties;
  // A save Kafka does not take by then is given up; the next one saves the index as it is then.
  producer_properties.try_emplace("message.timeout.ms", std::to_string(kSaveTimeout.count()));
  producer_properties.try_emplace("compression.type", "lz4");
  auto producer = RecoveringProducer::Create(producer_properties, store->options_.name + "-index");
  if (!producer.ok()) return producer.status();
  store->producer_ = std::move(*producer);
  // Looked up now, so that a save (the last one, at shutdown, above all) does not wait for it;
  // if it cannot be, the first save looks it up.
  if (absl::Status s = store->producer_->current()->Prepare(
          {store->options_.topic}, Clock::now() + store->options_.load_timeout);
      !s.ok()) {
    spdlog::warn("slot indexes: {}", s.ToString());
  }
  auto consumer = Consumer::Create(properties, store->options_.name + "-index-load");
  if (!consumer.ok()) return consumer.status();
  store->consumer_ = std::move(*consumer);
  // Before the first read: a read that came first would fill the index, which then takes no
  // snapshot (SlotIndex::Restore), and a datanode opens its regions right after the start.
  store->Load();
  store->thread_ = std::thread([s = store.get()] { s->Run(); });
  return store;
}

void SlotIndexStore::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_) stop_by_ = Clock::now() + kFinalSaveTimeout;
    stop_ = true;
  }
  cv_.notify_all();
}

SlotIndexStore::~SlotIndexStore() {
  Stop();
  if (thread_.joinable()) thread_.join();  // not started when Start failed
}

void SlotIndexStore::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (bool stopping = false; !stopping;) {
    cv_.wait_for(lock, options_.save_interval, [&] { return stop_; });
    stopping = stop_;
    // At shutdown too: what the last reads learned is what a restart wants. A save under way
    // when the stop comes and the last one end within kFinalSaveTimeout of it (SaveChanged).
    SaveChanged(lock, /*last=*/stopping);
  }
}

void SlotIndexStore::Load() {
  const auto started = Clock::now();
  const auto deadline = started + options_.load_timeout;
  const Slot slot{options_.topic, 0};
  std::map<std::string, std::string> latest;  // key -> the last value saved under it
  // Up to the end as it is now (what is saved later is newer than this walserver's start).
  absl::StatusOr<Watermarks> marks = QueryWatermarks(consumer_->handle(), slot, deadline);
  if (!marks.ok()) {
    spdlog::warn("slot indexes not loaded from {}: {}", slot.topic, marks.status().ToString());
    return;
  }
  int64_t next = marks->low;
  if (next < marks->high) {
    if (absl::Status s = consumer_->Assign(slot.topic, 0, next); !s.ok()) {
      spdlog::warn("slot indexes not loaded from {}: {}", slot.topic, s.ToString());
      return;
    }
  }
  uint64_t records = 0;
  bool failed = false;
  while (!failed && next < marks->high && Clock::now() < deadline) {
    for (const Message& msg : consumer_->PollBatch(100, 256)) {
      if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        next = std::max(next, msg->offset);  // compaction leaves gaps below the end
      } else if (msg->err) {
        // Not worth holding the start for: what is not loaded is built again by scans.
        spdlog::warn("loading slot indexes from {}: {}", slot.topic, rd_kafka_err2str(msg->err));
        failed = true;
        break;
      } else {
        next = std::max(next, msg->offset + 1);
        if (msg->key == nullptr) continue;
        ++records;
        latest[std::string(static_cast<const char*>(msg->key), msg->key_len)] =
            std::string(static_cast<const char*>(msg->payload), msg->len);
      }
    }
  }
  (void)consumer_->Unassign();
  consumer_.reset();  // it is not needed again
  if (next < marks->high && !failed) {
    spdlog::warn("slot indexes: {} not read to its end within {} ms; the rest is built again",
                 slot.topic, options_.load_timeout.count());
  }
  size_t restored = 0;
  for (const auto& [key, value] : latest) {
    const auto colon = key.rfind('/');
    int partition = 0;
    if (colon == std::string::npos || !absl::SimpleAtoi(key.substr(colon + 1), &partition)) {
      continue;
    }
    const Slot of{key.substr(0, colon), partition};
    if (std::find(options_.slots.begin(), options_.slots.end(), of) == options_.slots.end()) {
      continue;  // a slot of another --topic_count or --partitions_per_topic
    }
    std::optional<SlotIndex::Snapshot> snapshot = DecodeSnapshot(value);
    if (!snapshot) {
      spdlog::warn("slot indexes: the index saved under {} in {} cannot be read; not used", key,
                   slot.topic);
      continue;
    }
    SlotIndex& index = indexes_->Of(of);
    if (index.Restore(std::move(*snapshot))) {
      ++restored;
      ++metrics_->read_index_restores;
    }
  }
  spdlog::info(
      "slot indexes: {} of {} saved in {} taken ({} records read in {} ms)", restored,
      latest.size(), slot.topic, records,
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count());
}

void SlotIndexStore::SaveChanged(std::unique_lock<std::mutex>& lock, bool last) {
  lock.unlock();
  // A new producer if this one's idempotence state broke (a purge of records in flight can do
  // that). The replaced ones go once drained: every save of theirs was done before this one.
  producer_->ReleaseDrained();
  absl::StatusOr<Producer*> producer = producer_->Live();
  if (!producer.ok()) {
    spdlog::warn("slot indexes not saved: {}", producer.status().ToString());
    lock.lock();
    return;
  }
  std::vector<std::unique_ptr<PendingSave>> pending;
  for (const auto& [slot, index] : indexes_->All()) {
    const uint64_t changes = index->changes();
    // A restored index that nothing changed since (its changes() stayed 0) is not saved again.
    if (saved_[slot] == changes) continue;
    if (!last && Clock::now() < next_save_[slot]) continue;
    std::optional<SlotIndex::Snapshot> snapshot = index->TakeSnapshot();
    if (!snapshot) continue;
    auto save = std::make_unique<PendingSave>();
    save->store = this;
    save->slot = slot;
    save->changes = changes;
    save->key = SnapshotKey(slot);
    save->value = EncodeSnapshot(*snapshot);
    if (save->value.size() > options_.max_snapshot_bytes) {
      spdlog::warn("slot index of {}: {} bytes, over {}; not saved", save->key, save->value.size(),
                   options_.max_snapshot_bytes);
      saved_[slot] = changes;
      continue;
    }
    if (absl::Status s =
            (*producer)->Produce(options_.topic, 0, save->key, save->value, save.get());
        !s.ok()) {
      spdlog::warn("slot index of {} not saved: {}", save->key, s.ToString());
      continue;
    }
    pending.push_back(std::move(save));
  }
  lock.lock();
  const auto all_done = [&] {
    return std::all_of(pending.begin(), pending.end(), [](const auto& p) { return p->done; });
  };
  // Until Kafka answered every save or its time is up; after a stop, kFinalSaveTimeout after it
  // at most (shutdown must not wait on a Kafka that is away).
  const auto deadline = Clock::now() + kSaveTimeout;
  while (!all_done()) {
    const auto by = stop_ ? std::min(deadline, stop_by_) : deadline;
    if (Clock::now() >= by) break;
    cv_.wait_until(lock, by);  // woken by a report or by Stop, which may bring `by` closer
  }
  if (!all_done()) {
    // Every handler is called (with _PURGE_*) soon after, on the producer's poll thread: wait
    // for them, they point here.
    lock.unlock();
    (*producer)->Purge();
    lock.lock();
    cv_.wait(lock, all_done);
  }
  for (const auto& save : pending) {
    if (!save->written) continue;
    saved_[save->slot] = save->changes;
    // A large index is saved less often, so that followers that change every index all the
    // time write at most about kSaveBytesPerInterval per slot and interval.
    next_save_[save->slot] =
        Clock::now() + options_.save_interval * (save->value.size() / kSaveBytesPerInterval);
    ++metrics_->read_index_saves;
  }
}

}  // namespace wal
