// Delivery::Of: what a delivery report says became of a record.
#include <gtest/gtest.h>

#include "server/kafka/producer.h"

namespace wal {
namespace {

using Outcome = Delivery::Outcome;

TEST(Delivery, AReportWithoutErrorIsWrittenAtItsOffset) {
  const Delivery d = Delivery::Of(RD_KAFKA_RESP_ERR_NO_ERROR, RD_KAFKA_MSG_STATUS_PERSISTED, 42);
  EXPECT_EQ(d.outcome, Outcome::kWritten);
  EXPECT_EQ(d.offset, 42);
  // Kafka had it from an earlier send (DUPLICATE_SEQUENCE_NUMBER): written, offset unknown.
  EXPECT_EQ(Delivery::Of(RD_KAFKA_RESP_ERR_NO_ERROR, RD_KAFKA_MSG_STATUS_PERSISTED, -1).outcome,
            Outcome::kWritten);
}

TEST(Delivery, ARecordNeverSentIsNotWritten) {
  for (const rd_kafka_resp_err_t err :
       {RD_KAFKA_RESP_ERR__PURGE_QUEUE, RD_KAFKA_RESP_ERR_INVALID_RECORD,
        RD_KAFKA_RESP_ERR__QUEUE_FULL, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED}) {
    const Delivery d = Delivery::Of(err, RD_KAFKA_MSG_STATUS_NOT_PERSISTED, -1);
    EXPECT_EQ(d.outcome, Outcome::kNotWritten) << rd_kafka_err2name(err);
    EXPECT_EQ(d.err, err);
  }
}

TEST(Delivery, ARecordThatMayHaveReachedKafkaIsUnknown) {
  // librdkafka's own word, whatever the error: purged from the queue after an earlier send,
  // or failed after it was sent.
  for (const rd_kafka_resp_err_t err :
       {RD_KAFKA_RESP_ERR__PURGE_QUEUE, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
        RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND}) {
    EXPECT_EQ(Delivery::Of(err, RD_KAFKA_MSG_STATUS_POSSIBLY_PERSISTED, -1).outcome,
              Outcome::kUnknown)
        << rd_kafka_err2name(err);
  }
  // A timeout or a purge in flight is unknown even where librdkafka's status says otherwise.
  for (const rd_kafka_resp_err_t err :
       {RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, RD_KAFKA_RESP_ERR__PURGE_INFLIGHT}) {
    EXPECT_EQ(Delivery::Of(err, RD_KAFKA_MSG_STATUS_NOT_PERSISTED, -1).outcome, Outcome::kUnknown)
        << rd_kafka_err2name(err);
  }
}

}  // namespace
}  // namespace wal
