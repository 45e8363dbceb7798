#include "server/kafka/admin.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/common/deadline.h"
#include "server/kafka/client.h"
#include "server/kafka/errors.h"
#include "spdlog/spdlog.h"

namespace wal {

namespace {

struct AdminOptionsDeleter {
  void operator()(rd_kafka_AdminOptions_t* o) const { rd_kafka_AdminOptions_destroy(o); }
};
struct QueueDeleter {
  void operator()(rd_kafka_queue_t* q) const { rd_kafka_queue_destroy(q); }
};
struct EventDeleter {
  void operator()(rd_kafka_event_t* e) const { rd_kafka_event_destroy(e); }
};
using EventPtr = std::unique_ptr<rd_kafka_event_t, EventDeleter>;

// Runs one admin request and waits for its result event, up to `grace_ms` past the request's
// timeout (librdkafka answers a timed-out request a little after it). `request_error`, when
// given, gets the error of the request as a whole.
absl::StatusOr<EventPtr> RunAdmin(
    rd_kafka_t* rk, rd_kafka_admin_op_t op, int timeout_ms,
    const std::function<void(rd_kafka_AdminOptions_t*, rd_kafka_queue_t*)>& submit,
    rd_kafka_resp_err_t* request_error = nullptr, int grace_ms = 2000) {
  std::unique_ptr<rd_kafka_queue_t, QueueDeleter> queue(rd_kafka_queue_new(rk));
  std::unique_ptr<rd_kafka_AdminOptions_t, AdminOptionsDeleter> options(
      rd_kafka_AdminOptions_new(rk, op));
  char errstr[512];
  rd_kafka_AdminOptions_set_request_timeout(options.get(), timeout_ms, errstr, sizeof(errstr));
  if (op == RD_KAFKA_ADMIN_OP_CREATETOPICS || op == RD_KAFKA_ADMIN_OP_DELETERECORDS) {
    rd_kafka_AdminOptions_set_operation_timeout(options.get(), timeout_ms, errstr, sizeof(errstr));
  }
  submit(options.get(), queue.get());
  EventPtr event(rd_kafka_queue_poll(queue.get(), timeout_ms + grace_ms));
  if (!event) return absl::UnavailableError("Kafka admin request timed out");
  if (rd_kafka_event_error(event.get())) {
    if (request_error != nullptr) *request_error = rd_kafka_event_error(event.get());
    return KafkaErrorToStatus(
        rd_kafka_event_error(event.get()),
        absl::StrCat("Kafka admin request (", rd_kafka_event_error_string(event.get()), ")"));
  }
  return event;
}

// Number of partitions of `topic` and the fewest replicas any of them has, from a metadata
// request.
absl::StatusOr<std::pair<int, int>> DescribeTopicShape(rd_kafka_t* rk, const std::string& topic,
                                                       int timeout_ms) {
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
  const rd_kafka_metadata_t* md = nullptr;
  rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, timeout_ms);
  rd_kafka_topic_destroy(rkt);
  if (err) return KafkaErrorToStatus(err, absl::StrCat("metadata of topic ", topic));
  std::pair<int, int> shape{-1, -1};
  absl::Status status = absl::OkStatus();
  for (int i = 0; i < md->topic_cnt; ++i) {
    const rd_kafka_metadata_topic_t& t = md->topics[i];
    if (topic != t.topic) continue;
    if (t.err) {
      status = KafkaErrorToStatus(t.err, absl::StrCat("metadata of topic ", topic));
      break;
    }
    shape.first = t.partition_cnt;
    for (int p = 0; p < t.partition_cnt; ++p) {
      if (shape.second < 0 || t.partitions[p].replica_cnt < shape.second) {
        shape.second = t.partitions[p].replica_cnt;
      }
      if (t.partitions[p].leader < 0) {
        status = absl::UnavailableError(
            absl::StrCat("partition ", t.partitions[p].id, " of ", topic, " has no leader"));
      }
    }
  }
  rd_kafka_metadata_destroy(md);
  if (!status.ok()) return status;
  if (shape.first < 0) return absl::NotFoundError(absl::StrCat("topic ", topic, " not found"));
  return shape;
}

absl::StatusOr<std::map<std::string, std::string>> DescribeTopicConfigs(rd_kafka_t* rk,
                                                                        const std::string& topic,
                                                                        int timeout_ms) {
  rd_kafka_ConfigResource_t* resource =
      rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic.c_str());
  auto event = RunAdmin(rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS, timeout_ms,
                        [&](rd_kafka_AdminOptions_t* options, rd_kafka_queue_t* queue) {
                          rd_kafka_DescribeConfigs(rk, &resource, 1, options, queue);
                        });
  rd_kafka_ConfigResource_destroy(resource);
  if (!event.ok()) return event.status();
  const rd_kafka_DescribeConfigs_result_t* result =
      rd_kafka_event_DescribeConfigs_result(event->get());
  size_t count = 0;
  const rd_kafka_ConfigResource_t** resources =
      rd_kafka_DescribeConfigs_result_resources(result, &count);
  std::map<std::string, std::string> configs;
  for (size_t i = 0; i < count; ++i) {
    if (rd_kafka_ConfigResource_error(resources[i])) {
      return KafkaErrorToStatus(rd_kafka_ConfigResource_error(resources[i]),
                                absl::StrCat("describing topic ", topic));
    }
    size_t entry_count = 0;
    const rd_kafka_ConfigEntry_t** entries =
        rd_kafka_ConfigResource_configs(resources[i], &entry_count);
    for (size_t e = 0; e < entry_count; ++e) {
      const char* value = rd_kafka_ConfigEntry_value(entries[e]);
      configs[rd_kafka_ConfigEntry_name(entries[e])] = value ? value : "";
    }
  }
  return configs;
}

