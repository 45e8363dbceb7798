// The one place where librdkafka errors become absl::Status values; everything above the kafka/
// folder passes statuses along, and rpc/grpc_status.h turns them into gRPC statuses at the edge.
#pragma once

#include <librdkafka/rdkafka.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace wal {

// Maps a librdkafka error to the status a caller can act on: UNAVAILABLE for anything a retry
// may cure (brokers down, timeouts, leader changes), RESOURCE_EXHAUSTED for a full local queue,
// DATA_LOSS for offsets that are gone, PERMISSION_DENIED for refused credentials, INTERNAL for
// the rest. `what` says what was attempted.
absl::Status KafkaErrorToStatus(rd_kafka_resp_err_t err, absl::string_view what);

}  // namespace wal
