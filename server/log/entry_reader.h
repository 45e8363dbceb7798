// Streams the entries of one namespace out of its slot; where a Read goes after the gRPC layer.
//
//   EntryReader::Start -> a thread per read: Run checks the namespace (meta store) and the slot's
//   end (Kafka), makes a ReadMember (read_member.h) and joins it to a SlotScan (slot_scan.h)
//   -> the scan's consumer reads the slot for all its members -> each member reassembles its
//   namespace's entries (entry_assembler.h) and queues batches -> the read's thread sends them
//   to its ReadSink (the gRPC stream).
//
// A shared scan never waits for another call's client: a read whose queue passes
// read_queue_bytes is detached and goes on with a scan of its own once its client pulls again,
// so a slow or stalled client delays only its own read. The reads of one ReadMany alone in a
// scan are waited for while their client keeps pulling, rather than read the slot again for
// them. A scan of its own waits up to a second for its client, then lets a stalled one go too
// (slot_scan.h, WaitForPullingClients and WaitForSlowClients).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/common/deadline.h"
#include "server/common/metrics.h"
#include "server/common/slot.h"
#include "server/kafka/admin.h"
#include "server/kafka/client.h"
#include "server/kafka/consumer.h"
#include "server/log/read.h"
#include "server/log/read_member.h"
#include "server/log/slot_scan.h"
#include "server/meta/meta_store.h"

namespace wal {

// The readers' fetch.message.max.bytes, given the properties walserver's producers write the
// slots with. librdkafka decompresses a whole fetch before the scan takes any of it: 64 KiB of
// lz4 batches can hold about 16 MiB of entries (lz4 packs 1 MiB of one repeated byte into about
// 4 KiB; tests/scripts/read_memory_test.sh), of gzip or zstd more. Uncompressed batches hold
// what they carry, so when the producers' codec is none they are fetched 1 MiB at a time: there
// each fetch's round trip to the broker, not memory, is what costs
// (docs/benchmarks/2026-12-05-fetch-size-replay.md). A reader cannot tell how a batch was packed:
// compressed batches that another setting wrote are fetched by this one's size too
// (docs/OPERATIONS.md, --compression).
int64_t ReaderFetchBytes(const KafkaProperties& producer_properties);

class EntryReader : private ScanHost {
 public:
  EntryReader(KafkaProperties properties, ReaderOptions options, MetaStore* meta, Metrics* metrics,
              std::string name);
  ~EntryReader();  // waits for running reads, which the server has cancelled by then

  // Starts a read on its own thread; RESOURCE_EXHAUSTED when too many reads are running.
  absl::Status Start(ReadParams params, std::shared_ptr<ReadSink> sink);

  // Starts a ReadMany on one thread of its own, which delivers the entries of every read in
  // `reads` (each namespace at most once; one deadline) to `sink`, and after each namespace's
  // last entry a ReadEnd: its status, or caught_up for a following read that sent its backlog.
  // Counts as one read against max_concurrent_reads.
  absl::Status StartMany(std::vector<ReadParams> reads, std::shared_ptr<ReadSink> sink);

  // Starts a ReadMany of every namespace living in `slot` once the namespace table caught up,
  // each from `params.start_entry_id` or its first entry if that is higher, on one thread of its
  // own, as StartMany. OUT_OF_RANGE for a start past the slot's end.
  absl::Status StartSlot(Slot slot, ReadParams params, std::shared_ptr<ReadSink> sink);

  // Per namespace living in `slot` now: the id of its first readable entry (or of an entry
  // still incomplete before it), or nullopt when it has none up to the slot's end as the call
  // began, which is at least `end_at_least` (else UNAVAILABLE). Blocks; an error when any
  // namespace's part failed. For the pruner: a namespace with none needs none of the slot's
  // records below that end.
  using FirstEntries = std::map<uint64_t, std::optional<int64_t>>;
  absl::StatusOr<FirstEntries> FirstEntriesOf(const Slot& slot, int64_t end_at_least,
                                              Clock::time_point deadline);

  uint64_t records_skipped() const { return context_.records_skipped.load(); }
  // The slots' indexes, which the SlotIndexStore keeps in Kafka.
  SlotIndexes& slot_indexes() { return context_.slot_indexes; }
  // Ends every running read with UNAVAILABLE within about 100 ms (graceful shutdown), and
  // refuses new ones.
  void Stop() { context_.stopping = true; }

