// WalCore's wiring of what no component can see alone: the readers' fetch size follows the codec
// the writer's producers are given, --kafka. properties included.
#include "server/wal_core.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

TEST(WalCore, TheReadersFetchSizeFollowsTheCodecTheProducersAreGiven) {
  struct Case {
    std::string compression;
    KafkaProperties kafka;
    std::string fetch_bytes;
  };
  const Case cases[] = {
      {"none", {}, "1048576"},
      {"lz4", {}, "65536"},
      {"none", {{"compression.type", "zstd"}}, "65536"},
      {"none", {{"topic.compression.codec", "lz4"}}, "65536"},
      {"lz4", {{"compression.type", "none"}}, "1048576"},
      {"none", {{"fetch.message.max.bytes", "200000"}}, "200000"},  // the operator's wins
  };
  for (const Case& c : cases) {
    ServerOptions o = MockServerOptions();
    o.name = "fetch-size-test";
    o.topic_prefix = UniqueName("fetchsize");
    o.compression = c.compression;
    o.kafka_properties = c.kafka;
    auto core = WalCore::Start(o);
    ASSERT_TRUE(core.ok()) << core.status();
    const KafkaProperties& reader = (*core)->reader_kafka();
    ASSERT_EQ(reader.count("fetch.message.max.bytes"), 1u);
    EXPECT_EQ(reader.at("fetch.message.max.bytes"), c.fetch_bytes)
        << "--compression=" << c.compression << " and " << c.kafka.size() << " --kafka. properties";
  }
}

}  // namespace
}  // namespace wal::testing
