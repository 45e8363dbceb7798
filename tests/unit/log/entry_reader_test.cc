#include "server/log/entry_reader.h"

#include "gtest/gtest.h"

namespace wal {
namespace {

// Compressed batches can expand hundreds of times in memory, so their fetches stay small;
// uncompressed ones do not expand, and are fetched in fewer, larger round trips. Any property
// that can name the producers' codec counts (librdkafka's two names for it, for all topics or
// the default topic, in any case).
TEST(ReaderFetchBytes, OnlyBatchesWrittenUncompressedAreFetchedInLargeFetches) {
  EXPECT_EQ(ReaderFetchBytes({{"compression.type", "none"}}), 1 << 20);
  EXPECT_EQ(ReaderFetchBytes({{"compression.codec", "none"}}), 1 << 20);
  EXPECT_EQ(ReaderFetchBytes({{"compression.type", "NONE"}, {"linger.ms", "0"}}), 1 << 20);
  for (const char* codec : {"lz4", "zstd", "snappy", "gzip"}) {
    for (const char* key :
         {"compression.codec", "topic.compression.codec", "topic.compression.type"}) {
      EXPECT_EQ(ReaderFetchBytes({{"compression.type", "none"}, {key, codec}}), 64 << 10)
          << key << "=" << codec;
      EXPECT_EQ(ReaderFetchBytes({{"compression.type", codec}, {key, "none"}}), 64 << 10)
          << key << "=none beside " << codec;
    }
  }
  EXPECT_EQ(ReaderFetchBytes({}), 64 << 10) << "not known to be uncompressed";
}

}  // namespace
}  // namespace wal
