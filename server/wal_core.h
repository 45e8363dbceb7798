// The Kafka side of a walserver, without gRPC: the Kafka clients (or the in-process mock
// cluster), the topics, the namespace table, the writer and the reader, started in that order
// and torn down in reverse. WalServer serves it over gRPC; the core tests drive it directly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "server/common/metrics.h"
#include "server/common/slot.h"
#include "server/kafka/admin.h"
#include "server/kafka/client.h"
#include "server/kafka/mock_cluster.h"
#include "server/kafka/stale_leaders.h"
#include "server/log/entry_reader.h"
#include "server/log/entry_writer.h"
#include "server/log/retried_entries.h"
#include "server/meta/meta_store.h"
#include "server/server_options.h"

namespace wal {

class WalCore {
 public:
  // `o` has been validated and has its name. `reader_tuning` gives the reader's options that no
  // flag sets (batch and queue sizes); the core tests make them small.
  static absl::StatusOr<std::unique_ptr<WalCore>> Start(const ServerOptions& o,
                                                        ReaderOptions reader_tuning = {});
  ~WalCore();  // Close()

  // Ends every read at once (shutdown: a following read would hold the grace period), and
  // saves the slot indexes a last time meanwhile.
  void StopReads();
  // Fails every call still waiting on Kafka (shutdown, once the grace period is over), and
  // every retry still looking for its first copies.
  void FailPending();
  // Closes the reader, the writer, the namespace table and the Kafka clients, in that order.
  // The metrics' counters stay readable; nothing else may be used after (nor Metrics::Render:
  // the collectors WalServer added point into what was closed).
  void Close();

  // Settings common to every Kafka client, the operator's --kafka.* included.
  const KafkaProperties& kafka() const { return kafka_; }
  // The reader's consumers' settings (their fetch size follows the writer's codec).
  const KafkaProperties& reader_kafka() const { return reader_kafka_; }
  rd_kafka_t* admin() const { return admin_.get(); }
  MockCluster* mock_cluster() const { return mock_.get(); }  // null on real Kafka
  const std::vector<Slot>& slots() const { return slots_; }
  uint64_t max_entry_bytes() const { return max_entry_bytes_; }
  Metrics& metrics() { return metrics_; }
  MetaStore& meta() { return *meta_; }
  EntryWriter& writer() { return *writer_; }
  EntryReader& reader() { return *reader_; }
  RetriedEntries& retried() { return *retried_; }

 private:
  WalCore() = default;

  // The steps of Start, in order.
  absl::Status ConnectKafka(const ServerOptions& o);
  absl::Status PrepareTopics(const ServerOptions& o);
  absl::Status OpenNamespaceTable(const ServerOptions& o);
  absl::Status StartWriter(const ServerOptions& o);
  // Writes a record that is no namespace's entry (a fence of namespace 0) at offset 0 of every
  // empty slot, so that a slot's last offset (GetSlot's next_entry_id - 1) of 0 never stands
  // for an entry there: a datanode takes the last offset as a new region's flushed id and
  // replays from the id after it.
  absl::Status BeginEmptySlots(const ServerOptions& o);
  void StartReader(const ServerOptions& o, ReaderOptions reader_options);
  // With the reader's consumer settings, and its idea of what the writer acknowledged.
  void StartRetriedEntries(const ServerOptions& o,
                           std::function<int64_t(const Slot&)> acknowledged_end);
  absl::Status StartIndexStore(const ServerOptions& o);
  // PrepareTopics' parts: the topics walserver needs (the data topics first), and a failure to
  // make or check them restated with the options that fix it.
  std::vector<TopicSpec> TopicSpecs(const ServerOptions& o) const;
  absl::Status ExplainTopicsFailure(const ServerOptions& o, const absl::Status& status) const;
  // Whether the slot indexes are kept in Kafka (<prefix>_index).
  bool KeepsIndexes(const ServerOptions& o) const;

  uint64_t max_entry_bytes_ = 0;
  KafkaProperties kafka_;
  KafkaProperties writer_kafka_;  // the writer's producers' settings (StartWriter)
  KafkaProperties reader_kafka_;
  std::string kafka_batch_bytes_;
  int live_brokers_ = 0;  // when Kafka was first reached (real Kafka only)
  std::vector<Slot> slots_;
  Metrics metrics_;
  std::unique_ptr<MockCluster> mock_;
  KafkaHandle admin_;
  std::unique_ptr<MetaStore> meta_;
  std::unique_ptr<EntryWriter> writer_;
  std::unique_ptr<StaleLeaderWatch> stale_leaders_;  // watches the writer's slots
  std::unique_ptr<EntryReader> reader_;
  // Closed after the writer, whose pending callbacks hold its claims.
  std::unique_ptr<RetriedEntries> retried_;
  std::unique_ptr<SlotIndexStore> index_store_;  // real Kafka with --read_index only
};

}  // namespace wal
