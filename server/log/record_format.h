// The binary format of data records in the slot topics (docs/ARCHITECTURE.md, "Data records").
//
// Kafka key: namespace id, 8 bytes big-endian (common/namespace_key.h). Kafka value: a fixed header
// followed by a chunk of the entry. All integers are big-endian.
//
//   offset size field
//        0    1 format version (1)
//        1    1 kind: 1 Full, 2 First, 3 Middle, 4 Last
//        2    2 header size in bytes: 76 as written today, 28 or 52 in older records; readers
//               skip to it, so later layouts may append fields
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
// Packed records (format version 2) carry one format-1 record (Full or Fence) of each of several
// namespaces, so that one Kafka record, and one delivery report, serves many entries. Kafka key:
// none. Value:
//
//   offset size field
//        0    1 format version (2)
//        1    1 reserved (0)
//        2    2 header size in bytes: 16 as written today; readers skip to it
//        4    4 number of records packed, N >= 1
//        8    4 CRC-32C of the directory
//       12    4 reserved (0)
//       16 12*N directory: per packed record its namespace id (8) and size in bytes (4)
//        .    . the N format-1 records, back to back, in directory order
//
// An entry id is the offset of the Kafka record that holds the entry's first byte, so a packed
// record holds at most one record per namespace: two entries of a namespace never share an id.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace wal {

enum class RecordKind : uint8_t { kFull = 1, kFirst = 2, kMiddle = 3, kLast = 4, kFence = 5 };

inline constexpr uint8_t kRecordFormatVersion = 1;
inline constexpr uint8_t kPackedFormatVersion = 2;
inline constexpr size_t kPackedHeaderBytes = 16;
inline constexpr size_t kPackedDirectoryEntryBytes = 12;
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

// Splits `data` into record values of at most `max_record_bytes` each (header included).
// `max_record_bytes` must exceed kRecordHeaderBytes. `crc`: the entry's CRC-32C as its appender
// computed it and walserver checked it (end-to-end); computed here when not given.
std::vector<std::string> EncodeEntry(std::string_view data, uint64_t nonce, size_t max_record_bytes,
                                     const EntryStamp& stamp = {}, const RecordSource& source = {},
                                     std::optional<uint32_t> crc = std::nullopt);
// The fence record of `epoch`.
std::string EncodeFence(uint64_t epoch, const RecordSource& source = {});

// The same records written into memory the caller owns, so that an append of many entries makes
// one allocation for all its records instead of one or more per entry. EntryRecordBytes is the
// room an entry's records take; EncodeEntryTo writes them one after another from `out` and
// appends a view of each to `records`. EncodeFenceTo writes kRecordHeaderBytes.
size_t EntryRecordBytes(size_t data_bytes, size_t max_record_bytes);
void EncodeEntryTo(std::string_view data, uint64_t nonce, size_t max_record_bytes,
                   const EntryStamp& stamp, const RecordSource& source, std::optional<uint32_t> crc,
                   char* out, std::vector<std::string_view>* records);
void EncodeFenceTo(uint64_t epoch, const RecordSource& source, char* out);

// Decodes one record value. Errors (unknown version or kind, short value) mean the record is not
// ours to read; the caller skips and counts it.
absl::StatusOr<DecodedRecord> DecodeRecord(std::string_view value);

// One namespace's record inside a packed record.
struct PackedPart {
  uint64_t namespace_id = 0;
  std::string_view record;  // a format-1 record
};

// The bytes a packed record of `parts` takes.
size_t PackedRecordBytes(const std::vector<PackedPart>& parts);
// Writes the packed record of `parts` (at most one per namespace) to `out`, which has room for
// PackedRecordBytes(parts).
void EncodePackedTo(const std::vector<PackedPart>& parts, char* out);
// Whether `value` claims to be a packed record (its version byte); DecodePacked says if it is.
inline bool IsPackedRecord(std::string_view value) {
  return !value.empty() && static_cast<uint8_t>(value[0]) == kPackedFormatVersion;
}
// The records packed in `value`, pointing into it, in directory order. An error (short value,
// directory checksum, sizes that do not add up, a namespace named twice) means the record is not
// ours to read.
absl::Status DecodePacked(std::string_view value, std::vector<PackedPart>* parts);

}  // namespace wal
