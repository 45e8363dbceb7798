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

TEST(RecordFormat, PackedRecordCarriesEachNamespacesRecord) {
  const std::string a = EncodeEntry("first", 1, 1000, {1, 2, 3})[0];
  const std::string b = EncodeFence(9);
  const std::string c = EncodeEntry(std::string(300, 'c'), 2, 1000)[0];
  const std::vector<PackedPart> parts = {{7, a}, {8, b}, {0xffffffffffffffffULL, c}};
  std::string value(PackedRecordBytes(parts), '\0');
  EXPECT_EQ(value.size(),
            kPackedHeaderBytes + 3 * kPackedDirectoryEntryBytes + a.size() + b.size() + c.size());
  EncodePackedTo(parts, value.data());
  EXPECT_TRUE(IsPackedRecord(value));
  EXPECT_FALSE(IsPackedRecord(a));
  // A format-1 decoder refuses it rather than misread it.
  EXPECT_FALSE(DecodeRecord(value).ok());

  std::vector<PackedPart> decoded;
  ASSERT_TRUE(DecodePacked(value, &decoded).ok());
  ASSERT_EQ(decoded.size(), 3u);
  EXPECT_EQ(decoded[0].namespace_id, 7u);
  EXPECT_EQ(decoded[0].record, a);
  EXPECT_EQ(decoded[1].namespace_id, 8u);
  EXPECT_EQ(decoded[1].record, b);
  EXPECT_EQ(decoded[2].namespace_id, 0xffffffffffffffffULL);
  EXPECT_EQ(decoded[2].record, c);
  EXPECT_EQ(DecodeRecord(decoded[0].record)->payload, "first");
  EXPECT_EQ(DecodeRecord(decoded[1].record)->header.kind, RecordKind::kFence);
}

TEST(RecordFormat, DamagedPackedRecordsAreRefusedWhole) {
  const std::string a = EncodeEntry("a", 1, 1000)[0];
  const std::string b = EncodeEntry("bb", 2, 1000)[0];
  const std::vector<PackedPart> parts = {{1, a}, {2, b}};
  std::string value(PackedRecordBytes(parts), '\0');
  EncodePackedTo(parts, value.data());
  std::vector<PackedPart> decoded;
  ASSERT_TRUE(DecodePacked(value, &decoded).ok());

  std::string routed_elsewhere = value;  // the second record's namespace id, changed
  routed_elsewhere[kPackedHeaderBytes + kPackedDirectoryEntryBytes + 7] ^= 1;
  EXPECT_FALSE(DecodePacked(routed_elsewhere, &decoded).ok());
  EXPECT_TRUE(decoded.empty());
  EXPECT_FALSE(DecodePacked(value.substr(0, value.size() - 1), &decoded).ok());
  EXPECT_FALSE(DecodePacked(value + "x", &decoded).ok());
  EXPECT_FALSE(DecodePacked(value.substr(0, kPackedHeaderBytes - 1), &decoded).ok());
  std::string no_records = value.substr(0, kPackedHeaderBytes);
  no_records[7] = 0;  // count 0
  EXPECT_FALSE(DecodePacked(no_records, &decoded).ok());
  const std::vector<PackedPart> twice = {{1, a}, {1, b}};
  std::string one_namespace_twice(PackedRecordBytes(twice), '\0');
  EncodePackedTo(twice, one_namespace_twice.data());
  EXPECT_FALSE(DecodePacked(one_namespace_twice, &decoded).ok());
  std::string huge_count = value;
  huge_count[4] = '\x7f';
  EXPECT_FALSE(DecodePacked(huge_count, &decoded).ok());
}

}  // namespace
}  // namespace wal
