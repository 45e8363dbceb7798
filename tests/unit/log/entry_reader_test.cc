#include "server/log/entry_reader.h"

#include "gtest/gtest.h"

namespace wal {
namespace {

// Compressed batches can expand hundreds of times in memory, so their fetches stay small;
// uncompressed ones do not expand, and are fetched in fewer, larger round trips. Whatever names
// a codec, under either of librdkafka's names, counts.
TEST(ReaderFetchBytes, OnlyBatchesWrittenUncompressedAreFetchedInLargeFetches) {
  EXPECT_EQ(ReaderFetchBytes({{"compression.type", "none"}}), 1 << 20);
  EXPECT_EQ(ReaderFetchBytes({{"compression.codec", "none"}}), 1 << 20);
  for (const char* codec : {"lz4", "zstd", "snappy", "gzip"}) {
    EXPECT_EQ(ReaderFetchBytes({{"compression.type", codec}}), 64 << 10) << codec;
    EXPECT_EQ(ReaderFetchBytes({{"compression.type", "none"}, {"compression.codec", codec}}),
              64 << 10)
        << codec;
  }
  EXPECT_EQ(ReaderFetchBytes({}), 64 << 10) << "not known to be uncompressed";
}

}  // namespace
}  // namespace wal
