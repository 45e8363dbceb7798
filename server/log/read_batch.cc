#include "server/log/read_batch.h"

#include <algorithm>
#include <cstddef>
#include <utility>

#include "google/protobuf/io/coded_stream.h"

namespace wal {
namespace {

// Protobuf's wire format: a field's key is (number << 3 | wire type); varint fields are type 0,
// length-delimited ones type 2.
constexpr uint8_t kVarint = 0;
constexpr uint8_t kLengthDelimited = 2;

using google::protobuf::io::CodedOutputStream;

size_t VarintSize(uint64_t v) { return CodedOutputStream::VarintSize64(v); }

// Keys and varints of a few fields, gathered on the stack and appended to a chunk at once (a
// push_back per byte cost more than the entry's checksum).
class FieldWriter {
 public:
  FieldWriter() = default;
  FieldWriter(const FieldWriter&) = delete;  // p_ points into buf_
  FieldWriter& operator=(const FieldWriter&) = delete;

  void Varint(uint64_t v) { p_ = CodedOutputStream::WriteVarint64ToArray(v, p_); }
  void Key(int field, uint8_t type) { Varint(static_cast<uint64_t>(field) << 3 | type); }
  // A varint field, left out when zero as proto3 leaves it out.
  void VarintField(int field, uint64_t v) {
    if (v == 0) return;
    Key(field, kVarint);
    Varint(v);
  }
  void AppendTo(std::string* out) const {
    out->append(reinterpret_cast<const char*>(buf_), static_cast<size_t>(p_ - buf_));
  }

 private:
  uint8_t buf_[64];  // room for four fields of a key and a 10-byte varint each (44 bytes at most)
  uint8_t* p_ = buf_;
};

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
  // In field-number order, as protobuf writes them.
  FieldWriter head;
  head.Key(kResponseEntries, kLengthDelimited);
  head.Varint(entry_bytes);
  head.VarintField(kNamespaceId, e.namespace_id);
  head.VarintField(kEntryId, e.entry_id);
  if (!e.data.empty()) {
    head.Key(kData, kLengthDelimited);
    head.Varint(e.data.size());
  }
  head.AppendTo(out);
  out->append(e.data);
  FieldWriter tail;
  tail.VarintField(kEpoch, e.epoch);
  tail.VarintField(kSequence, e.sequence);
  tail.Key(kCrc32c, kVarint);
  tail.Varint(e.crc32c);
  tail.VarintField(kWriterId, e.writer_id);
  tail.AppendTo(out);
}

size_t ReadBatch::memory_bytes() const {
  size_t bytes = 0;
  for (const std::string& chunk : chunks_) bytes += chunk.capacity();
  return bytes + ids_.capacity() * sizeof(uint64_t) + offsets_.capacity() * sizeof(size_t);
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
