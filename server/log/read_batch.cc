#include "server/log/read_batch.h"

#include <algorithm>
#include <cstddef>
#include <utility>

namespace wal {
namespace {

// Protobuf's wire format: a field's key is (number << 3 | wire type); varint fields are type 0,
// length-delimited ones type 2.
constexpr uint8_t kVarint = 0;
constexpr uint8_t kLengthDelimited = 2;

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutKey(int field, uint8_t type, std::string* out) {
  PutVarint(static_cast<uint64_t>(field) << 3 | type, out);
}

// Fields of v1::Entry (wal.proto). Proto3 leaves out zeros and empty bytes, except crc32c, an
// optional field, which is written whenever it is set.
enum EntryField : int {
  kNamespaceId = 1,
  kEntryId = 2,
  kData = 3,
  kEpoch = 4,
  kSequence = 5,
  kCrc32c = 6,
  kWriterId = 7,
};
constexpr int kResponseEntries = 1;  // ReadResponse.entries

// Key and value of a varint field left out when zero (every key here takes one byte).
size_t VarintFieldSize(uint64_t v) { return v == 0 ? 0 : 1 + VarintSize(v); }

void PutVarintField(int field, uint64_t v, std::string* out) {
  if (v == 0) return;
  PutKey(field, kVarint, out);
  PutVarint(v, out);
}

}  // namespace

std::string* ReadBatch::Room(size_t bytes) {
  if (chunks_.empty() || chunks_.back().capacity() - chunks_.back().size() < bytes) {
    chunks_.emplace_back().reserve(std::max(bytes, std::min(bytes_, kMaxChunkBytes)));
  }
  return &chunks_.back();
}

void ReadBatch::AddEntry(const ReadEntry& e) {
  const size_t data_field = e.data.empty() ? 0 : 1 + VarintSize(e.data.size()) + e.data.size();
  const size_t entry_bytes = VarintFieldSize(e.namespace_id) + VarintFieldSize(e.entry_id) +
                             data_field + VarintFieldSize(e.epoch) + VarintFieldSize(e.sequence) +
                             1 + VarintSize(e.crc32c) + VarintFieldSize(e.writer_id);
  const size_t field_bytes = 1 + VarintSize(entry_bytes) + entry_bytes;
  ids_.push_back(e.entry_id);
  offsets_.push_back(bytes_);
  std::string* out = Room(field_bytes);
  bytes_ += field_bytes;
  PutKey(kResponseEntries, kLengthDelimited, out);
  PutVarint(entry_bytes, out);
  PutVarintField(kNamespaceId, e.namespace_id, out);
  PutVarintField(kEntryId, e.entry_id, out);
  if (!e.data.empty()) {
    PutKey(kData, kLengthDelimited, out);
    PutVarint(e.data.size(), out);
    out->append(e.data);
  }
  PutVarintField(kEpoch, e.epoch, out);
  PutVarintField(kSequence, e.sequence, out);
  PutKey(kCrc32c, kVarint, out);
  PutVarint(e.crc32c, out);
  PutVarintField(kWriterId, e.writer_id, out);
}

void ReadBatch::DropBelow(int64_t cut) {
  auto* gaps = rest_.mutable_gaps();
  for (int i = gaps->size() - 1; i >= 0; --i) {
    if (static_cast<int64_t>(gaps->Get(i).to_entry_id()) <= cut) gaps->DeleteSubrange(i, 1);
  }
  // Entries are in id order: those below the cut are a prefix.
  size_t keep_from = 0;
  while (keep_from < ids_.size() && static_cast<int64_t>(ids_[keep_from]) < cut) ++keep_from;
  if (keep_from == 0) return;
  const size_t dropped = keep_from < ids_.size() ? offsets_[keep_from] : bytes_;
  size_t left = dropped;
  auto whole = chunks_.begin();
  while (whole != chunks_.end() && left >= whole->size()) left -= (whole++)->size();
  chunks_.erase(chunks_.begin(), whole);
  if (left > 0) chunks_.front().erase(0, left);
  bytes_ -= dropped;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(keep_from));
  offsets_.erase(offsets_.begin(), offsets_.begin() + static_cast<std::ptrdiff_t>(keep_from));
  for (size_t& offset : offsets_) offset -= dropped;
}

std::vector<std::string> ReadBatch::TakeSerialized() {
  std::vector<std::string> out = std::move(chunks_);
  // Repeated fields may come in any order and interleaved: a parser appends each to its field.
  if (rest_.gaps_size() > 0 || rest_.ends_size() > 0) out.push_back(rest_.SerializeAsString());
  *this = ReadBatch();
  return out;
}

v1::ReadResponse ReadBatch::ToResponse() const {
  std::string bytes;
  for (const std::string& chunk : chunks_) bytes += chunk;
  v1::ReadResponse response;
  response.ParseFromString(bytes);
  response.MergeFrom(rest_);
  return response;
}

}  // namespace wal
