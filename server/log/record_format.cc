#include "server/log/record_format.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/crc32c.h"

namespace wal {
namespace {

void PutBigEndian(uint64_t value, int bytes, char* out) {
  for (int i = bytes - 1; i >= 0; --i) {
    out[i] = static_cast<char>(value & 0xff);
    value >>= 8;
  }
}

uint64_t GetBigEndian(const char* in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value = (value << 8) | static_cast<uint8_t>(in[i]);
  return value;
}

void PutHeader(const RecordHeader& h, char* out) {
  out[0] = static_cast<char>(kRecordFormatVersion);
  out[1] = static_cast<char>(h.kind);
  PutBigEndian(kRecordHeaderBytes, 2, out + 2);
  PutBigEndian(h.entry_crc, 4, out + 4);
  PutBigEndian(h.entry_bytes, 8, out + 8);
  PutBigEndian(h.entry_nonce, 8, out + 16);
  PutBigEndian(h.chunk_index, 4, out + 24);
  PutBigEndian(h.stamp.epoch, 8, out + 28);
  PutBigEndian(h.stamp.writer_id, 8, out + 36);
  PutBigEndian(h.stamp.sequence, 8, out + 44);
  PutBigEndian(h.source.session, 8, out + 52);
  PutBigEndian(h.source.origin, 8, out + 60);
  PutBigEndian(static_cast<uint64_t>(h.source.created_ms), 8, out + 68);
}

size_t ChunkBytes(size_t max_record_bytes) { return max_record_bytes - kRecordHeaderBytes; }

size_t ChunkCount(size_t data_bytes, size_t max_record_bytes) {
  const size_t chunk_bytes = ChunkBytes(max_record_bytes);
  return std::max<size_t>(1, (data_bytes + chunk_bytes - 1) / chunk_bytes);
}

}  // namespace

uint64_t OriginOf(std::string_view name) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : name) hash = (hash ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return hash == 0 ? 1 : hash;
}

size_t EntryRecordBytes(size_t data_bytes, size_t max_record_bytes) {
  return data_bytes + ChunkCount(data_bytes, max_record_bytes) * kRecordHeaderBytes;
}

void EncodeEntryTo(std::string_view data, uint64_t nonce, size_t max_record_bytes,
                   const EntryStamp& stamp, const RecordSource& source, std::optional<uint32_t> crc,
                   char* out, std::vector<std::string_view>* records) {
  const size_t chunk_bytes = ChunkBytes(max_record_bytes);
  RecordHeader header;
  header.stamp = stamp;
  header.source = source;
  header.entry_crc = crc ? *crc : Crc32c(data);
  header.entry_bytes = data.size();
  header.entry_nonce = nonce;
  const size_t chunks = ChunkCount(data.size(), max_record_bytes);
  for (size_t i = 0; i < chunks; ++i) {
    if (chunks == 1) {
      header.kind = RecordKind::kFull;
    } else if (i == 0) {
      header.kind = RecordKind::kFirst;
    } else if (i + 1 == chunks) {
      header.kind = RecordKind::kLast;
    } else {
      header.kind = RecordKind::kMiddle;
    }
    header.chunk_index = static_cast<uint32_t>(i);
    const std::string_view chunk = data.substr(i * chunk_bytes, chunk_bytes);
    PutHeader(header, out);
    std::copy(chunk.begin(), chunk.end(), out + kRecordHeaderBytes);
    records->emplace_back(out, kRecordHeaderBytes + chunk.size());
    out += kRecordHeaderBytes + chunk.size();
  }
}

void EncodeFenceTo(uint64_t epoch, const RecordSource& source, char* out) {
  RecordHeader header;
  header.source = source;
  header.kind = RecordKind::kFence;
  header.entry_crc = Crc32c({});
  header.stamp.epoch = epoch;
  PutHeader(header, out);
}

std::vector<std::string> EncodeEntry(std::string_view data, uint64_t nonce, size_t max_record_bytes,
                                     const EntryStamp& stamp, const RecordSource& source,
                                     std::optional<uint32_t> crc) {
  std::string buffer(EntryRecordBytes(data.size(), max_record_bytes), '\0');
  std::vector<std::string_view> views;
  EncodeEntryTo(data, nonce, max_record_bytes, stamp, source, crc, buffer.data(), &views);
  return std::vector<std::string>(views.begin(), views.end());
}

std::string EncodeFence(uint64_t epoch, const RecordSource& source) {
  std::string record(kRecordHeaderBytes, '\0');
  EncodeFenceTo(epoch, source, record.data());
  return record;
}

