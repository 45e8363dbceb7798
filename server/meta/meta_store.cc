#include "server/meta/meta_store.h"

#include <malloc.h>

#include <algorithm>
#include <future>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/deadline.h"
#include "server/common/namespace_key.h"
#include "server/kafka/admin.h"
#include "server/kafka/client.h"
#include "server/kafka/consumer.h"
#include "server/kafka/errors.h"
#include "server/kafka/producer.h"
#include "server/kafka/recovering_producer.h"
#include "spdlog/spdlog.h"

namespace wal {
namespace {

// What to do about a damaged copy of the metadata topic: the leader served it, and a copy in
// sync on another broker is whole unless the same bytes broke there too (Kafka checked the
// batch when it took it). Which files to remove, and where, or that only a backup helps.
std::string RepairAdvice(const std::string& topic,
                         const absl::StatusOr<PartitionReplicas>& replicas) {
  if (!replicas.ok()) {
    return absl::StrCat("Repair or restore the topic (which brokers hold its copies is unknown: ",
                        replicas.status().message(), ")");
  }
  if (replicas->leader < 0) {
    return absl::StrCat("No broker leads ", topic, "[0] at the moment (copies in sync: ",
                        replicas->in_sync.empty() ? "none" : absl::StrJoin(replicas->in_sync, ", "),
                        "): start walserver again once one does, to learn which copy to remove");
  }
  std::vector<int32_t> others;
  for (int32_t broker : replicas->in_sync) {
    if (broker != replicas->leader) others.push_back(broker);
  }
  const std::string leader = absl::StrCat(
      "broker ", replicas->leader, " (", replicas->leader_address, "), which leads ", topic,
      "[0] and so served the damaged copy (unless leadership moved in between)");
  if (others.empty()) {
    return absl::StrCat("The only copy in sync is on ", leader,
                        ": restore the topic from a backup, or delete it to start with no "
                        "namespaces (their entries stay in the slots, unreachable)");
  }
  return absl::StrCat("Copies in sync are on broker(s) ", absl::StrJoin(others, ", "),
                      ". Repair: stop ", leader, ", remove the directory ", topic,
                      "-0 from its log.dirs, start it again (another broker leads meanwhile and "
                      "it copies the partition back), then start walserver");
}

using meta::v1::NamespaceRecord;

// Reports one delivery to a promise. It owns itself until the report arrives, so a caller that
// gave up waiting leaves nothing dangling.
class PromiseDelivery : public DeliveryHandler {
 public:
  static std::pair<PromiseDelivery*, std::future<Delivery>> New(std::string value) {
    auto* d = new PromiseDelivery(std::move(value));
    return {d, d->promise_.get_future()};
  }
  void OnDelivery(const Delivery& delivery) override {
    promise_.set_value(delivery);
    delete this;
  }
  const std::string& value() const { return value_; }

