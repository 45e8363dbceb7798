// Turns the records of one namespace, in offset order, back into its entries (the other half of
// record_format.h).
//
// Torn entries. A split entry whose writer died, was purged or failed part-way never gets its
// Last record. The assembler gives it up (counted in torn()) as soon as the namespace's records
// show it can never complete: a later record of the same session that is not its next chunk
// (one process produces an entry's chunks back to back, in order), a record of the same origin
// from another session (the writer restarted), a fence of a higher epoch (it could never be
// read anyway), or a record encoded more than `torn_after_ms` after its first chunk (its
// writer's producer gives up on a record after the append timeout, at most 30 s). Nothing else:
// an entry of another live writer may still complete, and dropping it would lose it. A reader
// bounds what it holds back with held_bytes() instead (log/read_member.cc).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/common/seen_sequences.h"
#include "server/log/record_format.h"

namespace wal {

struct AssembledEntry {
  uint64_t entry_id = 0;  // offset of the entry's first record
  std::string data;       // empty when `lent`
  // Instead of `data`, from an assembler that lends (EntryAssembler::LendRecords): the entry's
  // bytes in the record given to Add.
  std::optional<std::string_view> lent;
  EntryStamp stamp;
  uint32_t crc32c = 0;     // of bytes(), as its records carry it (and as checked)
  int64_t created_ms = 0;  // when its writer encoded it (0: unknown, an old record)

  std::string_view bytes() const { return lent ? *lent : std::string_view(data); }
};

// Rebuilds the entries of one namespace from its records in offset order, and hands them out in
// entry-id order. Chunks of different entries may interleave (two writers of one namespace), so
// chunks are matched by nonce, and a complete entry is held back while an earlier-starting one is
// still incomplete. Incomplete, out-of-sequence, oversized or CRC-failing entries are never
// returned; they are counted in skipped(), and the CRC-failing ones reported by TakeCorrupt().
//
// Fencing: an entry whose epoch is below that of a fence record seen before its last record (or
// below `min_epoch`, the fence known to precede the range) is dropped and counted in fenced().
// Retries: of the entries with the same writer id and sequence, only the first in id order is
// returned; the others are counted in duplicates().
class EntryAssembler {
 public:
  // A torn entry is given up at the latest when a record encoded `torn_after_ms` after its
  // first chunk arrives: the writers' append timeout plus a margin for their clocks.
  static constexpr int64_t kDefaultTornAfterMs = 60000;

  explicit EntryAssembler(uint64_t max_entry_bytes, uint64_t min_epoch = 0,
                          int64_t torn_after_ms = kDefaultTornAfterMs)
      : max_entry_bytes_(max_entry_bytes), min_epoch_(min_epoch), torn_after_ms_(torn_after_ms) {}

  // From now on, an entry of one record that Add hands out at once (nothing waits before it)
  // points into the record instead of a copy of its bytes (AssembledEntry::lent). For a caller
  // done with what `out` holds before it lets go of the record: a replay then copies each entry
  // once, into the message to its client (log/read_batch.h).
  void LendRecords() { lend_records_ = true; }

  // Entries whose id is below `floor` are not wanted (a truncation its reader learned of): they
  // are dropped before retried copies are matched, so that such a copy does not hide its later
  // copy at or past the floor as a duplicate. Only ever raised.
  void RaiseFloor(int64_t floor) { floor_ = std::max(floor_, floor); }

  // Feeds the record at `offset`; appends the entries that became ready to `out`.
  void Add(int64_t offset, std::string_view value, std::vector<AssembledEntry>* out);
  // Gives up on incomplete entries (the end of the range was reached) and hands out the rest.
  void Flush(std::vector<AssembledEntry>* out);

  uint64_t skipped() const { return skipped_; }
  // Whole entries whose data does not match the checksum their records carry (corrupted in
  // Kafka or on the way), found since the last call: their ids and (from the header, which the
  // checksum does not cover) encoding times. Counted in skipped() too and never returned. A
  // reader ends with DATA_LOSS at the first it should deliver.
  struct Corrupt {
    int64_t entry_id = 0;
    int64_t created_ms = 0;
    bool operator==(const Corrupt& o) const {
      return entry_id == o.entry_id && created_ms == o.created_ms;
    }
  };
  std::vector<Corrupt> TakeCorrupt() { return std::exchange(corrupt_, {}); }
  uint64_t fenced() const { return fenced_; }
  uint64_t duplicates() const { return duplicates_; }
  // Incomplete entries given up because the slot showed they can never complete.
  uint64_t torn() const { return torn_; }
  // Bytes held in incomplete entries.
  size_t buffered_bytes() const { return buffered_bytes_; }
  // Bytes held in all: incomplete entries and complete ones waiting behind them.
  size_t held_bytes() const { return buffered_bytes_ + ready_bytes_; }
  // The id of the earliest incomplete entry, if any: where a read that gives up resumes.
  std::optional<int64_t> oldest_incomplete() const;

 private:
  struct Partial {
    int64_t first_offset = 0;
    RecordHeader header;
    std::string data;
    uint32_t next_chunk = 1;
  };
  // A whole entry: its bytes in `data`, or in `lent` when nothing waits before it.
  void Complete(int64_t first_offset, const RecordHeader& header, std::string data,
                std::optional<std::string_view> lent, std::vector<AssembledEntry>* out);
  // Whether an entry may be handed out: its size, epoch and checksum; counts why not.
  bool Accept(int64_t first_offset, const RecordHeader& header, std::string_view data);
  void Release(std::vector<AssembledEntry>* out);
  // Gives up on the incomplete entries that `next` (the record after them) shows to be torn.
  void DropTorn(const RecordHeader& next, std::vector<AssembledEntry>* out);
  enum class Fate { kMayComplete, kTorn, kFenced };
  Fate FateOf(const Partial& p, const RecordHeader& next) const;

  uint64_t max_entry_bytes_;
  uint64_t min_epoch_;
  int64_t torn_after_ms_;
  bool lend_records_ = false;
  int64_t floor_ = 0;                        // see RaiseFloor
  std::map<uint64_t, Partial> partials_;     // by nonce
  std::map<int64_t, AssembledEntry> ready_;  // complete, held back; by entry id
  SeenSequences seen_;                       // of the entries handed out
  std::vector<Corrupt> corrupt_;             // see TakeCorrupt
  uint64_t skipped_ = 0;
  uint64_t fenced_ = 0;
  uint64_t duplicates_ = 0;
  uint64_t torn_ = 0;
  size_t buffered_bytes_ = 0;
  size_t ready_bytes_ = 0;  // in ready_
};

}  // namespace wal
