// Streams the entries of one namespace out of its slot. A read is checked on a thread of its own,
// then joins a scan of its slot: one consumer from a pool, assigned at an absolute offset, whose
// records go to every read of that slot running at the same time (a datanode opening all its
// regions reads each slot once, not once per region). Each read filters by key, reassembles
// entries and queues batches, which the read's own thread sends to its sink (the gRPC stream).
// A scan never waits for a client: a read whose queue passes read_queue_bytes is detached and
// goes on with a scan of its own once its client pulls again, so a slow or stalled client
// delays only its own read.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/common/deadline.h"
#include "server/common/metrics.h"
#include "server/kafka/client.h"
#include "server/kafka/consumer.h"
#include "server/meta/meta_store.h"
#include "wal/v1/wal.pb.h"

namespace wal {

// Where a read delivers. Implemented by the gRPC layer; called from the read's thread.
class ReadSink {
 public:
  virtual ~ReadSink() = default;
  // Blocks until the sink can take `batch` or the read was cancelled; false when cancelled.
  virtual bool Send(v1::ReadResponse batch) = 0;
  virtual bool cancelled() const = 0;
  // Ends the read; called exactly once, last.
  virtual void Finish(absl::Status status) = 0;
};

struct ReadParams {
  uint64_t namespace_id = 0;
  uint64_t start_entry_id = 0;
  uint64_t limit = 0;
  bool follow = false;
  Clock::time_point deadline = Clock::time_point::max();
};

struct ReaderOptions {
  size_t max_concurrent_reads = 64;
  size_t max_idle_consumers = 4;
  uint64_t max_entry_bytes = 64 << 20;
  size_t batch_bytes = 1 << 20;  // a response message carries about this much
  // Entry bytes a read may have waiting for its client. A read whose client falls further
  // behind leaves the shared scan of its slot (which never waits for one client) and goes on
  // with a scan of its own once its client caught up.
  size_t read_queue_bytes = 8 << 20;
};

class EntryReader {
 public:
  EntryReader(KafkaProperties properties, ReaderOptions options, MetaStore* meta, Metrics* metrics,
              std::string name);
  ~EntryReader();  // waits for running reads, which the server has cancelled by then

  // Starts a read on its own thread; RESOURCE_EXHAUSTED when too many reads are running.
  absl::Status Start(ReadParams params, std::shared_ptr<ReadSink> sink);

  uint64_t records_skipped() const { return records_skipped_.load(); }
  // Ends every running read with UNAVAILABLE within about 100 ms (graceful shutdown), and
  // refuses new ones.
  void Stop() { stopping_ = true; }

 private:
  class Member;
  class SlotScan;
  absl::Status Run(const ReadParams& params, const std::shared_ptr<ReadSink>& sink);
  // Records [from, low) of `slot` are missing from Kafka: OK if walserver pruned them (then no
  // live namespace had a readable entry there), else DATA_LOSS.
  absl::Status PrunedOrLost(const Slot& slot, int64_t from, int64_t low,
                            Clock::time_point deadline);
  // Adds `member` to a scan of its slot that has not yet passed its start, or starts one. With
  // `shared` false, always starts a scan that no other read joins.
  void Join(const std::shared_ptr<Member>& member, bool shared);
  void ScanEnded(SlotScan* scan);
  absl::StatusOr<std::unique_ptr<Consumer>> AcquireConsumer();
  void ReleaseConsumer(std::unique_ptr<Consumer> consumer);

  const KafkaProperties properties_;
  const ReaderOptions options_;
  MetaStore* const meta_;
  Metrics* const metrics_;
  const std::string name_;
  std::atomic<uint64_t> records_skipped_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> consumers_made_{0};

  std::mutex mu_;
  std::condition_variable idle_cv_;
  size_t running_ = 0;  // reads (capped by max_concurrent_reads)
  size_t scans_running_ = 0;
  std::vector<std::unique_ptr<Consumer>> idle_consumers_;
  std::map<Slot, std::shared_ptr<SlotScan>> scans_;
};

}  // namespace wal
