// Packed records (log/record_format.h, format 2): the small entries of several namespaces of one
// slot that leave together share one Kafka record, and every read gets its own namespace's
// entries from them, in order, with the record's offset as their id.
//
// The entries of one Append for one slot are queued together and leave as one group, so a single
// call packs them whatever Kafka's timing: these tests do not depend on what gathers in flight.
#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "tests/core/core_fixture.h"

namespace wal::testing {
namespace {

class Packed : public Core {
 protected:
  // Creates namespaces first_id.. until `count` of them share a slot, and returns those.
  std::vector<uint64_t> InOneSlot(uint64_t first_id, size_t count) {
    std::map<int32_t, std::vector<uint64_t>> by_partition;
    for (uint64_t ns = first_id; ns < first_id + 4 * count + 8; ++ns) {
      auto state = Create(ns);
      EXPECT_TRUE(state.ok()) << state.status();
      if (!state.ok()) return {};
      slot_ = state->slot;
      std::vector<uint64_t>& ids = by_partition[state->slot.partition];
      ids.push_back(ns);
      if (ids.size() == count) {
        slot_ = state->slot;
        return ids;
      }
    }
    ADD_FAILURE() << "no " << count << " namespaces share a slot";
    return {};
  }

  AppendItem Item(uint64_t ns, const std::string& data, EntryStamp stamp = {}) {
    return AppendItem{slot_, ns, data, stamp};
  }

  std::vector<std::string> Read(uint64_t ns, uint64_t start = 0,
                                std::vector<uint64_t>* ids = nullptr) {
    auto entries = StartRead(ns, start)->Wait(seconds(30));
    EXPECT_TRUE(entries.ok()) << entries.status();
    std::vector<std::string> data;
    if (!entries.ok()) return data;
    for (const v1::Entry& e : *entries) {
      data.push_back(e.data());
      if (ids != nullptr) ids->push_back(e.entry_id());
    }
    return data;
  }

