#include "server/rpc/request_checks.h"

#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace wal {

absl::Status ParseRequest(const grpc::ByteBuffer* raw, google::protobuf::MessageLite* message) {
  std::vector<grpc::Slice> slices;
  if (raw == nullptr || !raw->Valid() || !raw->Dump(&slices).ok()) {
    return absl::InvalidArgumentError("the call carries no request message");
  }
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  if (!message->ParseFromString(bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request is not a ", message->GetTypeName(), " message"));
  }
  return absl::OkStatus();
}

absl::Status CheckId(uint64_t namespace_id, absl::string_view field) {
  if (namespace_id == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "namespace_id 0 is reserved; use an id of 1 or more"));
  }
  return absl::OkStatus();
}

absl::Status NotFound(uint64_t namespace_id) {
  return absl::NotFoundError(
      absl::StrCat("namespace ", namespace_id, " not found; create it with CreateNamespace"));
}

absl::StatusOr<ReadParams> ReadParamsFrom(const v1::ReadRequest& read, bool follow,
                                          Clock::time_point deadline, absl::string_view field) {
  if (absl::Status s = CheckId(read.namespace_id(), field); !s.ok()) return s;
  ReadParams params;
  params.namespace_id = read.namespace_id();
  params.start_entry_id = read.start_entry_id();
  params.limit = read.limit();
  params.follow = follow;
  params.skip_lost = read.skip_lost();
  params.deadline = deadline;
  if (read.start_time_ms() == 0) return params;
  // From a time: one start or the other, and a time Kafka can hold (ms since the epoch, int64).
  if (read.start_entry_id() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, "start_entry_id ", read.start_entry_id(), " and ", field, "start_time_ms ",
        read.start_time_ms(), " both say where to start; give one or the other"));
  }
  if (read.start_time_ms() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "start_time_ms ", read.start_time_ms(),
                     " is not a time: milliseconds since the Unix epoch, at most 2^63-1"));
  }
  params.start_time_ms = static_cast<int64_t>(read.start_time_ms());
  return params;
}

absl::StatusOr<ReadParams> SlotReadParamsFrom(const v1::ReadManyRequest& request,
                                              Clock::time_point deadline) {
  if (request.reads_size() > 0 || request.follow()) {
    return absl::InvalidArgumentError(
        "a ReadMany of a slot takes neither reads nor follow: it reads every namespace of the "
        "slot up to the slot's end as the read began");
  }
  ReadParams params;
  params.start_entry_id = request.slot().start_entry_id();
  params.skip_lost = request.slot().skip_lost();
  params.deadline = deadline;
  return params;
}

}  // namespace wal
