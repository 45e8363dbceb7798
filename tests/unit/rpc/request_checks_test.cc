#include "server/rpc/request_checks.h"

#include <gtest/gtest.h>

#include <string>

namespace wal {
namespace {

grpc::ByteBuffer BufferOf(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

TEST(ParseRequest, ParsesARequestsBytes) {
  v1::ReadRequest sent;
  sent.set_namespace_id(7);
  sent.set_start_entry_id(1234567);
  sent.set_follow(true);
  const grpc::ByteBuffer raw = BufferOf(sent.SerializeAsString());
  v1::ReadRequest got;
  ASSERT_TRUE(ParseRequest(&raw, &got).ok());
  EXPECT_EQ(got.SerializeAsString(), sent.SerializeAsString());

  // A request of defaults is sent as no bytes at all: it parses, and its checks refuse it.
  const grpc::ByteBuffer empty = BufferOf("");
  v1::ReadRequest defaults;
  defaults.set_namespace_id(99);
  ASSERT_TRUE(ParseRequest(&empty, &defaults).ok());
  EXPECT_EQ(defaults.namespace_id(), 0u);
}

TEST(ParseRequest, RefusesNoMessageAndBytesThatAreNone) {
  v1::ReadManyRequest request;
  absl::Status none = ParseRequest(nullptr, &request);
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.message().find("no request message"), std::string::npos) << none;
  const grpc::ByteBuffer invalid;
  EXPECT_EQ(ParseRequest(&invalid, &request).code(), absl::StatusCode::kInvalidArgument);

  const grpc::ByteBuffer garbage =
      BufferOf(std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11));
  const absl::Status refused = ParseRequest(&garbage, &request);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("is not a wal.v1.ReadManyRequest"), std::string::npos)
      << refused;
}

}  // namespace
}  // namespace wal
