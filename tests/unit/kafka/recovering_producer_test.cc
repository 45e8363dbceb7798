// RecoveringProducer: a producer with a fatal error is replaced, the replaced one kept (pointers
// to it stay valid) until its owner releases it once it has reported every record.
#include "server/kafka/recovering_producer.h"

#include <gtest/gtest.h>

#include "server/kafka/mock_cluster.h"
#include "tests/support/test_util.h"

namespace wal {
namespace {

TEST(RecoveringProducer, AReplacedProducerIsKeptUntilReleasedOnceDrained) {
  auto cluster = MockCluster::Create(1);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto producer = RecoveringProducer::Create(
      {{"bootstrap.servers", (*cluster)->bootstrap_servers()}}, "recovering-test");
  ASSERT_TRUE(producer.ok()) << producer.status();
  RecoveringProducer& recovering = **producer;

  for (int round = 1; round <= 2; ++round) {
    Producer* broken = recovering.current();
    ASSERT_EQ(testing::InjectFatalProducerErrors({broken}), absl::OkStatus());
    auto live = recovering.Live();
    ASSERT_TRUE(live.ok()) << live.status();
    EXPECT_NE(*live, broken);
    EXPECT_FALSE((*live)->fatal());
    EXPECT_EQ(recovering.replacements(), static_cast<uint64_t>(round));
    // Kept: a pointer taken before the replacement is still good.
    EXPECT_EQ(recovering.retired(), 1u);
    EXPECT_TRUE(broken->fatal());
    // It held no record, so it has reported every one: released.
    recovering.ReleaseDrained();
    EXPECT_EQ(recovering.retired(), 0u);
    EXPECT_EQ(recovering.current(), *live);
  }
}

}  // namespace
}  // namespace wal
