// The namespace table kept in the compacted metadata topic. Every change is a record produced to
// that one-partition topic; a tail thread applies the records in offset order, so all servers on
// one Kafka agree on the table without any other store. A change returns once the server has
// read its own record back, so the caller sees the change (and who won a race) at once.
// docs/ARCHITECTURE.md, "Meta records and how races settle", has the rules.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/common/deadline.h"
#include "server/kafka/client.h"
#include "server/kafka/consumer.h"
#include "server/kafka/producer.h"
#include "server/kafka/recovering_producer.h"
#include "server/meta/namespace_table.h"

namespace wal {

struct MetaOptions {
  std::string topic;   // <prefix>_meta
  std::string writer;  // this server's name, recorded in each record
  // How long Open waits for Kafka.
  std::chrono::milliseconds startup_timeout{60000};
};

class MetaStore {
 public:
  // Reads the metadata topic to its end before returning, then keeps tailing it.
  static absl::StatusOr<std::unique_ptr<MetaStore>> Open(const KafkaProperties& properties,
                                                         std::vector<Slot> slots,
                                                         MetaOptions options);
  ~MetaStore();
  // For shutdown: fails the records waiting in the producer and every call waiting on one, and
  // refuses new changes, so that no call waits on an unreachable Kafka any longer.
  void FailPending();

  // Returns the namespace and whether this call created it. `slot_end` gives the current end
  // offset of a slot (the new namespace's start_offset). Blocks until the record is read back.
  // With `wanted`, the namespace goes in that slot: INVALID_ARGUMENT if it is not one of ours,
  // FAILED_PRECONDITION if the namespace is (or, racing, was just created) in another.
  absl::StatusOr<std::pair<NamespaceState, bool>> Create(
      uint64_t namespace_id, const std::optional<Slot>& wanted,
      const std::function<absl::StatusOr<int64_t>(const Slot&)>& slot_end,
      Clock::time_point deadline);
  // Raises the truncation point; NOT_FOUND for an unknown namespace. Blocks like Create.
  absl::StatusOr<NamespaceState> Truncate(uint64_t namespace_id, int64_t truncated_before,
                                          Clock::time_point deadline);
  absl::Status Delete(uint64_t namespace_id, Clock::time_point deadline);
  // Announces this process under its name (MetaOptions::writer) in the metadata topic, after a
  // warning if another process announced the name last from another host or listen address (a
  // restart on the same ones is this server again). From then on, an announcement of the name
  // by another process is logged as an error and counted (name_conflicts).
  absl::Status Announce(const std::string& host, const std::string& listen,
                        Clock::time_point deadline);
  // Announcements of this server's name by other processes since its own.
  uint64_t name_conflicts() const;
  // Raises the namespace's epoch by one and returns the state with the new epoch, which this
  // call's record established (retrying when another server raised it at the same time).
  // NOT_FOUND for an unknown namespace.
  absl::StatusOr<NamespaceState> Acquire(uint64_t namespace_id, Clock::time_point deadline);
  // Records that the fence record of `epoch` lies at `offset` of the namespace's slot.
  absl::StatusOr<NamespaceState> RecordFence(uint64_t namespace_id, Fence fence,
                                             Clock::time_point deadline);
  // Reads the metadata topic up to its current end, so the table holds every change made
  // before this call (by any server).
  absl::Status CatchUp(Clock::time_point deadline);

  // Records that the slot's records below `before` are about to be deleted (pruned on purpose).
  absl::Status RecordPrune(const Slot& slot, int64_t before, Clock::time_point deadline);
  // The highest pruning point recorded for the slot (0: never pruned).
  int64_t PrunedBefore(const Slot& slot) const;
  // Per slot with live namespaces: the lowest first_entry_id among them.
  std::map<Slot, int64_t> LowestFirstEntryIds() const;

  std::optional<NamespaceState> Get(uint64_t namespace_id) const;
  // The truncation point of the namespace's incarnation `incarnation` (NamespaceState's
  // meta_offset); nullopt once that incarnation is deleted, even if the namespace was created
  // again since.
  std::optional<int64_t> TruncatedBefore(uint64_t namespace_id, int64_t incarnation) const;
  std::optional<AppendRoute> Route(uint64_t namespace_id) const;
  // Live namespaces per slot, in allocation order.
  std::vector<std::pair<Slot, size_t>> LoadPerSlot() const;
  // OK while the metadata topic is tailed without error; else why not.
  absl::Status Health() const;
  // The producer of metadata records now (for tests and metrics).
  const Producer* producer() const;
  // Producers replaced after a fatal error.
  uint64_t producer_replacements() const;
  // A client for watermark queries only, shared with the reader: every librdkafka client costs
  // a thread that wakes up even when walserver is idle.
  rd_kafka_t* watermarks_client() const { return watermarks_client_.get(); }
  std::vector<NamespaceState> List(uint64_t after, size_t limit) const;
  // Live namespaces of the slot, in id order.
  std::vector<NamespaceState> InSlot(const Slot& slot) const;
  // INVALID_ARGUMENT, saying which slots are, unless `slot` is one of this server's.
  absl::Status CheckOurSlot(const Slot& slot) const;
  uint64_t records_skipped() const;