 private:
  explicit PromiseDelivery(std::string value) : value_(std::move(value)) {}
  std::string value_;
  std::promise<Delivery> promise_;
};

constexpr absl::string_view kPruneKeyPrefix = "prune/";
constexpr absl::string_view kServerKeyPrefix = "server/";
// Records the tail applies under one hold of the table's lock (~0.2 ms), which appends look
// their namespaces up under too.
constexpr size_t kTailBatch = 128;

}  // namespace

MetaStore::MetaStore(std::vector<Slot> slots, MetaOptions options)
    : options_(std::move(options)),
      table_(std::move(slots)),
      session_((uint64_t{std::random_device()()} << 32) | std::random_device()()) {}

absl::StatusOr<std::unique_ptr<MetaStore>> MetaStore::Open(const KafkaProperties& properties,
                                                           std::vector<Slot> slots,
                                                           MetaOptions options) {
  std::unique_ptr<MetaStore> store(new MetaStore(std::move(slots), std::move(options)));
  const auto deadline = Clock::now() + store->options_.startup_timeout;
  auto producer = RecoveringProducer::Create(properties, store->options_.writer + "-meta");
  if (!producer.ok()) return producer.status();
  store->producer_ = std::move(*producer);
  if (absl::Status s = store->producer_->current()->Prepare({store->options_.topic}, deadline);
      !s.ok()) {
    return s;
  }
  auto watermarks = NewKafkaClient(RD_KAFKA_CONSUMER, properties);
  if (!watermarks.ok()) return watermarks.status();
  store->watermarks_client_ = std::move(*watermarks);
  // The broker answers a waiting fetch as soon as a record arrives, so a long wait costs no
  // latency; a short one costs 20 idle fetches a second (most of an idle server's CPU).
  KafkaProperties tail_properties = properties;
  if (!tail_properties.count("fetch.wait.max.ms")) tail_properties["fetch.wait.max.ms"] = "500";
  // At start-up the whole table streams in: larger queue limits than the readers' let librdkafka
  // fetch further ahead of parsing (a million namespaces are 49 MB).
  if (!tail_properties.count("queued.max.messages.kbytes")) {
    tail_properties["queued.max.messages.kbytes"] = "32768";
  }
  if (!tail_properties.count("queued.min.messages")) {
    tail_properties["queued.min.messages"] = "10000000";
  }
  auto consumer = Consumer::Create(tail_properties, store->options_.writer + "-meta-tail");
  if (!consumer.ok()) return consumer.status();
  store->consumer_ = std::move(*consumer);
  if (absl::Status s =
          store->consumer_->Assign(store->options_.topic, 0, RD_KAFKA_OFFSET_BEGINNING);
      !s.ok()) {
    return s;
  }

  // Where the topic ends now: the table is complete once the tail has read this far.
  absl::StatusOr<Watermarks> end;
  do {
    end = QueryWatermarks(store->consumer_->handle(), Slot{store->options_.topic, 0},
                          Within(deadline, std::chrono::seconds(5)));
  } while (!end.ok() && Clock::now() < deadline);
  if (!end.ok()) return end.status();

  store->tail_thread_ = std::thread([s = store.get()] { s->TailLoop(); });
  store->restate_thread_ = std::thread([s = store.get()] { s->RestateLoop(); });
  if (absl::Status s = store->WaitApplied(end->high - 1, deadline); !s.ok()) {
    return absl::UnavailableError(absl::StrCat("reading the namespace table from ",
                                               store->options_.topic, ": ", s.message()));
  }
  std::vector<NamespaceState> stale;
  {
    std::lock_guard lock(store->mu_);
    stale = store->table_.NeedingRestate();
    spdlog::info("namespace table loaded from {}: {} namespaces, {} records read",
                 store->options_.topic, store->table_.live_count(), store->next_offset_);
  }
  for (const NamespaceState& state : stale) store->Restate(state, deadline);
  // Loading freed what librdkafka queued and what parsing used (~100 MB for a million
  // namespaces); glibc keeps such memory unless asked to give it back.
  malloc_trim(0);
  return store;
}

MetaStore::~MetaStore() {
  {
    std::lock_guard lock(mu_);
    stop_.store(true);
    failing_.store(true);  // releases RestateLoop's waits
    WakeWaitersLocked();
  }
  restate_cv_.notify_all();
  if (restate_thread_.joinable()) restate_thread_.join();
  if (tail_thread_.joinable()) tail_thread_.join();
}

void MetaStore::RestateLoop() {
  std::unique_lock lock(mu_);
  while (true) {
    restate_cv_.wait(lock, [this] { return stop_.load() || !restate_.empty(); });
    if (stop_.load()) return;
    const std::vector<uint64_t> ids = std::move(restate_);
    restate_.clear();
    lock.unlock();
    for (uint64_t id : ids) {
      if (stop_.load() || failing_.load()) break;
      const auto deadline = Clock::now() + kKafkaRequestTimeout;
      const auto try_again = [&](const absl::Status& why) {
        spdlog::warn("restating namespace {}: {}; trying again", id, why.ToString());
        std::unique_lock retry_lock(mu_);
        restate_.push_back(id);
        restate_cv_.wait_for(retry_lock, std::chrono::seconds(1), [this] { return stop_.load(); });
      };
      // Read to the end first: another server may have restated it already.
      if (absl::Status s = CatchUp(deadline); !s.ok()) {
        try_again(s);
        continue;
      }
      std::optional<NamespaceState> state;
      {
        std::lock_guard table_lock(mu_);
        state = table_.DeletedButStale(id);
      }
      if (!state) {
        RestateIfStale(id, deadline);  // live: created again from a stale view
        continue;
      }
      NamespaceRecord deletion = MakeRecord(NamespaceRecord::DELETE, *state, options_.writer);
      deletion.set_incarnation(state->meta_offset);
      auto offset = ProduceAndApply(id, deletion, deadline);
      if (!offset.ok()) {
        try_again(offset.status());
        continue;
      }
      spdlog::info("namespace {}: restated its deletion after a record written from a stale view",
                   id);
      // Created again meanwhile? Then that assignment must come last.
      RestateIfStale(id, deadline);
    }
    lock.lock();
  }
}

void MetaStore::FailPending() {
  {
    std::lock_guard lock(mu_);
    failing_.store(true);
    WakeWaitersLocked();
  }
  producer_->current()->Purge();
}

const Producer* MetaStore::producer() const { return producer_->current(); }

uint64_t MetaStore::producer_replacements() const { return producer_->replacements(); }

void MetaStore::TailLoop() {
  while (!stop_.load()) {
    // In batches: a Poll and a lock per record cost 1.6 s of loading a million namespaces.
    const std::vector<Message> batch = consumer_->PollBatch(100, kTailBatch);
    if (batch.empty()) continue;
    // For the repair advice on damaged records, asked before taking the lock that appends need:
    // on a sick cluster the answer may take seconds.
    std::optional<absl::StatusOr<PartitionReplicas>> replicas;
    for (const Message& msg : batch) {
      if (!IsDamagedRecords(msg->err)) continue;
      replicas = DescribeReplicas(watermarks_client_.get(), Slot{options_.topic, 0},
                                  Clock::now() + std::chrono::seconds(5));
      break;
    }
    std::lock_guard lock(mu_);
    for (const Message& msg : batch) {
      if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        next_offset_ = std::max(next_offset_, msg->offset);
        tail_error_.clear();
      } else if (IsDamagedRecords(msg->err)) {
        // Records of the table are damaged in Kafka's log: a table built past them would lack
        // their changes. The tail stops here for good; health and every wait for it say why.
        damaged_at_ =
            absl::StrCat("damaged in Kafka's log at offset ", std::max(msg->offset, next_offset_),
                         " (", KafkaErrorToStatus(msg->err, "tailing the metadata topic").message(),
                         "); the namespace table is not read past it. ",
                         RepairAdvice(options_.topic, *replicas));
        spdlog::error("metadata topic {}: {}", options_.topic, damaged_at_);
        tail_error_ = damaged_at_;
        // Waits for the table fail now; nothing is fetched any more.
        for (auto& [offset, waiter] : waiters_) {
          waiter->woken = true;
          waiter->cv.notify_one();
        }
        waiters_.clear();
        (void)consumer_->Unassign();
        return;
      } else if (msg->err) {
        const absl::Status status = KafkaErrorToStatus(msg->err, "tailing the metadata topic");
        if (tail_error_ != status.message()) spdlog::warn("{}", status.ToString());
        tail_error_ = std::string(status.message());
      } else {
        ApplyMessageLocked(*msg);
      }
    }
    WakeWaitersLocked();
  }
}

