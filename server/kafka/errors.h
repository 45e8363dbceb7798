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

// True for a consumer's errors that say fetched records are damaged (a batch failing its CRC with
// check.crcs, or one that does not decode or decompress): Kafka's log itself is bad there, and no
// retry reads it. (KafkaErrorToStatus calls them INTERNAL: a producer may meet them too.)
bool IsDamagedRecords(rd_kafka_resp_err_t err);

}  // namespace wal
