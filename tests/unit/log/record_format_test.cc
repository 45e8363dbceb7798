#include "server/log/record_format.h"

#include <gtest/gtest.h>

#include "server/common/crc32c.h"
#include "server/common/namespace_key.h"

namespace wal {
namespace {

TEST(RecordFormat, KeyIsEightBytesBigEndian) {
  EXPECT_EQ(EncodeKey(0x0102030405060708ULL), std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  const std::string key = EncodeKey(42);
  EXPECT_EQ(DecodeKey(key.data(), key.size()), 42u);
  EXPECT_EQ(DecodeKey(key.data(), 7), std::nullopt);
  EXPECT_EQ(DecodeKey(nullptr, 0), std::nullopt);
}

TEST(RecordFormat, EntryCrcIsCrc32c) {
  // The standard check value of CRC-32C, and lengths that exercise the 8-byte and tail loops.
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
}

TEST(RecordFormat, SmallEntryIsOneFullRecord) {
  auto records = EncodeEntry("hello", 7, 1024);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].size(), kRecordHeaderBytes + 5);
  auto decoded = DecodeRecord(records[0]);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->header.kind, RecordKind::kFull);
  EXPECT_EQ(decoded->header.entry_bytes, 5u);
  EXPECT_EQ(decoded->header.entry_nonce, 7u);
  EXPECT_EQ(decoded->header.entry_crc, Crc32c("hello"));
  EXPECT_EQ(decoded->payload, "hello");
}

TEST(RecordFormat, RecordsWithThe52ByteHeaderStillDecode) {
  std::string record = EncodeEntry("stamped", 5, 1000, {3, 4, 5}, {6, 7, 8})[0];
  record.erase(kStampedRecordHeaderBytes, kRecordHeaderBytes - kStampedRecordHeaderBytes);
  record[2] = 0;
  record[3] = static_cast<char>(kStampedRecordHeaderBytes);
  auto decoded = DecodeRecord(record);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->payload, "stamped");
  EXPECT_EQ(decoded->header.stamp.sequence, 5u);
  EXPECT_EQ(decoded->header.source.session, 0u);
  EXPECT_EQ(decoded->header.source.created_ms, 0);
}

TEST(RecordFormat, SourceRoundTrips) {
  auto decoded = DecodeRecord(EncodeEntry("x", 1, 1000, {}, {11, 12, 1700000000123})[0]);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->header.source.session, 11u);
  EXPECT_EQ(decoded->header.source.origin, 12u);
  EXPECT_EQ(decoded->header.source.created_ms, 1700000000123);
  EXPECT_NE(OriginOf("a"), OriginOf("b"));
  EXPECT_EQ(OriginOf("walserver-1"), OriginOf("walserver-1"));
}

}  // namespace
}  // namespace wal