 private:
  // Runs `run` on a thread of its own, counted against max_concurrent_reads, and finishes `sink`
  // with its status.
  absl::Status Launch(std::shared_ptr<ReadSink> sink, std::function<absl::Status()> run);
  absl::Status Run(const ReadParams& params, const std::shared_ptr<ReadSink>& sink);
  absl::Status RunMany(const std::vector<ReadParams>& reads, const std::shared_ptr<ReadSink>& sink);
  absl::Status RunSlot(const Slot& slot, const ReadParams& params,
                       const std::shared_ptr<ReadSink>& sink);
  // How long a read may spend catching up with the metadata topic before it starts.
  static Clock::time_point CatchUpBy(Clock::time_point stop_at);
  // How long a read waits for its topic's id (CheckIndex): a metadata round trip, which a
  // controller that is down may hold up.
  static constexpr std::chrono::milliseconds kTopicIdTimeout{1000};
  // What one call learned of the slots it reads: Kafka is asked once per slot and topic.
  struct SlotsSeen {
    std::map<Slot, Watermarks> marks;
    std::map<std::string, absl::StatusOr<TopicId>> topic_ids;
    // Until when the call may ask again for ends short of what was acknowledged (QueryEnds);
    // set by the first short one.
    std::optional<Clock::time_point> stale_wait_until;
  };
  // The part of RunMany after the catch-up: `stop_at` is the call's, `seen` what it learned.
  absl::Status ServeMany(const std::vector<ReadParams>& reads, Clock::time_point stop_at,
                         SlotsSeen* seen, const std::shared_ptr<ReadSink>& sink);
  // Checks a read against its namespace (after the catch-up) and makes its member; nullptr when
  // there is nothing to read.
  absl::StatusOr<std::shared_ptr<ReadMember>> MakeMember(const ReadParams& params,
                                                         const std::shared_ptr<ReadSink>& sink,
                                                         Clock::time_point stop_at, SlotsSeen* seen,
                                                         std::shared_ptr<DeliveryBell> bell);
  // The slot's watermarks, for a read's end (ReaderOptions::acknowledged_end says why it may
  // ask again).
  absl::StatusOr<Watermarks> QueryEnds(const Slot& slot, Clock::time_point stop_at,
                                       SlotsSeen* seen);
  // The slot's index must vouch only for the log there is now: it is dropped when the topic
  // was made again or the partition's end went back.
  void CheckIndex(const Slot& slot, const Watermarks& marks, int64_t indexed_end,
                  Clock::time_point stop_at, SlotsSeen* seen);
  // Records [from, low) of `slot` are missing from Kafka: OK if walserver pruned them (then no
  // live namespace had a readable entry there), else DATA_LOSS.
  absl::Status PrunedOrLost(const Slot& slot, int64_t from, int64_t low,
                            Clock::time_point deadline) override;
  absl::StatusOr<int64_t> LowWatermark(const Slot& slot, Clock::time_point deadline) override;
  // Adds `member` to a scan of its slot that has not yet passed its start, or starts one. With
  // `shared` false, always starts a scan that no other read joins.
  void Join(const std::shared_ptr<ReadMember>& member, bool shared);
  void ScanEnded(SlotScan* scan) override;
  // Takes an idle consumer of `size` that no fetch holds up (see IdleConsumer), else makes one.
  absl::StatusOr<std::unique_ptr<Consumer>> AcquireConsumer(FetchSize size) override;
  void ReleaseConsumer(std::unique_ptr<Consumer> consumer, FetchSize size,
                       bool fetch_may_wait) override;

  // A consumer released at a partition's end may have a fetch waiting at the broker for up to
  // fetch.wait.max.ms; assigned again before it returns, it fetches nothing until then (a read
  // that skips once waited 40 ms for its first record). It is not taken before ready_at.
  struct IdleConsumer {
    std::unique_ptr<Consumer> consumer;
    Clock::time_point ready_at;
  };

  // The consumers' properties by FetchSize.
  const std::array<KafkaProperties, 2> properties_;
  const std::chrono::milliseconds fetch_wait_;
  const std::string name_;
  MetaStore* const meta_;
  ReadContext context_;
  std::atomic<uint64_t> consumers_made_{0};

  // A slot's ends short of what was acknowledged (QueryEnds), until one is not: since when, and
  // the acknowledged end then.
  struct StaleEnd {
    Clock::time_point since;
    int64_t acknowledged = 0;
  };
  std::mutex stale_ends_mu_;
  std::map<Slot, StaleEnd> stale_ends_ ABSL_GUARDED_BY(stale_ends_mu_);

  std::mutex mu_;
  std::condition_variable idle_cv_;
  size_t running_ ABSL_GUARDED_BY(mu_) = 0;  // reads (capped by max_concurrent_reads)
  size_t scans_running_ ABSL_GUARDED_BY(mu_) = 0;
  // By FetchSize.
  std::array<std::vector<IdleConsumer>, 2> idle_consumers_ ABSL_GUARDED_BY(mu_);
  // The joinable scan of each slot (the newest); older ones finish on their own.
  std::map<Slot, std::shared_ptr<SlotScan>> scans_ ABSL_GUARDED_BY(mu_);
};

}  // namespace wal