void MetaStore::WakeWaitersLocked() {
  // Notified under the lock: a waiter whose deadline passes cannot leave (and take its condition
  // variable with it) until this is done.
  const auto end = failing_.load() ? waiters_.end() : waiters_.lower_bound(next_offset_);
  for (auto it = waiters_.begin(); it != end; it = waiters_.erase(it)) {
    it->second->woken = true;
    it->second->cv.notify_one();
  }
}

void MetaStore::ApplyMessageLocked(const rd_kafka_message_t& msg) {
  next_offset_ = std::max(next_offset_, msg.offset + 1);
  tail_error_.clear();
  const absl::string_view key(static_cast<const char*>(msg.key), msg.key ? msg.key_len : 0);
  // A namespace's key is exactly 8 bytes, which may happen to spell "prune/"; the pruner's are
  // longer.
  if (key.size() != 8 && absl::StartsWith(key, kPruneKeyPrefix)) {
    meta::v1::SlotRecord slot;
    if (msg.payload == nullptr || !slot.ParseFromArray(msg.payload, static_cast<int>(msg.len)) ||
        slot.version() != 1) {
      ++skipped_;
      return;
    }
    int64_t& before = pruned_before_[Slot{slot.topic(), slot.partition()}];
    before = std::max(before, slot.pruned_before());
    return;
  }
  if (key.size() != 8 && absl::StartsWith(key, kServerKeyPrefix)) {
    ApplyAnnouncementLocked(msg);
    return;
  }
  const std::optional<uint64_t> id = DecodeKey(msg.key, msg.key_len);
  NamespaceRecord record;
  if (!id || *id == 0 || msg.payload == nullptr ||
      !record.ParseFromArray(msg.payload, static_cast<int>(msg.len)) || record.version() != 1) {
    ++skipped_;
    spdlog::warn("skipping undecodable record at offset {} of {}", msg.offset, options_.topic);
    return;
  }
  const ApplyOutcome outcome = table_.Apply(*id, record, msg.offset);
  if (outcome == ApplyOutcome::kStaleAfterDelete ||
      (outcome == ApplyOutcome::kCreated && table_.LatestRecordStale(*id))) {
    restate_.push_back(*id);
    restate_cv_.notify_one();
  }
  if (outcome == ApplyOutcome::kCreated) {
    spdlog::debug("namespace {} in {}[{}] from offset {}", *id, record.topic(), record.partition(),
                  record.start_offset());
  }
}