// Settings where more than asked for is as good (a topic an operator tuned up is fine).
bool AtLeastIsEnough(const std::string& key) {
  return key == "max.message.bytes" || key == "min.insync.replicas";
}

// With the brokers' default replication factor, the replicas a topic got are known only now: fewer
// than its min.insync.replicas and Kafka refuses every append (NOT_ENOUGH_REPLICAS).
absl::Status CheckReplicasForMinInsync(rd_kafka_t* rk, const TopicSpec& spec, int timeout_ms) {
  auto it = spec.configs.find("min.insync.replicas");
  int min_insync = 1;
  if (it == spec.configs.end() || !absl::SimpleAtoi(it->second, &min_insync)) {
    return absl::OkStatus();
  }
  auto shape = DescribeTopicShape(rk, spec.name, timeout_ms);
  if (!shape.ok()) return shape.status();
  if (shape->second < min_insync) {
    return absl::FailedPreconditionError(
        absl::StrCat("topic ", spec.name, " has ", shape->second, " replica(s), fewer than ",
                     kFewerThanMinInsync, "=", min_insync, ": Kafka would refuse every append"));
  }
  return absl::OkStatus();
}

absl::Status CheckExistingTopic(rd_kafka_t* rk, const TopicSpec& spec, int timeout_ms) {
  auto shape = DescribeTopicShape(rk, spec.name, timeout_ms);
  if (!shape.ok()) return shape.status();
  if (shape->first != spec.partitions) {
    return absl::FailedPreconditionError(
        absl::StrCat("topic ", spec.name, " exists with ", shape->first, " partitions, expected ",
                     spec.partitions, "; fix the topic or the partition setting"));
  }
  if (spec.replication_factor > 0 && shape->second < spec.replication_factor) {
    return absl::FailedPreconditionError(
        absl::StrCat("topic ", spec.name, " exists with replication factor ", shape->second,
                     ", expected at least ", spec.replication_factor));
  }
  auto configs = DescribeTopicConfigs(rk, spec.name, timeout_ms);
  if (!configs.ok()) return configs.status();
  for (const auto& [key, want] : spec.configs) {
    auto it = configs->find(key);
    const std::string have = it == configs->end() ? "(unset)" : it->second;
    int64_t have_n = 0, want_n = 0;
    const bool ok = have == want || (AtLeastIsEnough(key) && absl::SimpleAtoi(have, &have_n) &&
                                     absl::SimpleAtoi(want, &want_n) && have_n >= want_n);
    if (!ok) {
      return absl::FailedPreconditionError(
          absl::StrCat("topic ", spec.name, " has ", key, "=", have, ", expected ", want));
    }
  }
  // The topic's own setting decides, which may be above the one asked for (see AtLeastIsEnough).
  int own_min_insync = 1;
  auto own = configs->find("min.insync.replicas");
  if (own != configs->end() && absl::SimpleAtoi(own->second, &own_min_insync) &&
      shape->second < own_min_insync) {
    return absl::FailedPreconditionError(absl::StrCat(
        "topic ", spec.name, " has ", shape->second, " replica(s), ", kFewerThanOwnMinInsync, "=",
        own_min_insync, ": Kafka would refuse every append to it"));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

std::atomic<uint64_t> cancellations{0};  // CancelWatermarkQueries() calls

// A try's longest wait: shutdown (CancelWatermarkQueries) is noticed between tries.
constexpr int kMaxTryMs = 2000;

// Whether `err` says the client's metadata names an old leader or leader epoch of the
// partition, or does not know the partition yet (a topic just created: the cache keeps it
// without partitions until its periodic refresh, minutes later; a fault test's first
// CreateNamespace failed after 50 s on _UNKNOWN_PARTITION): the next try first asks for the
// topic's metadata.
bool StaleLeader(rd_kafka_resp_err_t err) {
  return err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION || err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC ||
         err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
         err == RD_KAFKA_RESP_ERR_FENCED_LEADER_EPOCH ||
         err == RD_KAFKA_RESP_ERR_UNKNOWN_LEADER_EPOCH ||
         err == RD_KAFKA_RESP_ERR_NOT_LEADER_OR_FOLLOWER ||
         err == RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE;
}

// Runs `query` (a librdkafka call given a timeout) on the caller's thread in tries of at most
// kMaxTryMs, again while a retry may cure the error (a leader just elected, a broker
// reconnecting), time is left and shutdown has not cancelled the queries. librdkafka 2.12.1
// honours these calls' timeouts (2.0.2 did not while a leader was down: each query then ran on
// a thread of its own that its caller abandoned). Its asynchronous ListOffsets admin call is
// not used: in 2.12.1 its leader lookup can crash when the metadata cache changes under it
// (seen under ThreadSanitizer in the concurrent core test).
template <typename Result>
absl::StatusOr<Result> QueryOffsets(
    rd_kafka_t* rk, const std::string& topic, int32_t partition, Clock::time_point deadline,
    absl::string_view what,
    const std::function<rd_kafka_resp_err_t(int timeout_ms, Result* result)>& query) {
  deadline = Bounded(deadline);
  const uint64_t cancelled_before = cancellations.load();
  while (true) {
    Result result{};
    const rd_kafka_resp_err_t err = query(std::min(kMaxTryMs, TimeoutMs(deadline)), &result);
    if (!err) return result;
    absl::Status status =
        KafkaErrorToStatus(err, absl::StrCat(what, " ", topic, "[", partition, "]"));
    if (!absl::IsUnavailable(status) || cancellations.load() != cancelled_before ||
        Clock::now() + std::chrono::milliseconds(100) >= deadline) {
      return status;
    }
    if (StaleLeader(err)) {
      // Any metadata answer updates the client's cache (leaders, epochs); the shape is not needed.
      (void)DescribeTopicShape(rk, topic, std::min(1000, TimeoutMs(deadline)));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (cancellations.load() != cancelled_before) return status;  // shut down meanwhile
  }
}

}  // namespace

void CancelWatermarkQueries() { ++cancellations; }

uint64_t WatermarkQueryCancellations() { return cancellations.load(); }

absl::StatusOr<Watermarks> QueryWatermarks(rd_kafka_t* rk, const Slot& slot,
                                           Clock::time_point deadline) {
  const std::string& topic = slot.topic;
  const int32_t partition = slot.partition;
  return QueryOffsets<Watermarks>(
      rk, topic, partition, deadline, "querying the end of", [&](int timeout, Watermarks* marks) {
        return rd_kafka_query_watermark_offsets(rk, topic.c_str(), partition, &marks->low,
                                                &marks->high, timeout);
      });
}

absl::StatusOr<int64_t> OffsetForTime(rd_kafka_t* rk, const Slot& slot, int64_t time_ms,
                                      Clock::time_point deadline) {
  const std::string& topic = slot.topic;
  const int32_t partition = slot.partition;
  return QueryOffsets<int64_t>(
      rk, topic, partition, deadline, "looking up a time in", [&](int timeout, int64_t* offset) {
        rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(list, topic.c_str(), partition)->offset = time_ms;
        rd_kafka_resp_err_t err = rd_kafka_offsets_for_times(rk, list, timeout);
        if (!err) err = list->elems[0].err;
        *offset = list->elems[0].offset;
        rd_kafka_topic_partition_list_destroy(list);
        return err;
      });
}

absl::Status EnsureTopics(rd_kafka_t* rk, const std::vector<TopicSpec>& topics,
                          Clock::time_point deadline) {
  // Each step may take the whole time (creation, then the checks, each as long as the topics
  // need).
  const int timeout_ms = TimeoutMs(deadline);
  std::vector<rd_kafka_NewTopic_t*> new_topics;
  char errstr[512];
  for (const TopicSpec& spec : topics) {
    rd_kafka_NewTopic_t* t = rd_kafka_NewTopic_new(spec.name.c_str(), spec.partitions,
                                                   spec.replication_factor, errstr, sizeof(errstr));
    if (t == nullptr) {
      for (auto* n : new_topics) rd_kafka_NewTopic_destroy(n);
      return absl::InvalidArgumentError(absl::StrCat("topic ", spec.name, ": ", errstr));
    }
    for (const auto& [key, value] : spec.configs) {
      rd_kafka_NewTopic_set_config(t, key.c_str(), value.c_str());
    }
    new_topics.push_back(t);
  }
  auto event =
      RunAdmin(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS, timeout_ms,
               [&](rd_kafka_AdminOptions_t* options, rd_kafka_queue_t* queue) {
                 rd_kafka_CreateTopics(rk, new_topics.data(), new_topics.size(), options, queue);
               });
  for (auto* n : new_topics) rd_kafka_NewTopic_destroy(n);
  if (!event.ok()) return event.status();
  size_t count = 0;
  const rd_kafka_topic_result_t** results =
      rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(event->get()), &count);
  std::set<std::string> existing;
  for (size_t i = 0; i < count; ++i) {
    const rd_kafka_resp_err_t err = rd_kafka_topic_result_error(results[i]);
    const std::string name = rd_kafka_topic_result_name(results[i]);
    if (err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
      existing.insert(name);
    } else if (err) {
      const char* why = rd_kafka_topic_result_error_string(results[i]);
      return KafkaErrorToStatus(err,
                                absl::StrCat("creating topic ", name, " (", why ? why : "", ")"));
    } else {
      spdlog::info("created topic {}", name);
    }
  }
  if (absl::Status s =
          WaitForTopics(rk, topics, Clock::now() + std::chrono::milliseconds(timeout_ms));
      !s.ok()) {
    return s;
  }
  for (const TopicSpec& spec : topics) {
    if (existing.count(spec.name)) {
      if (absl::Status s = CheckExistingTopic(rk, spec, timeout_ms); !s.ok()) return s;
    } else if (spec.replication_factor == -1) {
      if (absl::Status s = CheckReplicasForMinInsync(rk, spec, timeout_ms); !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PartitionReplicas> DescribeReplicas(rd_kafka_t* rk, const Slot& slot,
                                                   Clock::time_point deadline) {
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, slot.topic.c_str(), nullptr);
  const rd_kafka_metadata_t* md = nullptr;
  const rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, TimeoutMs(deadline));
  rd_kafka_topic_destroy(rkt);
  if (err) return KafkaErrorToStatus(err, absl::StrCat("metadata of topic ", slot.topic));
  std::optional<PartitionReplicas> found;
  for (int t = 0; t < md->topic_cnt && !found; ++t) {
    if (slot.topic != md->topics[t].topic) continue;
    for (int p = 0; p < md->topics[t].partition_cnt; ++p) {
      const rd_kafka_metadata_partition_t& partition = md->topics[t].partitions[p];
      if (partition.id != slot.partition) continue;
      found.emplace();
      found->leader = partition.leader;
      found->replicas.assign(partition.replicas, partition.replicas + partition.replica_cnt);
      found->in_sync.assign(partition.isrs, partition.isrs + partition.isr_cnt);
    }
  }
  for (int b = 0; found && b < md->broker_cnt; ++b) {
    if (md->brokers[b].id == found->leader) {
      found->leader_address = absl::StrCat(md->brokers[b].host, ":", md->brokers[b].port);
    }
  }
  rd_kafka_metadata_destroy(md);
  if (!found) {
    return absl::NotFoundError(absl::StrCat(slot.topic, "[", slot.partition, "] not found"));
  }
  return *found;
}

absl::StatusOr<int> CountLiveBrokers(rd_kafka_t* rk, Clock::time_point deadline) {
  const rd_kafka_metadata_t* md = nullptr;
  const rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, nullptr, &md, TimeoutMs(deadline));
  if (err) return KafkaErrorToStatus(err, "asking Kafka for its brokers");
  const int brokers = md->broker_cnt;
  rd_kafka_metadata_destroy(md);
  return brokers;
}

absl::Status WaitForTopics(rd_kafka_t* rk, const std::vector<TopicSpec>& topics,
                           Clock::time_point deadline) {
  deadline = Bounded(deadline);
  for (const TopicSpec& spec : topics) {
    while (true) {
      auto shape = DescribeTopicShape(rk, spec.name, 2000);
      if (shape.ok()) break;
      if (Clock::now() > deadline) return shape.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  return absl::OkStatus();
}

namespace {

// Errors with which a cluster refuses DeleteRecords for good (a policy, an ACL, a broker or
// managed service without it), as opposed to failing this once.
bool RefusesDeleteRecords(rd_kafka_resp_err_t err) {
  switch (err) {
    case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_UNSUPPORTED_VERSION:
    case RD_KAFKA_RESP_ERR_INVALID_REQUEST:
    case RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE:
      return true;
    default:
      return false;
  }
}

absl::Status RefusalStatus(const absl::Status& status) {
  return absl::FailedPreconditionError(
      absl::StrCat("Kafka refuses DeleteRecords: ", status.message()));
}

}  // namespace

absl::StatusOr<TopicId> QueryTopicId(rd_kafka_t* rk, const std::string& topic,
                                     Clock::time_point deadline) {
  const char* names[] = {topic.c_str()};
  rd_kafka_TopicCollection_t* topics = rd_kafka_TopicCollection_of_topic_names(names, 1);
  // Reads wait for this one: little grace past the deadline.
  auto event = RunAdmin(
      rk, RD_KAFKA_ADMIN_OP_DESCRIBETOPICS, TimeoutMs(deadline),
      [&](rd_kafka_AdminOptions_t* options, rd_kafka_queue_t* queue) {
        rd_kafka_DescribeTopics(rk, topics, options, queue);
      },
      nullptr, /*grace_ms=*/100);
  rd_kafka_TopicCollection_destroy(topics);
  if (!event.ok()) return event.status();
  size_t count = 0;
  const rd_kafka_TopicDescription_t** described = rd_kafka_DescribeTopics_result_topics(
      rd_kafka_event_DescribeTopics_result(event->get()), &count);
  if (count != 1) {
    return absl::InternalError(absl::StrCat("describing topic ", topic, ": ", count, " answers"));
  }
  if (const rd_kafka_error_t* error = rd_kafka_TopicDescription_error(described[0]);
      rd_kafka_error_code(error) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return KafkaErrorToStatus(
        rd_kafka_error_code(error),
        absl::StrCat("describing topic ", topic, " (", rd_kafka_error_string(error), ")"));
  }
  TopicId id;
  if (const rd_kafka_Uuid_t* uuid = rd_kafka_TopicDescription_topic_id(described[0])) {
    id.high = static_cast<uint64_t>(rd_kafka_Uuid_most_significant_bits(uuid));
    id.low = static_cast<uint64_t>(rd_kafka_Uuid_least_significant_bits(uuid));
  }
  return id;
}

absl::StatusOr<int64_t> DeleteRecordsBefore(rd_kafka_t* rk, const Slot& slot, int64_t before,
                                            Clock::time_point deadline) {
  const std::string& topic = slot.topic;
  const int32_t partition = slot.partition;
  rd_kafka_topic_partition_list_t* offsets = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(offsets, topic.c_str(), partition)->offset = before;
  rd_kafka_DeleteRecords_t* request = rd_kafka_DeleteRecords_new(offsets);
  rd_kafka_topic_partition_list_destroy(offsets);
  rd_kafka_resp_err_t request_error = RD_KAFKA_RESP_ERR_NO_ERROR;
  auto event = RunAdmin(
      rk, RD_KAFKA_ADMIN_OP_DELETERECORDS, TimeoutMs(deadline),
      [&](rd_kafka_AdminOptions_t* options, rd_kafka_queue_t* queue) {
        rd_kafka_DeleteRecords(rk, &request, 1, options, queue);
      },
      &request_error);
  rd_kafka_DeleteRecords_destroy(request);
  if (!event.ok()) {
    return RefusesDeleteRecords(request_error) ? RefusalStatus(event.status()) : event.status();
  }
  const rd_kafka_topic_partition_list_t* result =
      rd_kafka_DeleteRecords_result_offsets(rd_kafka_event_DeleteRecords_result(event->get()));
  if (result == nullptr || result->cnt != 1) {
    return absl::InternalError("DeleteRecords answered without the partition");
  }
  if (result->elems[0].err) {
    absl::Status status = KafkaErrorToStatus(
        result->elems[0].err, absl::StrCat("deleting records of ", topic, "[", partition, "]"));
    return RefusesDeleteRecords(result->elems[0].err) ? RefusalStatus(status) : status;
  }
  return result->elems[0].offset;
}

}  // namespace wal