absl::StatusOr<DecodedRecord> DecodeRecord(std::string_view value) {
  if (value.size() < 4) {
    return absl::InvalidArgumentError(absl::StrCat("record of ", value.size(), " bytes"));
  }
  if (static_cast<uint8_t>(value[0]) != kRecordFormatVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown record format version ", static_cast<uint8_t>(value[0])));
  }
  const uint8_t kind = static_cast<uint8_t>(value[1]);
  if (kind < 1 || kind > 5) return absl::InvalidArgumentError(absl::StrCat("record kind ", kind));
  const size_t header_bytes = GetBigEndian(value.data() + 2, 2);
  if (header_bytes < kMinRecordHeaderBytes || header_bytes > value.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("header of ", header_bytes, " bytes in a record of ", value.size()));
  }
  DecodedRecord record;
  record.header.kind = static_cast<RecordKind>(kind);
  record.header.entry_crc = static_cast<uint32_t>(GetBigEndian(value.data() + 4, 4));
  record.header.entry_bytes = GetBigEndian(value.data() + 8, 8);
  record.header.entry_nonce = GetBigEndian(value.data() + 16, 8);
  record.header.chunk_index = static_cast<uint32_t>(GetBigEndian(value.data() + 24, 4));
  if (header_bytes >= kStampedRecordHeaderBytes) {
    record.header.stamp.epoch = GetBigEndian(value.data() + 28, 8);
    record.header.stamp.writer_id = GetBigEndian(value.data() + 36, 8);
    record.header.stamp.sequence = GetBigEndian(value.data() + 44, 8);
  }
  if (header_bytes >= kRecordHeaderBytes) {
    record.header.source.session = GetBigEndian(value.data() + 52, 8);
    record.header.source.origin = GetBigEndian(value.data() + 60, 8);
    record.header.source.created_ms = static_cast<int64_t>(GetBigEndian(value.data() + 68, 8));
  }
  record.payload = value.substr(header_bytes);
  return record;
}

size_t PackedRecordBytes(const std::vector<PackedPart>& parts) {
  size_t bytes = kPackedHeaderBytes + parts.size() * kPackedDirectoryEntryBytes;
  for (const PackedPart& part : parts) bytes += part.record.size();
  return bytes;
}

void EncodePackedTo(const std::vector<PackedPart>& parts, char* out) {
  out[0] = static_cast<char>(kPackedFormatVersion);
  out[1] = 0;
  PutBigEndian(kPackedHeaderBytes, 2, out + 2);
  PutBigEndian(parts.size(), 4, out + 4);
  PutBigEndian(0, 4, out + 12);
  char* directory = out + kPackedHeaderBytes;
  char* record = directory + parts.size() * kPackedDirectoryEntryBytes;
  for (size_t i = 0; i < parts.size(); ++i) {
    PutBigEndian(parts[i].namespace_id, 8, directory + i * kPackedDirectoryEntryBytes);
    PutBigEndian(parts[i].record.size(), 4, directory + i * kPackedDirectoryEntryBytes + 8);
    std::copy(parts[i].record.begin(), parts[i].record.end(), record);
    record += parts[i].record.size();
  }
  const std::string_view directory_bytes(directory, parts.size() * kPackedDirectoryEntryBytes);
  PutBigEndian(Crc32c(directory_bytes), 4, out + 8);
}

absl::Status DecodePacked(std::string_view value, std::vector<PackedPart>* parts) {
  parts->clear();
  if (value.size() < kPackedHeaderBytes || !IsPackedRecord(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a packed record (", value.size(), " bytes)"));
  }
  const size_t header_bytes = GetBigEndian(value.data() + 2, 2);
  const uint64_t count = GetBigEndian(value.data() + 4, 4);
  if (header_bytes < kPackedHeaderBytes || count == 0 ||
      count > (value.size() - std::min(header_bytes, value.size())) / kPackedDirectoryEntryBytes) {
    return absl::InvalidArgumentError(absl::StrCat("packed record of ", value.size(),
                                                   " bytes: header ", header_bytes, ", ", count,
                                                   " records"));
  }
  const std::string_view directory = value.substr(header_bytes, count * kPackedDirectoryEntryBytes);
  if (Crc32c(directory) != GetBigEndian(value.data() + 8, 4)) {
    return absl::InvalidArgumentError("packed record whose directory fails its checksum");
  }
  size_t at = header_bytes + directory.size();
  parts->reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    const char* d = directory.data() + i * kPackedDirectoryEntryBytes;
    const uint64_t bytes = GetBigEndian(d + 8, 4);
    if (bytes > value.size() - at) break;
    parts->push_back(PackedPart{GetBigEndian(d, 8), value.substr(at, bytes)});
    at += bytes;
  }
  if (parts->size() != count || at != value.size()) {
    parts->clear();
    return absl::InvalidArgumentError("packed record whose sizes do not add up to its value");
  }
  // Two records of one namespace at one offset would give two entries one id.
  std::vector<uint64_t> namespaces;
  namespaces.reserve(parts->size());
  for (const PackedPart& part : *parts) namespaces.push_back(part.namespace_id);
  std::sort(namespaces.begin(), namespaces.end());
  if (std::adjacent_find(namespaces.begin(), namespaces.end()) != namespaces.end()) {
    parts->clear();
    return absl::InvalidArgumentError("packed record that names a namespace twice");
  }
  return absl::OkStatus();
}

}  // namespace wal
