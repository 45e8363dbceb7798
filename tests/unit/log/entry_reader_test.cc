#include "server/log/entry_reader.h"

#include "gtest/gtest.h"

namespace wal {
namespace {

// Compressed batches can expand about 250 times, so their fetches stay small; uncompressed
// ones expand not at all, and are fetched in fewer, larger round trips.
TEST(ReaderFetchBytes, OnlyUncompressedBatchesAreFetchedInLargeFetches) {
  EXPECT_EQ(ReaderFetchBytes("none"), 1 << 20);
  for (const char* codec : {"lz4", "zstd", "snappy", "gzip"}) {
    EXPECT_EQ(ReaderFetchBytes(codec), 64 << 10) << codec;
  }
}

}  // namespace
}  // namespace wal
