// The walserver binary with no --brokers: the embedded mock cluster, end to end over gRPC.
#include <gtest/gtest.h>

#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

TEST(EmbeddedDefault, WalserverWithoutBrokersServesTheRoundTrip) {
  auto server = ServerProcess::Start({"--topic_prefix=embedded"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Connect((*server)->address());
  RoundTrip(*client, 1, 10, 1000, 7);
  EXPECT_EQ((*server)->Stop(), 0) << "a clean exit on SIGTERM";
}

}  // namespace
}  // namespace wal::testing