void MetaStore::ApplyAnnouncementLocked(const rd_kafka_message_t& msg) {
  meta::v1::ServerRecord announcement;
  if (msg.payload == nullptr ||
      !announcement.ParseFromArray(msg.payload, static_cast<int>(msg.len)) ||
      announcement.version() != 1) {
    ++skipped_;
    return;
  }
  if (announcement.name() != options_.writer) return;  // only this server's name matters here
  last_announcement_ = announcement;
  if (announcement.session() == session_) {
    // Ours: set here, in the batch that applies it, so that another process's announcement
    // right after it in the same batch counts too.
    if (own_announcement_offset_ < 0) own_announcement_offset_ = msg.offset;
    return;
  }
  if (own_announcement_offset_ < 0 || msg.offset <= own_announcement_offset_) return;
  ++name_conflicts_;
  spdlog::error(
      "another walserver started with this server's name {} (on host {}, serving {}): readers "
      "tell an entry torn by a crash from one still being written by its writer's name, so two "
      "live walservers with one name can make them skip an entry that completes. Give each "
      "sidecar its own --name, or stop one of them",
      announcement.name(), announcement.host(), announcement.listen());
}

absl::Status MetaStore::Announce(const std::string& host, const std::string& listen,
                                 Clock::time_point deadline) {
  {
    std::lock_guard lock(mu_);
    if (last_announcement_ &&
        (last_announcement_->host() != host || last_announcement_->listen() != listen)) {
      spdlog::warn(
          "walserver {} was last started on host {} serving {}, at {} ms since the epoch; if that "
          "one still runs, two live walservers share a name, which can make readers skip an "
          "entry that completes: give each sidecar its own --name",
          options_.writer, last_announcement_->host(), last_announcement_->listen(),
          last_announcement_->started_ms());
    }
  }
  meta::v1::ServerRecord announcement;
  announcement.set_version(1);
  announcement.set_name(options_.writer);
  announcement.set_session(session_);
  announcement.set_host(host);
  announcement.set_listen(listen);
  announcement.set_started_ms(UnixNowMs());
  auto offset = ProduceAndApply(absl::StrCat(kServerKeyPrefix, options_.writer),
                                announcement.SerializeAsString(), deadline);
  return offset.status();
}

