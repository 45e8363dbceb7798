#include "server/kafka/mock_cluster.h"

#include "absl/strings/str_cat.h"
#include "server/kafka/errors.h"

namespace wal {

absl::StatusOr<std::unique_ptr<MockCluster>> MockCluster::Create(int brokers) {
  // The mock cluster runs on the threads of a client handle; a bare producer serves.
  auto rk = NewKafkaClient(RD_KAFKA_PRODUCER,
                           {{"client.id", "walserver-mock-cluster"}, {"log_level", "3"}});
  if (!rk.ok()) return rk.status();
  rd_kafka_mock_cluster_t* cluster = rd_kafka_mock_cluster_new(rk->get(), brokers);
  if (cluster == nullptr) return absl::InternalError("could not start the Kafka mock cluster");
  return std::unique_ptr<MockCluster>(new MockCluster(std::move(*rk), cluster));
}

MockCluster::~MockCluster() { rd_kafka_mock_cluster_destroy(cluster_); }

std::string MockCluster::bootstrap_servers() const {
  return rd_kafka_mock_cluster_bootstraps(cluster_);
}

absl::Status MockCluster::CreateTopic(const std::string& topic, int partitions) {
  return KafkaErrorToStatus(rd_kafka_mock_topic_create(cluster_, topic.c_str(), partitions, 1),
                            absl::StrCat("creating mock topic ", topic));
}

}  // namespace wal
