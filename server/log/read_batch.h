// One message of a read's stream (a ReadResponse) as the read path builds and queues it: its
// entries already in their wire form, its gaps and ends (rare and small) as messages.
//
// Why. Building an Entry message per entry, then serialising and freeing it on gRPC's thread,
// cost a replay a tenth of walserver's CPU (docs/benchmarks/2026-12-04-replay-profiled.md). Here
// the scan's thread writes each entry's bytes once, into chunks that gRPC sends as they are
// (rpc/read_stream.h). A chunk is never grown (that would copy what it holds): a new one takes the
// next entries, as large as the batch so far (at most kMaxChunkBytes), so a batch holds at most
// about twice its bytes, and a batch of one small entry no more than it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "wal/v1/wal.pb.h"

namespace wal {

// An entry as a read delivers it: the fields of v1::Entry a ReadResponse carries.
struct ReadEntry {
  uint64_t namespace_id = 0;
  uint64_t entry_id = 0;
  std::string_view data;
  uint64_t epoch = 0;
  uint64_t sequence = 0;
  uint32_t crc32c = 0;  // always set in a ReadResponse
  uint64_t writer_id = 0;
};

class ReadBatch {
 public:
  // Appends `e` as ReadResponse.entries would hold it (bytes equal to protobuf's).
  void AddEntry(const ReadEntry& e);
  v1::Gap* AddGap() { return rest_.add_gaps(); }
  v1::ReadEnd* AddEnd() { return rest_.add_ends(); }

  size_t entry_count() const { return ids_.size(); }
  int end_count() const { return rest_.ends_size(); }
  // The memory the entries take: their chunks, with what is left unused at the end of each (up
  // to about as much again as they hold, when entries do not fit what is left), and their ids
  // and offsets.
  size_t memory_bytes() const;
  bool empty() const { return ids_.empty() && rest_.gaps_size() == 0 && rest_.ends_size() == 0; }
  // Drops the entries below `cut` and the gaps that end at or below it (a truncation since the
  // batch was built).
  void DropBelow(int64_t cut);

  // The message's bytes, in pieces to be sent one after another: the entries, then the gaps and
  // ends. Leaves the batch empty.
  std::vector<std::string> TakeSerialized();
  // The message parsed back, for tests.
  v1::ReadResponse ToResponse() const;

 private:
  static constexpr size_t kMaxChunkBytes = 256 << 10;

  // Room for `bytes` more at the end of the last chunk.
  std::string* Room(size_t bytes);

  std::vector<std::string> chunks_;  // ReadResponse field 1, once per entry
  size_t bytes_ = 0;                 // in chunks_
  std::vector<uint64_t> ids_;        // of the entries, in order
  // Where each entry's field starts, counting the chunks' bytes one after another.
  std::vector<size_t> offsets_;
  v1::ReadResponse rest_;  // gaps and ends only
};

}  // namespace wal