  Slot slot_;
};

using Strings = std::vector<std::string>;

// One call with two entries for each of three namespaces and one for a fourth: the first entries
// share a record, the second ones the next; each namespace reads its own from any start.
TEST_F(Packed, EntriesOfSeveralNamespacesShareRecordsAndReadBackInOrder) {
  const std::vector<uint64_t> ns = InOneSlot(10, 4);
  ASSERT_EQ(ns.size(), 4u);
  const uint64_t a = ns[0], b = ns[1], c = ns[2], other = ns[3];
  auto before = Append({Item(other, "other-before")});
  ASSERT_TRUE(before.ok()) << before.status();
  const uint64_t packed_before = writer_->packed_records();

  auto ids = Append(
      {Item(a, "a1"), Item(b, "b1"), Item(c, "c1"), Item(a, "a2"), Item(b, "b2"), Item(c, "c2")});
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(writer_->packed_records(), packed_before + 2);
  const uint64_t first = (*ids)[0];
  EXPECT_EQ(*ids, (std::vector<uint64_t>{first, first, first, first + 1, first + 1, first + 1}));
  auto after = Append({Item(other, "other-after")});
  ASSERT_TRUE(after.ok()) << after.status();

  std::vector<uint64_t> read_ids;
  EXPECT_EQ(Read(a, 0, &read_ids), (Strings{"a1", "a2"}));
  EXPECT_EQ(read_ids, (std::vector<uint64_t>{first, first + 1}));
  EXPECT_EQ(Read(b), (Strings{"b1", "b2"}));
  EXPECT_EQ(Read(c), (Strings{"c1", "c2"}));
  // Reads that start at, inside and after the run of packed records.
  EXPECT_EQ(Read(b, first), (Strings{"b1", "b2"}));
  EXPECT_EQ(Read(b, first + 1), (Strings{"b2"}));
  EXPECT_EQ(Read(b, first + 2), (Strings{}));
  // A namespace that is in none of the packed records, read from their offsets.
  EXPECT_EQ(Read(other), (Strings{"other-before", "other-after"}));
  EXPECT_EQ(Read(other, first), (Strings{"other-after"}));
  EXPECT_EQ(Read(other, first + 1), (Strings{"other-after"}));
}

// Packed and unpacked records of one namespace in one slot: entries alone in their group go as
// records of their own (format 1), a large entry's chunks too, and the order holds across them.
TEST_F(Packed, PackedSplitAndSingleRecordsMixInOrder) {
  const std::vector<uint64_t> ns = InOneSlot(30, 2);
  ASSERT_EQ(ns.size(), 2u);
  const uint64_t a = ns[0], b = ns[1];
  const std::string big(3 * kMaxRecordBytes, 'B');  // split over four records
  ASSERT_TRUE(Append({Item(a, "alone")}).ok());
  const uint64_t packed_before = writer_->packed_records();
  auto ids = Append({Item(a, "a1"), Item(b, "b1"), Item(a, big), Item(b, "b2"), Item(a, "a3")});
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(writer_->packed_records(), packed_before + 2);  // [a1 b1], big, [b2 a3]
  EXPECT_EQ((*ids)[0], (*ids)[1]);
  EXPECT_GT((*ids)[2], (*ids)[1]);
  EXPECT_GT((*ids)[3], (*ids)[2]);
  EXPECT_EQ((*ids)[3], (*ids)[4]);
  ASSERT_TRUE(Append({Item(b, "b-alone")}).ok());

  EXPECT_EQ(Read(a), (Strings{"alone", "a1", big, "a3"}));
  EXPECT_EQ(Read(b), (Strings{"b1", "b2", "b-alone"}));
  EXPECT_EQ(Read(a, (*ids)[2]), (Strings{big, "a3"}));
  EXPECT_EQ(Read(b, (*ids)[2]), (Strings{"b2", "b-alone"}));
}

// Truncating one namespace at an id inside a run of packed records leaves the others whole.
TEST_F(Packed, TruncationInsideARunOfPackedRecords) {
  const std::vector<uint64_t> ns = InOneSlot(50, 2);
  ASSERT_EQ(ns.size(), 2u);
  const uint64_t a = ns[0], b = ns[1];
  auto ids = Append(
      {Item(a, "a1"), Item(b, "b1"), Item(a, "a2"), Item(b, "b2"), Item(a, "a3"), Item(b, "b3")});
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ((*ids)[2], (*ids)[0] + 1);
  auto truncated = meta_->Truncate(a, static_cast<int64_t>((*ids)[2]), Deadline());
  ASSERT_TRUE(truncated.ok()) << truncated.status();
  EXPECT_EQ(Read(a), (Strings{"a2", "a3"}));
  EXPECT_EQ(Read(b), (Strings{"b1", "b2", "b3"}));
}

// A fence packed beside another namespace's entry: the fenced namespace's later entries of the
// old epoch are dropped, the other namespace's entries in the same records are not.
TEST_F(Packed, AFenceInAPackedRecordFencesOnlyItsNamespace) {
  const std::vector<uint64_t> ns = InOneSlot(70, 2);
  ASSERT_EQ(ns.size(), 2u);
  const uint64_t a = ns[0], b = ns[1];
  AppendItem fence = Item(a, "", EntryStamp{2, 0, 0});
  fence.fence = true;
  auto ids = Append({Item(a, "a-epoch1", EntryStamp{1, 0, 0}), Item(b, "b1"), fence, Item(b, "b2"),
                     Item(a, "a-stale", EntryStamp{1, 0, 0}), Item(b, "b3"),
                     Item(a, "a-epoch2", EntryStamp{2, 0, 0})});
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ((*ids)[2], (*ids)[3]);  // the fence shares a record with b2
  EXPECT_EQ(Read(a), (Strings{"a-epoch1", "a-epoch2"}));
  EXPECT_EQ(Read(b), (Strings{"b1", "b2", "b3"}));
}

// A retried append whose first copy and retry were both packed: reads deliver the entry once.
TEST_F(Packed, ARetriedCopyInAnotherPackedRecordIsReadOnce) {
  const std::vector<uint64_t> ns = InOneSlot(90, 2);
  ASSERT_EQ(ns.size(), 2u);
  const uint64_t a = ns[0], b = ns[1];
  const EntryStamp first{0, 7, 1};
  for (const char* b_data : {"b1", "b2"}) {  // the first copy, then the retry, each packed
    auto ids = Append({Item(a, "a1", first), Item(b, b_data)});
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ((*ids)[0], (*ids)[1]) << "not packed: the test would prove nothing of packing";
  }
  ASSERT_TRUE(Append({Item(a, "a2", EntryStamp{0, 7, 2}), Item(b, "b3")}).ok());
  EXPECT_EQ(Read(a), (Strings{"a1", "a2"}));
  EXPECT_EQ(Read(b), (Strings{"b1", "b2", "b3"}));
}

// Entries of many callers at once, two callers per namespace, through a writer that keeps one
// group per slot in flight: what gathered meanwhile leaves packed, and every namespace reads back
// each caller's entries in its order, at the ids they were acknowledged with.
TEST_F(Packed, ConcurrentCallersGatherAndEveryEntryReadsBackOnce) {
  const std::vector<uint64_t> ns = InOneSlot(110, 4);
  ASSERT_EQ(ns.size(), 4u);
  auto writer = OneGroupPerSlotWriter("gathering");
  ASSERT_TRUE(writer.ok()) << writer.status();
  constexpr int kCallers = 8;
  constexpr int kCalls = 40;
  std::vector<std::thread> callers;
  std::vector<std::vector<uint64_t>> acknowledged(kCallers);  // ids, by caller, in call order
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int call = 0; call < kCalls; ++call) {
        const std::string data = absl::StrCat("caller", c, "-", call);
        auto ids = Append({Item(ns[c % ns.size()], data)}, writer->get());
        EXPECT_TRUE(ids.ok()) << ids.status();
        if (ids.ok()) acknowledged[c].push_back((*ids)[0]);
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_GT((*writer)->packed_records(), 0u) << "nothing gathered behind a group in flight";
  for (size_t n = 0; n < ns.size(); ++n) {
    std::vector<uint64_t> ids;
    const Strings read = Read(ns[n], 0, &ids);
    ASSERT_EQ(read.size(), 2u * kCalls);
    EXPECT_EQ(std::adjacent_find(ids.begin(), ids.end(), std::greater_equal<uint64_t>()), ids.end())
        << "ids must increase";
    for (int c = static_cast<int>(n); c < kCallers; c += static_cast<int>(ns.size())) {
      // This caller's entries, in the order it appended them, at their acknowledged ids.
      std::vector<uint64_t> its_ids;
      for (size_t k = 0; k < read.size(); ++k) {
        if (absl::StartsWith(read[k], absl::StrCat("caller", c, "-"))) its_ids.push_back(ids[k]);
      }
      EXPECT_EQ(its_ids, acknowledged[c]) << "caller " << c;
      for (size_t k = 0, call = 0; k < read.size(); ++k) {
        if (absl::StartsWith(read[k], absl::StrCat("caller", c, "-"))) {
          EXPECT_EQ(read[k], absl::StrCat("caller", c, "-", call++));
        }
      }
    }
  }
}

// --packed_records=false, for a rolling upgrade from a walserver that cannot read them: every
// entry is a record of its own, even in one call.
TEST_F(Packed, WithPackingOffEveryEntryIsARecordOfItsOwn) {
  const std::vector<uint64_t> ns = InOneSlot(150, 2);
  ASSERT_EQ(ns.size(), 2u);
  WriterOptions options;
  options.max_record_bytes = kMaxRecordBytes;
  options.topics = {topic()};
  options.packed_records = false;
  auto writer = EntryWriter::Create(properties(), options, "unpacked");
  ASSERT_TRUE(writer.ok()) << writer.status();
  auto ids = Append({Item(ns[0], "a"), Item(ns[1], "b")}, writer->get());
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ((*ids)[1], (*ids)[0] + 1);
  EXPECT_EQ((*writer)->packed_records(), 0u);
  EXPECT_EQ(Read(ns[1]), (Strings{"b"}));
}

}  // namespace
}  // namespace wal::testing
