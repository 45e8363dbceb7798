#include "server/kafka/errors.h"

#include <gtest/gtest.h>

namespace wal {
namespace {

TEST(KafkaErrors, KafkaErrorsMapToActionableCodes) {
  EXPECT_TRUE(KafkaErrorToStatus(RD_KAFKA_RESP_ERR_NO_ERROR, "x").ok());
  for (auto err : {RD_KAFKA_RESP_ERR__TRANSPORT, RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN,
                   RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, RD_KAFKA_RESP_ERR__TIMED_OUT,
                   RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                   RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, RD_KAFKA_RESP_ERR__FATAL}) {
    EXPECT_EQ(KafkaErrorToStatus(err, "x").code(), absl::StatusCode::kUnavailable)
        << rd_kafka_err2name(err);
  }
  EXPECT_EQ(KafkaErrorToStatus(RD_KAFKA_RESP_ERR__QUEUE_FULL, "x").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(KafkaErrorToStatus(RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE, "x").code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(KafkaErrorToStatus(RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET, "x").code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(KafkaErrorToStatus(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, "x").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(KafkaErrorToStatus(RD_KAFKA_RESP_ERR_INVALID_MSG, "x").code(),
            absl::StatusCode::kInternal);
}

TEST(KafkaErrors, MessageSaysWhatWasAttemptedAndWhy) {
  const absl::Status s = KafkaErrorToStatus(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, "appending to wal_0");
  EXPECT_NE(s.message().find("appending to wal_0"), absl::string_view::npos);
  EXPECT_NE(s.message().find("_MSG_TIMED_OUT"), absl::string_view::npos);
}

}  // namespace
}  // namespace wal
