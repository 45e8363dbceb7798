#pragma once

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/kafka/client.h"

namespace wal {

// librdkafka's in-process mock cluster, for the embedded default and for unit tests.
class MockCluster {
 public:
  static absl::StatusOr<std::unique_ptr<MockCluster>> Create(int brokers);
  ~MockCluster();
  std::string bootstrap_servers() const;
  absl::Status CreateTopic(const std::string& topic, int partitions);
  rd_kafka_mock_cluster_t* cluster() const { return cluster_; }

 private:
  MockCluster(KafkaHandle rk, rd_kafka_mock_cluster_t* cluster)
      : rk_(std::move(rk)), cluster_(cluster) {}
  KafkaHandle rk_;
  rd_kafka_mock_cluster_t* cluster_;
};

}  // namespace wal