 private:
  MetaStore(std::vector<Slot> slots, MetaOptions options);
  void TailLoop();
  absl::Status CheckOurSlotLocked(const Slot& slot) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A "server/<name>" record: remembered and reported when it announces this server's name.
  void ApplyAnnouncementLocked(const rd_kafka_message_t& msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyMessageLocked(const rd_kafka_message_t& msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Produces `record` for `namespace_id`, waits for Kafka's ack and for the tail thread to apply
  // it; returns its offset.
  absl::StatusOr<int64_t> ProduceAndApply(uint64_t namespace_id,
                                          const meta::v1::NamespaceRecord& record,
                                          Clock::time_point deadline);
  absl::StatusOr<int64_t> ProduceAndApply(const std::string& key, std::string value,
                                          Clock::time_point deadline);
  absl::Status WaitApplied(int64_t offset, Clock::time_point deadline);
  // One change of a namespace: `modify` its state as this server knows it (false: nothing to
  // change, the state is the answer), write it as a record of `kind`, restate it if this
  // server's view was stale, and read the state back. `offset`, when given, gets the record's.
  absl::StatusOr<NamespaceState> Change(uint64_t namespace_id, meta::v1::NamespaceRecord::Kind kind,
                                        const std::function<bool(NamespaceState&)>& modify,
                                        Clock::time_point deadline, int64_t* offset = nullptr);
  void Restate(const NamespaceState& state, Clock::time_point deadline);
  // Restates what the tail found stale, on its own thread (the tail thread cannot wait for its
  // own reading): deletions a stale record came after or that carry too low an epoch
  // (kStaleAfterDelete), and namespaces created again by a record from a view that missed an
  // earlier incarnation's epochs. Every server does it, so that no crash of one loses it.
  void RestateLoop();
  // Restates the namespace if the latest record of its key falls short of its state (it was
  // written from a stale view), so that compaction cannot lose a change.
  void RestateIfStale(uint64_t namespace_id, Clock::time_point deadline);

  const MetaOptions options_;
  // Replaced after a fatal error (the idempotent producer's sequence state, say), which no
  // record could ever get past.
  std::unique_ptr<RecoveringProducer> producer_;
  std::unique_ptr<Consumer> consumer_;
  // For CatchUp's end-of-topic queries: kept apart from the tail consumer, whose fetches a
  // query would wait behind while Kafka is unreachable.
  KafkaHandle watermarks_client_;

  // std::mutex rather than absl::Mutex: ThreadSanitizer sees it without an instrumented Abseil.
  mutable std::mutex mu_;
  // A thread in WaitApplied. Each has its own condition variable, woken only once the tail has
  // passed its offset: with one shared variable, every record applied woke every waiting call
  // (with 256 CreateNamespace calls at once, most of walserver's CPU went to those wake-ups).
  struct AppliedWaiter {
    std::condition_variable cv;
    bool woken = false;
  };
  // Wakes (and forgets) the waiters whose offset the tail has passed, or all when failing.
  void WakeWaitersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::multimap<int64_t, AppliedWaiter*> waiters_ ABSL_GUARDED_BY(mu_);  // by offset
  NamespaceTable table_ ABSL_GUARDED_BY(mu_);
  int64_t next_offset_ ABSL_GUARDED_BY(mu_) = 0;  // all records below are applied
  uint64_t skipped_ ABSL_GUARDED_BY(mu_) = 0;
  // The latest announcement of this server's name read so far, and the offset of its own.
  std::optional<meta::v1::ServerRecord> last_announcement_ ABSL_GUARDED_BY(mu_);
  int64_t own_announcement_offset_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t name_conflicts_ ABSL_GUARDED_BY(mu_) = 0;
  const uint64_t session_;  // random per process: tells this process's announcement from others'
  std::string tail_error_ ABSL_GUARDED_BY(mu_);
  // Set when the tail met damaged records: it reads nothing after them, waits for it fail at
  // once, and no append is routed any more.
  std::string damaged_at_ ABSL_GUARDED_BY(mu_);
  std::map<Slot, int64_t> pruned_before_ ABSL_GUARDED_BY(mu_);

  std::atomic<bool> stop_{false};
  std::atomic<bool> failing_{false};  // FailPending() was called
  std::thread tail_thread_;
  std::condition_variable restate_cv_;
  std::vector<uint64_t> restate_ ABSL_GUARDED_BY(mu_);  // namespaces for RestateLoop
  std::thread restate_thread_;
};

}  // namespace wal