uint64_t MetaStore::name_conflicts() const {
  std::lock_guard lock(mu_);
  return name_conflicts_;
}

absl::Status MetaStore::WaitApplied(int64_t offset, Clock::time_point deadline) {
  std::unique_lock lock(mu_);
  if (next_offset_ <= offset && !failing_.load() && damaged_at_.empty()) {
    AppliedWaiter waiter;
    const auto it = waiters_.emplace(offset, &waiter);
    waiter.cv.wait_until(lock, deadline, [&] {
      return next_offset_ > offset || failing_.load() || !damaged_at_.empty();
    });
    if (!waiter.woken) waiters_.erase(it);
  }
  if (next_offset_ <= offset) {
    if (failing_.load()) {
      return absl::DeadlineExceededError(
          "walserver is shutting down; the change is in the metadata topic and takes effect");
    }
    return absl::UnavailableError(absl::StrCat("the metadata topic was not read up to offset ",
                                               offset, " in time (read up to ", next_offset_,
                                               tail_error_.empty() ? "" : "; " + tail_error_, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> MetaStore::ProduceAndApply(uint64_t namespace_id,
                                                   const NamespaceRecord& record,
                                                   Clock::time_point deadline) {
  return ProduceAndApply(EncodeKey(namespace_id), record.SerializeAsString(), deadline);
}

absl::StatusOr<int64_t> MetaStore::ProduceAndApply(const std::string& key, std::string value,
                                                   Clock::time_point deadline) {
  if (failing_.load()) return absl::UnavailableError("walserver is shutting down");
  if (Clock::now() >= deadline) {
    return absl::DeadlineExceededError(
        "no time left to write the metadata record; nothing was "
        "changed");
  }
  absl::StatusOr<Producer*> producer = producer_->Live();
  if (!producer.ok()) return producer.status();
  auto [delivery, result] = PromiseDelivery::New(std::move(value));
  if (absl::Status s = (*producer)->Produce(options_.topic, 0, key, delivery->value(), delivery);
      !s.ok()) {
    delete delivery;
    return s;
  }
  // Kept for taking the record back before the deadline, so that the caller hears why.
  const auto now = Clock::now();
  const auto take_back_at = AnswerBy(deadline);
  // Taking back costs the other unsent records too: only when Kafka took nothing for a while.
  const bool may_take_back = take_back_at - now >= std::chrono::milliseconds(500);
  if (!may_take_back && result.wait_until(deadline) != std::future_status::ready) {
    return absl::DeadlineExceededError(
        "Kafka did not acknowledge the metadata record in time; it may still take effect");
  }
  if (may_take_back && result.wait_until(take_back_at) != std::future_status::ready) {
    // A failed call must not take effect later: take the record back if it was never sent
    // (with it, the other unsent records, whose calls then fail likewise: Kafka has taken
    // nothing for the whole wait). One that may have reached Kafka cannot be taken back; the
    // caller hears that the outcome is unknown.
    (*producer)->PurgeUnsent();
    if (result.wait_until(std::max(deadline, Clock::now() + std::chrono::milliseconds(10))) !=
        std::future_status::ready) {
      return absl::DeadlineExceededError(
          "Kafka did not acknowledge the metadata record in time; it may still take effect");
    }
    const Delivery report = result.get();
    if (report.outcome != Delivery::Outcome::kNotWritten) {
      return absl::DeadlineExceededError(
          "Kafka did not acknowledge the metadata record in time; it may still take effect");
    }
    if (report.err != RD_KAFKA_RESP_ERR__PURGE_QUEUE) {
      return KafkaErrorToStatus(report.err, "writing the metadata record");  // refused: no effect
    }
    return absl::UnavailableError(
        "Kafka did not take the metadata record in time (is Kafka reachable?); nothing was "
        "changed");
  }
  // What a delivery means for a namespace change: one that Kafka may have stored (sent, then
  // failed or timed out, e.g. after OUT_OF_ORDER_SEQUENCE_NUMBER or
  // NOT_ENOUGH_REPLICAS_AFTER_APPEND) may still take effect, so it must not be answered as a
  // change that took none; any other error took none.
  const Delivery report = result.get();
  if (report.outcome == Delivery::Outcome::kUnknown) {
    return absl::DeadlineExceededError(
        absl::StrCat(KafkaErrorToStatus(report.err, "writing the metadata record").message(),
                     "; the change may still take effect"));
  }
  if (!report.written()) return KafkaErrorToStatus(report.err, "writing the metadata record");
  const int64_t offset = report.offset;
  if (offset < 0) {
    // librdkafka's answer to DUPLICATE_SEQUENCE_NUMBER: Kafka stored the record from an earlier
    // send. The change is made; this server just cannot tell when it has read it.
    return absl::DeadlineExceededError(
        "Kafka acknowledged the metadata record without its offset (it had stored an earlier "
        "send of it); the change takes effect");
  }
  if (absl::Status s = WaitApplied(offset, deadline); !s.ok()) {
    // The record is in Kafka: the change takes effect, this server just has not read it yet.
    if (absl::IsUnavailable(s)) {
      return absl::DeadlineExceededError(absl::StrCat("the change is written; ", s.message()));
    }
    return s;
  }
  return offset;
}

void MetaStore::Restate(const NamespaceState& state, Clock::time_point deadline) {
  auto offset = ProduceAndApply(
      state.namespace_id, MakeRecord(NamespaceRecord::RESTATE, state, options_.writer), deadline);
  if (!offset.ok()) {
    spdlog::warn("restating namespace {}: {}", state.namespace_id, offset.status().ToString());
  }
}

void MetaStore::RestateIfStale(uint64_t namespace_id, Clock::time_point deadline) {
  std::optional<NamespaceState> state;
  {
    std::lock_guard lock(mu_);
    if (!table_.LatestRecordStale(namespace_id)) return;
    state = table_.Get(namespace_id);
  }
  if (state) Restate(*state, deadline);
}

namespace {

// FAILED_PRECONDITION unless the namespace lives in the slot asked for (if any).
absl::Status CheckWantedSlot(const NamespaceState& state, const std::optional<Slot>& wanted) {
  if (!wanted || state.slot == *wanted) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("namespace ", state.namespace_id, " lives in ", state.slot.topic, "[",
                   state.slot.partition, "], not in ", wanted->topic, "[", wanted->partition,
                   "]; a namespace never moves (delete it to create it elsewhere)"));
}

}  // namespace

absl::StatusOr<std::pair<NamespaceState, bool>> MetaStore::Create(
    uint64_t namespace_id, const std::optional<Slot>& wanted,
    const std::function<absl::StatusOr<int64_t>(const Slot&)>& slot_end,
    Clock::time_point deadline) {
  if (wanted) {
    bool elsewhere = false;
    {
      std::lock_guard lock(mu_);
      if (absl::Status s = CheckOurSlotLocked(*wanted); !s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot create namespace ", namespace_id, ": ", s.message()));
      }
      const std::optional<NamespaceState> existing = table_.Get(namespace_id);
      elsewhere = existing && !CheckWantedSlot(*existing, wanted).ok();
    }
    // Refused only on a table that has caught up: the namespace may have been deleted just now
    // through another walserver, to be created in this slot.
    if (elsewhere) {
      if (absl::Status s = CatchUp(deadline); !s.ok()) return s;
    }
  }
  NamespaceState proposal;
  uint64_t earlier_epoch = 0;
  {
    std::lock_guard lock(mu_);
    if (auto existing = table_.Get(namespace_id)) {
      if (absl::Status s = CheckWantedSlot(*existing, wanted); !s.ok()) return s;
      return std::make_pair(*existing, false);
    }
    proposal.slot = wanted ? *wanted : table_.LeastLoadedSlot();
    earlier_epoch = table_.EarlierEpoch(namespace_id);
  }
  proposal.namespace_id = namespace_id;
  absl::StatusOr<int64_t> start = slot_end(proposal.slot);
  if (!start.ok()) return start.status();
  proposal.start_offset = *start;
  StartAbove(earlier_epoch, &proposal);
  auto offset = ProduceAndApply(
      namespace_id, MakeRecord(NamespaceRecord::CREATE, proposal, options_.writer), deadline);
  if (!offset.ok()) return offset.status();
  std::optional<NamespaceState> winner = Get(namespace_id);
  if (!winner) {
    return absl::AbortedError(
        absl::StrCat("namespace ", namespace_id, " was deleted while being created; retry"));
  }
  const bool created = winner->meta_offset == *offset;
  if (!created) {
    // We lost a race to another CREATE. Our record is now the key's latest, which compaction
    // would keep: restate the winner after it.
    Restate(*winner, deadline);
  } else if (winner->epoch != proposal.epoch) {
    // Our view missed an acquisition of an earlier incarnation: the table started this one
    // higher than our record says (NamespaceTable::Apply). Restate it, so compaction keeps that.
    RestateIfStale(namespace_id, deadline);
    if (auto restated = Get(namespace_id)) winner = restated;
  }
  if (absl::Status s = CheckWantedSlot(*winner, wanted); !s.ok()) return s;
  return std::make_pair(*winner, created);
}

absl::StatusOr<NamespaceState> MetaStore::Change(uint64_t namespace_id,
                                                 meta::v1::NamespaceRecord::Kind kind,
                                                 const std::function<bool(NamespaceState&)>& modify,
                                                 Clock::time_point deadline, int64_t* offset) {
  std::optional<NamespaceState> state = Get(namespace_id);
  if (!state) return absl::NotFoundError(absl::StrCat("namespace ", namespace_id, " not found"));
  if (!modify(*state)) return *state;
  auto written = ProduceAndApply(namespace_id, MakeRecord(kind, *state, options_.writer), deadline);
  if (!written.ok()) return written.status();
  if (offset != nullptr) *offset = *written;
  RestateIfStale(namespace_id, deadline);
  state = Get(namespace_id);
  if (!state) return absl::NotFoundError(absl::StrCat("namespace ", namespace_id, " was deleted"));
  return *state;
}

absl::StatusOr<NamespaceState> MetaStore::Truncate(uint64_t namespace_id, int64_t truncated_before,
                                                   Clock::time_point deadline) {
  return Change(
      namespace_id, NamespaceRecord::TRUNCATE,
      [&](NamespaceState& state) {
        if (truncated_before <= state.truncated_before) return false;  // nothing to change
        state.truncated_before = truncated_before;
        return true;
      },
      deadline);
}

absl::StatusOr<NamespaceState> MetaStore::Acquire(uint64_t namespace_id,
                                                  Clock::time_point deadline) {
  // Each attempt proposes the next epoch; only the first record that raises the epoch counts.
  // Losing means another acquirer won just now: try again above it.
  for (int attempt = 0; attempt < 10; ++attempt) {
    uint64_t proposed = 0;
    int64_t offset = -1;
    absl::StatusOr<NamespaceState> now = Change(
        namespace_id, NamespaceRecord::ACQUIRE,
        [&](NamespaceState& state) {
          proposed = ++state.epoch;
          return true;
        },
        deadline, &offset);
    if (!now.ok()) return now.status();
    if (now->epoch == proposed && now->epoch_meta_offset == offset) return *now;
  }
  return absl::AbortedError(absl::StrCat("namespace ", namespace_id,
                                         " is being acquired by others at the same time; retry"));
}

absl::StatusOr<NamespaceState> MetaStore::RecordFence(uint64_t namespace_id, Fence fence,
                                                      Clock::time_point deadline) {
  return Change(
      namespace_id, NamespaceRecord::FENCE,
      [&](NamespaceState& state) {
        state.fences.push_back(fence);
        return true;
      },
      deadline);
}

absl::Status MetaStore::CatchUp(Clock::time_point deadline) {
  auto end = QueryWatermarks(watermarks_client_.get(), Slot{options_.topic, 0},
                             Within(deadline, kKafkaRequestTimeout));
  if (!end.ok()) return end.status();
  return WaitApplied(end->high - 1, deadline);
}

absl::Status MetaStore::Delete(uint64_t namespace_id, Clock::time_point deadline) {
  std::optional<NamespaceState> state = Get(namespace_id);
  if (!state) return absl::NotFoundError(absl::StrCat("namespace ", namespace_id, " not found"));
  state->deleted = true;
  return ProduceAndApply(namespace_id, MakeRecord(NamespaceRecord::DELETE, *state, options_.writer),
                         deadline)
      .status();
}

absl::Status MetaStore::RecordPrune(const Slot& slot, int64_t before, Clock::time_point deadline) {
  meta::v1::SlotRecord record;
  record.set_version(1);
  record.set_topic(slot.topic);
  record.set_partition(slot.partition);
  record.set_pruned_before(before);
  record.set_writer(options_.writer);
  return ProduceAndApply(absl::StrCat(kPruneKeyPrefix, slot.topic, "/", slot.partition),
                         record.SerializeAsString(), deadline)
      .status();
}

int64_t MetaStore::PrunedBefore(const Slot& slot) const {
  std::lock_guard lock(mu_);
  auto it = pruned_before_.find(slot);
  return it == pruned_before_.end() ? 0 : it->second;
}

std::map<Slot, int64_t> MetaStore::LowestFirstEntryIds() const {
  std::lock_guard lock(mu_);
  return table_.LowestFirstEntryIds();
}

std::optional<AppendRoute> MetaStore::Route(uint64_t namespace_id) const {
  std::lock_guard lock(mu_);
  // A table stopped at damaged records may lack acquisitions and deletions made since: no
  // append is routed by it (each catches up, which fails and says why).
  if (!damaged_at_.empty()) return std::nullopt;
  return table_.Route(namespace_id);
}

std::optional<NamespaceState> MetaStore::Get(uint64_t namespace_id) const {
  std::lock_guard lock(mu_);
  return table_.Get(namespace_id);
}

std::optional<int64_t> MetaStore::TruncatedBefore(uint64_t namespace_id,
                                                  int64_t incarnation) const {
  std::lock_guard lock(mu_);
  return table_.TruncatedBefore(namespace_id, incarnation);
}

absl::Status MetaStore::CheckOurSlot(const Slot& slot) const {
  std::lock_guard lock(mu_);
  return CheckOurSlotLocked(slot);
}

absl::Status MetaStore::CheckOurSlotLocked(const Slot& slot) const {
  const std::vector<Slot>& ours = table_.slots();
  if (std::find(ours.begin(), ours.end(), slot) != ours.end()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      slot.topic, "[", slot.partition, "] is not a slot of this walserver (its slots are ",
      ours.front().topic, "[0] to ", ours.back().topic, "[", ours.back().partition,
      "]; see --topic_prefix, --topic_count and --partitions_per_topic)"));
}

std::vector<NamespaceState> MetaStore::InSlot(const Slot& slot) const {
  std::lock_guard lock(mu_);
  return table_.InSlot(slot);
}

std::vector<NamespaceState> MetaStore::List(uint64_t after, size_t limit) const {
  std::lock_guard lock(mu_);
  return table_.List(after, limit);
}

std::vector<std::pair<Slot, size_t>> MetaStore::LoadPerSlot() const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<Slot, size_t>> out;
  const std::vector<size_t> load = table_.LoadPerSlot();
  for (size_t i = 0; i < load.size(); ++i) out.emplace_back(table_.slots()[i], load[i]);
  return out;
}

absl::Status MetaStore::Health() const {
  std::lock_guard lock(mu_);
  if (tail_error_.empty()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat("metadata topic ", options_.topic, ": ", tail_error_));
}

uint64_t MetaStore::records_skipped() const {
  std::lock_guard lock(mu_);
  return skipped_;
}

}  // namespace wal
