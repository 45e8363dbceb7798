// The two places where errors change form: Kafka error -> absl::Status, and
// absl::Status -> grpc::Status. Everything in between passes absl::Status values along.
#pragma once

#include <librdkafka/rdkafka.h>

#include <chrono>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace wal {

// Maps a librdkafka error to the status a caller can act on: UNAVAILABLE for anything a retry
// may cure (brokers down, timeouts, leader changes), RESOURCE_EXHAUSTED for a full local queue,
// DATA_LOSS for offsets that are gone, INTERNAL for the rest. `what` says what was attempted.
absl::Status KafkaErrorToStatus(rd_kafka_resp_err_t err, absl::string_view what);

grpc::Status ToGrpcStatus(const absl::Status& status);

// When to give up on work for a caller whose deadline is `deadline`: a tenth of the time left
// before it (10 ms to 500 ms), so the caller hears why instead of timing out blind.
// time_point::max() (no deadline) stays max().
std::chrono::steady_clock::time_point AnswerBy(std::chrono::steady_clock::time_point deadline);

}  // namespace wal
