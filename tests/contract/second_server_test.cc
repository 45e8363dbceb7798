// A second walserver on the same topics. On real Kafka only (integration_contract_test): the mock
// cluster lives in the first walserver, so a second one could not share its topics.
#include <gtest/gtest.h>

#include <string>

#include "tests/contract/contract_fixture.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

// A walserver that never saw the first attempt (started since, or another one on the same
// topics) finds its copies in the log.
TEST_F(ContractTest, ARetryThroughAnotherWalserverFindsTheFirstCopies) {
  Create(4);
  const auto first = RawAppend(*client_, Sequenced(4, 57, {1, 2, 3}));
  ASSERT_TRUE(first.ok()) << first.status();
  const uint64_t end = NextEntryId(*client_, 4);

  ServerOptions options = server_options_;
  auto other = WalServer::Start(options);
  ASSERT_TRUE(other.ok()) << other.status();
  auto other_client = Connect((*other)->address());
  ASSERT_NE(other_client, nullptr);

  v1::AppendRequest retry = Sequenced(4, 57, {2, 3, 4});
  retry.set_first_attempt_age_ms(1000);
  const auto again = RawAppend(*other_client, retry);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->size(), 3u);
  EXPECT_EQ((*again)[0], (*first)[1]);
  EXPECT_EQ((*again)[1], (*first)[2]);
  EXPECT_EQ((*again)[2], end) << "only the entry never written before is written";
  EXPECT_EQ(NextEntryId(*client_, 4), end + 1);
  auto data = ReadData(4);
  EXPECT_EQ(data.size(), 4u);
}

// A namespace deleted through one server and created in another slot through the other, which
// learns of the deletion only through its tail.
TEST_F(ContractTest, ANamespaceDeletedThroughAnotherServerCanBeCreatedInAnotherSlotAtOnce) {
  const std::string prefix = server_options_.topic_prefix;
  auto other = WalServer::Start(server_options_);
  ASSERT_TRUE(other.ok()) << other.status();
  auto other_client = Connect((*other)->address());
  ASSERT_NE(other_client, nullptr);
  for (int round = 0; round < 10; ++round) {
    const uint64_t ns = 60 + round;
    ASSERT_TRUE(client_->CreateNamespace(ns, prefix + "_0", 0).ok());
    // The other server learns of the namespace, then of its deletion only through its tail.
    auto seen = other_client->GetNamespace(ns);
    ASSERT_TRUE(seen.ok()) << seen.status();
    ASSERT_TRUE(client_->DeleteNamespace(ns).ok());
    auto moved = other_client->CreateNamespace(ns, prefix + "_1", 1);
    ASSERT_TRUE(moved.ok()) << "round " << round << ": " << moved.status();
    EXPECT_TRUE(moved->created);
    EXPECT_EQ(moved->ns.topic(), prefix + "_1");
  }
}

}  // namespace
}  // namespace wal::testing
