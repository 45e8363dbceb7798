#include "server/log/read_batch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"

namespace wal {
namespace {

// The pieces of a batch, one after another: what its client receives.
std::string Serialized(ReadBatch* batch) { return absl::StrJoin(batch->TakeSerialized(), ""); }

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// The same entry as protobuf would build it.
void AddTo(v1::ReadResponse* response, const ReadEntry& e) {
  v1::Entry* out = response->add_entries();
  out->set_namespace_id(e.namespace_id);
  out->set_entry_id(e.entry_id);
  out->set_data(std::string(e.data));
  out->set_epoch(e.epoch);
  out->set_sequence(e.sequence);
  out->set_crc32c(e.crc32c);
  out->set_writer_id(e.writer_id);
}

TEST(ReadBatch, EntriesAreTheBytesProtobufWrites) {
  // Zeros (left out, but for the optional crc32c), the largest values, and data whose length
  // takes one to four bytes of varint, at each boundary.
  const std::vector<std::string> data = {"",
                                         "x",
                                         std::string(127, 'a'),
                                         std::string(128, 'b'),
                                         std::string(16383, 'c'),
                                         std::string(16384, 'd'),
                                         std::string((1 << 21) - 1, 'e'),
                                         std::string(1 << 21, 'f')};
  ReadBatch batch;
  v1::ReadResponse expected;
  for (size_t i = 0; i < data.size(); ++i) {
    const bool zeros = i % 2 == 0;
    const ReadEntry e{zeros ? 0 : kMax,
                      zeros ? 0 : kMax - i,
                      data[i],
                      zeros ? 0 : 1ull << (7 * i),
                      zeros ? 0 : 300 + i,
                      zeros ? 0u : std::numeric_limits<uint32_t>::max(),
                      zeros ? 0 : kMax / (i + 1)};
    batch.AddEntry(e);
    AddTo(&expected, e);
  }
  EXPECT_EQ(batch.entry_count(), data.size());
  EXPECT_EQ(Serialized(&batch), expected.SerializeAsString());
  EXPECT_TRUE(batch.empty());
}

TEST(ReadBatch, GapsAndEndsFollowTheEntries) {
  ReadBatch batch;
  v1::ReadResponse expected;
  const ReadEntry e{7, 40, "payload", 2, 9, 0x1234, 5};
  batch.AddEntry(e);
  AddTo(&expected, e);
  for (v1::Gap* gap : {batch.AddGap(), expected.add_gaps()}) {
    gap->set_namespace_id(7);
    gap->set_from_entry_id(41);
    gap->set_to_entry_id(50);
    gap->set_reason(v1::Gap::LOST);
    gap->set_message("gone");
  }
  for (v1::ReadEnd* end : {batch.AddEnd(), expected.add_ends()}) {
    end->set_namespace_id(8);
    end->set_code(5);
    end->set_message("not found");
  }
  EXPECT_EQ(batch.ToResponse().SerializeAsString(), expected.SerializeAsString());
  EXPECT_EQ(Serialized(&batch), expected.SerializeAsString());
}

TEST(ReadBatch, DropBelowKeepsTheEntriesAndGapsFromTheCut) {
  ReadBatch batch;
  for (uint64_t id : {5, 6, 9, 12}) batch.AddEntry({1, id, std::string(id, 'z'), 1, id, 3, 4});
  v1::Gap* early = batch.AddGap();
  early->set_from_entry_id(2);
  early->set_to_entry_id(9);
  v1::Gap* late = batch.AddGap();
  late->set_from_entry_id(13);
  late->set_to_entry_id(20);

  batch.DropBelow(5);  // nothing below it
  EXPECT_EQ(batch.entry_count(), 4u);
  batch.DropBelow(9);
  v1::ReadResponse left = batch.ToResponse();
  ASSERT_EQ(left.entries_size(), 2);
  EXPECT_EQ(left.entries(0).entry_id(), 9u);
  EXPECT_EQ(left.entries(0).data(), std::string(9, 'z'));
  EXPECT_EQ(left.entries(1).entry_id(), 12u);
  ASSERT_EQ(left.gaps_size(), 1);
  EXPECT_EQ(left.gaps(0).to_entry_id(), 20u);

  // Cutting again within what is left: the offsets of the rest moved with the first cut.
  batch.DropBelow(10);
  left = batch.ToResponse();
  ASSERT_EQ(left.entries_size(), 1);
  EXPECT_EQ(left.entries(0).entry_id(), 12u);
  EXPECT_EQ(left.entries(0).data(), std::string(12, 'z'));
  EXPECT_FALSE(batch.empty());

  batch.DropBelow(20);
  EXPECT_EQ(batch.entry_count(), 0u);
  EXPECT_TRUE(batch.empty());
  EXPECT_EQ(Serialized(&batch), "");
}

TEST(ReadBatch, DropBelowAtEveryEntryOfManyChunks) {
  // Small entries share chunks, so that cuts fall at a chunk's start, within it and at its end.
  for (int64_t cut = 0; cut <= 42; ++cut) {
    ReadBatch batch;
    v1::ReadResponse expected;
    for (uint64_t id = 1; id <= 40; ++id) {
      const std::string data(id % 7, static_cast<char>('a' + id % 26));
      const ReadEntry e{3, id, data, 1, id, static_cast<uint32_t>(id), 2};
      batch.AddEntry(e);
      if (static_cast<int64_t>(id) >= cut) AddTo(&expected, e);
    }
    batch.DropBelow(cut);
    EXPECT_EQ(batch.entry_count(), static_cast<size_t>(expected.entries_size())) << "cut " << cut;
    EXPECT_EQ(batch.ToResponse().SerializeAsString(), expected.SerializeAsString())
        << "cut " << cut;
    EXPECT_EQ(Serialized(&batch), expected.SerializeAsString()) << "cut " << cut;
  }
}

}  // namespace
}  // namespace wal
