// The binary format of data records in the slot topics (see DESIGN.md, "Data records").
//
// Kafka key: namespace id, 8 bytes big-endian. Kafka value: a fixed header followed by a chunk of
// the entry. All integers are big-endian.
//
//   offset size field
//        0    1 format version (1)
//        1    1 kind: 1 Full, 2 First, 3 Middle, 4 Last
//        2    2 header size in bytes (28 in version 1; readers skip to it, so later versions
//               may append fields)
//        4    4 CRC-32C (Castagnoli) of the whole entry
//        8    8 size of the whole entry in bytes
//       16    8 entry nonce: unique per entry and writer, ties the chunks of one entry together
//       24    4 chunk index: 0 for Full and First, then 1, 2, ...
//       28    8 writer epoch of the entry (0: the writer never acquired the namespace)
//       36    8 writer id (0: none)
//       44    8 sequence of the entry for its writer and namespace (0: none)
//       52    8 session: random per walserver process (0: unknown)
//       60    8 origin: hash of the walserver's --name, the same across its restarts (0: unknown)
//       68    8 wall-clock time the entry was encoded, ms since the Unix epoch (0: unknown)
//
// Records written before the fields at 28..51 (or 52..75) existed have a 28-byte (52-byte)
// header; the missing fields read as zero.
// An entry that fits one record is Full; a larger one is First, Middle..., Last, produced back to
// back through the one producer that owns the slot. A Fence record (kind 5, no payload) marks
// where AcquireNamespace raised the namespace's epoch: later records of a lower epoch are not the
// namespace's.
//
// Torn entries. A split entry whose writer died, was purged or failed part-way never gets its
// Last record. The assembler gives it up (counted in torn()) as soon as the namespace's records
// show it can never complete: a later record of the same session that is not its next chunk
// (one process produces an entry's chunks back to back, in order), a record of the same origin
// from another session (the writer restarted), a fence of a higher epoch (it could never be
// read anyway), or a record encoded more than `torn_after_ms` after its first chunk (its
// writer's producer gives up on a record after the append timeout, at most 30 s). Nothing else:
// an entry of another live writer may still complete, and dropping it would lose it. A reader
// bounds what it holds back with held_bytes() instead (server/entry_reader.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace wal {

enum class RecordKind : uint8_t { kFull = 1, kFirst = 2, kMiddle = 3, kLast = 4, kFence = 5 };

inline constexpr uint8_t kRecordFormatVersion = 1;
inline constexpr size_t kRecordHeaderBytes = 76;
inline constexpr size_t kStampedRecordHeaderBytes = 52;  // the second layout, still readable
inline constexpr size_t kMinRecordHeaderBytes = 28;      // the first layout, still readable

// Who wrote an entry: carried by each of its records.
struct EntryStamp {
  uint64_t epoch = 0;
  uint64_t writer_id = 0;
  uint64_t sequence = 0;
};

// Which process wrote a record, and when: lets readers see that a split entry was torn.
struct RecordSource {
  uint64_t session = 0;
  uint64_t origin = 0;
  int64_t created_ms = 0;
};

// A stable 64-bit hash of a walserver's name (FNV-1a), never 0.
uint64_t OriginOf(std::string_view name);

struct RecordHeader {
  RecordKind kind = RecordKind::kFull;
  uint32_t entry_crc = 0;
  uint64_t entry_bytes = 0;
  uint64_t entry_nonce = 0;
  uint32_t chunk_index = 0;
  EntryStamp stamp;
  RecordSource source;
};

struct DecodedRecord {
  RecordHeader header;
  std::string_view payload;  // points into the decoded value
};

// Kafka key of every record of a namespace.
std::string EncodeKey(uint64_t namespace_id);
// The namespace id of a key, or nullopt for a key that is not 8 bytes (a foreign record).
std::optional<uint64_t> DecodeKey(const void* key, size_t size);

// CRC-32C of `data` (hardware-accelerated where the CPU has SSE4.2).
uint32_t EntryCrc(std::string_view data);

// Splits `data` into record values of at most `max_record_bytes` each (header included).
// `max_record_bytes` must exceed kRecordHeaderBytes.
std::vector<std::string> EncodeEntry(std::string_view data, uint64_t nonce, size_t max_record_bytes,
                                     const EntryStamp& stamp = {}, const RecordSource& source = {});
// The fence record of `epoch`.
std::string EncodeFence(uint64_t epoch, const RecordSource& source = {});

// Decodes one record value. Errors (unknown version or kind, short value) mean the record is not
// ours to read; the caller skips and counts it.
absl::StatusOr<DecodedRecord> DecodeRecord(std::string_view value);

struct AssembledEntry {
  uint64_t entry_id = 0;  // offset of the entry's first record
  std::string data;
  EntryStamp stamp;
};

// Rebuilds the entries of one namespace from its records in offset order, and hands them out in
// entry-id order. Chunks of different entries may interleave (two writers of one namespace), so
// chunks are matched by nonce, and a complete entry is held back while an earlier-starting one is
// still incomplete. Incomplete, out-of-sequence, oversized or CRC-failing entries are never
// returned; they are counted in skipped().
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

  // Feeds the record at `offset`; appends the entries that became ready to `out`.
  void Add(int64_t offset, std::string_view value, std::vector<AssembledEntry>* out);
  // Gives up on incomplete entries (the end of the range was reached) and hands out the rest.
  void Flush(std::vector<AssembledEntry>* out);

  uint64_t skipped() const { return skipped_; }
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
  void Complete(int64_t first_offset, const RecordHeader& header, std::string data,
                std::vector<AssembledEntry>* out);
  void Release(std::vector<AssembledEntry>* out);
  // True the first time a (writer, sequence) is seen.
  bool FirstCopy(const EntryStamp& stamp);
  // Gives up on the incomplete entries that `next` (the record after them) shows to be torn.
  void DropTorn(const RecordHeader& next, std::vector<AssembledEntry>* out);
  enum class Fate { kMayComplete, kTorn, kFenced };
  Fate FateOf(const Partial& p, const RecordHeader& next) const;

  uint64_t max_entry_bytes_;
  uint64_t min_epoch_;
  int64_t torn_after_ms_;
  std::map<uint64_t, Partial> partials_;     // by nonce
  std::map<int64_t, AssembledEntry> ready_;  // complete, held back; by entry id
  // Sequences seen per writer id, as disjoint closed ranges (first -> last): retries and
  // concurrent appends may arrive out of order, but the ranges stay few.
  std::map<uint64_t, std::map<uint64_t, uint64_t>> seen_;
  uint64_t skipped_ = 0;
  uint64_t fenced_ = 0;
  uint64_t duplicates_ = 0;
  uint64_t torn_ = 0;
  size_t buffered_bytes_ = 0;
  size_t ready_bytes_ = 0;  // in ready_
};

}  // namespace wal
