// What every RPC checks in its request before anything is read or written, with the errors a
// caller sees: one wording per mistake, naming the field (`field` prefixes its name, such as
// "reads[3]." within a ReadMany).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/common/deadline.h"
#include "server/log/read.h"
#include "wal/v1/wal.pb.h"

namespace wal {

// The request of a raw method (rpc/wal_service.h) parsed into `message`; INVALID_ARGUMENT when
// there is none or its bytes are not one.
absl::Status ParseRequest(const grpc::ByteBuffer* raw, google::protobuf::MessageLite* message);

// INVALID_ARGUMENT for the reserved id 0.
absl::Status CheckId(uint64_t namespace_id, absl::string_view field = "");

// NOT_FOUND for a namespace no server created (or one deleted since).
absl::Status NotFound(uint64_t namespace_id);

// The read `read` asks for, until `deadline`; INVALID_ARGUMENT for a bad one. `follow` is the
// call's (a ReadMany's reads share it).
absl::StatusOr<ReadParams> ReadParamsFrom(const v1::ReadRequest& read, bool follow,
                                          Clock::time_point deadline, absl::string_view field = "");
// A ReadMany of a whole slot (its `slot`, which the caller checks is one of walserver's): the
// read's parameters, shared by the slot's namespaces; INVALID_ARGUMENT with reads or follow.
absl::StatusOr<ReadParams> SlotReadParamsFrom(const v1::ReadManyRequest& request,
                                              Clock::time_point deadline);

}  // namespace wal
