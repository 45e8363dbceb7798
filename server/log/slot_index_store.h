// Keeps each slot's index (log/slot_index.h) in Kafka: one record per slot in the compacted
// topic <prefix>_index, written when the index changed, at most every save_interval and once
// more at shutdown. A walserver that starts reads the topic once, before it serves reads, and
// gives each slot's index what was saved last, so that its first reads skip as the reads before
// its restart did, instead of reading each slot whole once to build the index again.
//
// Why a saved index can be trusted by another process: what it says is about records that
// never change (Kafka's log below its end), and it names the log it describes (the topic's id).
// A read checks that id and the partition's ends before it uses the index (EntryReader::
// CheckIndex), as it does for an index built in memory. Several walservers on the same topics
// each save theirs; the last saved wins, and any of them is true of its log.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "server/common/metrics.h"
#include "server/common/slot.h"
#include "server/kafka/client.h"
#include "server/kafka/consumer.h"
#include "server/kafka/producer.h"
#include "server/kafka/recovering_producer.h"
#include "server/log/slot_index.h"

namespace wal {

// The bytes of one saved index, and back. Decoding refuses anything that is not an index this
// version wrote whole (a record cut short, runs out of order): a refused one is not used.
std::string EncodeSnapshot(const SlotIndex::Snapshot& snapshot);
std::optional<SlotIndex::Snapshot> DecodeSnapshot(std::string_view bytes);
// The record key of a slot's index.
std::string SnapshotKey(const Slot& slot);

struct SlotIndexStoreOptions {
  std::string topic;        // <prefix>_index
  std::string name;         // this walserver's, in the Kafka clients' ids
  std::vector<Slot> slots;  // this walserver's: indexes saved for others are not taken
  std::chrono::milliseconds save_interval{30000};
  // A larger index is not saved (a record must fit the topic's max.message.bytes).
  size_t max_snapshot_bytes = 1 << 20;
  // How long the load at start-up may take; past it, the slots whose index was not read yet
  // build it from their scans.
  std::chrono::milliseconds load_timeout{10000};
};

class SlotIndexStore {
 public:
  // Loads what was saved (for at most load_timeout), then starts the thread that saves the
  // changed indexes every save_interval. `indexes` and `metrics` must outlive the store.
  static absl::StatusOr<std::unique_ptr<SlotIndexStore>> Start(const KafkaProperties& properties,
                                                               SlotIndexes* indexes,
                                                               Metrics* metrics,
                                                               SlotIndexStoreOptions options);
  // Starts the last save of what changed (for at most kFinalSaveTimeout: a shutdown with Kafka
  // away must not wait long) and returns; the thread stops after it.
  void Stop();
  // Stop, and waits for the last save.
  ~SlotIndexStore();

  // How long a save waits for Kafka before it is given up; after a stop, the saves end within
  // kFinalSaveTimeout of it (a shutdown's grace is longer).
  static constexpr std::chrono::milliseconds kSaveTimeout{5000};
  static constexpr std::chrono::milliseconds kFinalSaveTimeout{2000};

 private:
  SlotIndexStore(SlotIndexes* indexes, Metrics* metrics, SlotIndexStoreOptions options)
      : indexes_(indexes), metrics_(metrics), options_(std::move(options)) {}
  struct PendingSave;

  void Run();
  void Load();
  // Produces each index that changed since it was last saved (unless `last`, only those whose
  // next_save_ has come) and waits for Kafka's answers, then takes back what was not sent.
  // Called and returns with `lock` (of mu_) held.
  void SaveChanged(std::unique_lock<std::mutex>& lock, bool last);

  SlotIndexes* const indexes_;
  Metrics* const metrics_;
  const SlotIndexStoreOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;  // a stop, or a save's answer from Kafka
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point stop_by_ ABSL_GUARDED_BY(mu_);  // a stop's saves end
  // After mu_ and cv_, which its delivery reports use: destroyed before them.
  std::unique_ptr<RecoveringProducer> producer_;
  std::unique_ptr<Consumer> consumer_;
  // Of each slot: its index's changes() when it was last saved or restored.
  std::map<Slot, uint64_t> saved_;  // the thread's own
  // Of each slot: when it may be saved again (later for a large index).
  std::map<Slot, std::chrono::steady_clock::time_point> next_save_;  // the thread's own
  static constexpr size_t kSaveBytesPerInterval = 256 << 10;
  std::thread thread_;
};

}  // namespace wal
