// Server options that cannot work are refused at start with INVALID_ARGUMENT naming the option.
#include <gtest/gtest.h>

#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

void ExpectRefused(ServerOptions options, const std::string& naming) {
  options.topic_prefix = UniqueName("options");
  auto server = WalServer::Start(options);
  ASSERT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << naming;
  EXPECT_NE(server.status().message().find(naming), std::string::npos) << server.status();
}

TEST(ServerOptions, KeepaliveAndNamesThatCannotWorkAreRefused) {
  ServerOptions options = MockServerOptions();
  options.keepalive_timeout = std::chrono::milliseconds(0);
  ExpectRefused(options, "keepalive_timeout_ms");
  options = MockServerOptions();
  options.keepalive_time = std::chrono::milliseconds(-1);
  ExpectRefused(options, "keepalive_time_ms");
  // "server/" + one character is 8 bytes, the length of a namespace's key in the meta topic.
  options = MockServerOptions();
  options.name = "a";
  ExpectRefused(options, "--name");
}

}  // namespace
}  // namespace wal::testing
