#include "server/rpc/grpc_status.h"

#include <gtest/gtest.h>

namespace wal {
namespace {

TEST(GrpcStatus, GrpcStatusKeepsCodeAndMessage) {
  for (auto code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound,
        absl::StatusCode::kOutOfRange, absl::StatusCode::kDataLoss, absl::StatusCode::kUnavailable,
        absl::StatusCode::kResourceExhausted, absl::StatusCode::kDeadlineExceeded,
        absl::StatusCode::kUnauthenticated, absl::StatusCode::kInternal}) {
    const grpc::Status g = ToGrpcStatus(absl::Status(code, "why"));
    EXPECT_EQ(static_cast<int>(g.error_code()), static_cast<int>(code));
    EXPECT_EQ(g.error_message(), "why");
  }
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace wal
