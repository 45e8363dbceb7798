// Requests about topics and partitions rather than records: watermarks, DeleteRecords, topic
// creation and checks. Each takes any client handle and a timeout.
#pragma once

#include <librdkafka/rdkafka.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/common/deadline.h"
#include "server/common/slot.h"

namespace wal {

struct Watermarks {
  int64_t low = 0;   // first offset still in Kafka
  int64_t high = 0;  // next offset to be written
};
// For shutdown: watermark and time queries under way try no more (the try under way, at most
// 2 s, still ends).
void CancelWatermarkQueries();
// How many times CancelWatermarkQueries was called: work that began before a change must stop.
uint64_t WatermarkQueryCancellations();
// Every call here waits on Kafka until `deadline` at most (none, time_point::max(): the
// default kKafkaRequestTimeout), and turns it into librdkafka's timeout itself.
//
// The partition's watermarks (Kafka's ListOffsets, earliest and latest; the high one as a
// read_committed consumer sees it); errors that a retry may cure are retried while time is left.
absl::StatusOr<Watermarks> QueryWatermarks(rd_kafka_t* rk, const Slot& slot,
                                           Clock::time_point deadline);
// The first offset of the partition whose record timestamp is at or after `time_ms` (Kafka's
// offsets-for-times), or -1 when no record is that recent. Bounded like QueryWatermarks.
absl::StatusOr<int64_t> OffsetForTime(rd_kafka_t* rk, const Slot& slot, int64_t time_ms,
                                      Clock::time_point deadline);

// A topic's id (Kafka's topic id): a topic deleted and made again under the same name gets
// another. Zero from a Kafka too old to have topic ids.
struct TopicId {
  uint64_t high = 0;
  uint64_t low = 0;
  bool operator==(const TopicId& o) const { return high == o.high && low == o.low; }
  bool operator!=(const TopicId& o) const { return !(*this == o); }
};
// The id of `topic` now (Kafka's DescribeTopics, a metadata request to the controller that
// the client's metadata names).
absl::StatusOr<TopicId> QueryTopicId(rd_kafka_t* rk, const std::string& topic,
                                     Clock::time_point deadline);

// Deletes the records of a partition below `before` (Kafka's DeleteRecords); returns the new
// low watermark. FAILED_PRECONDITION when the cluster refuses the call for good (a policy such
// as cleanup.policy=compact, an ACL, a Kafka without it).
absl::StatusOr<int64_t> DeleteRecordsBefore(rd_kafka_t* rk, const Slot& slot, int64_t before,
                                            Clock::time_point deadline);

struct TopicSpec {
  std::string name;
  int partitions = 1;
  int replication_factor = -1;  // -1: the broker's default
  std::map<std::string, std::string> configs;
};

// Creates the topics that are missing and checks the ones that exist: partition count must match
// and each config in the spec must hold its value (a mismatch is an error; the caller decides).
// Every topic must have at least as many replicas as its min.insync.replicas, or Kafka refuses
// every append: an existing topic is held to its own setting (FAILED_PRECONDITION naming it), one
// made now with the brokers' default replication factor (-1) to the spec's (FAILED_PRECONDITION
// whose message holds kFewerThanMinInsync).
inline constexpr char kFewerThanMinInsync[] = "--min_insync_replicas";
inline constexpr char kFewerThanOwnMinInsync[] = "fewer than its min.insync.replicas";
absl::Status EnsureTopics(rd_kafka_t* rk, const std::vector<TopicSpec>& topics,
                          Clock::time_point deadline);

// Who holds a partition's copies, from a metadata request: its leader (and the address it
// advertises), its replicas and those in sync.
struct PartitionReplicas {
  int32_t leader = -1;
  std::string leader_address;
  std::vector<int32_t> replicas;
  std::vector<int32_t> in_sync;
};
absl::StatusOr<PartitionReplicas> DescribeReplicas(rd_kafka_t* rk, const Slot& slot,
                                                   Clock::time_point deadline);

// Asks any broker for the cluster's metadata: the number of live brokers, or UNAVAILABLE when
// none answered by `deadline`.
absl::StatusOr<int> CountLiveBrokers(rd_kafka_t* rk, Clock::time_point deadline);

// Waits until every topic is known to the client's metadata with its partitions led.
absl::Status WaitForTopics(rd_kafka_t* rk, const std::vector<TopicSpec>& topics,
                           Clock::time_point deadline);

}  // namespace wal
