// libFuzzer target for the record decoders and the entry assembler: any bytes, cut into records
// of a slot, must never crash them, and whatever entries come out must be whole and in order. A
// record that decodes as packed gives the assembler its first namespace's part instead, as a
// slot scan gives each reader its own namespace's part.
//
// Input: records one after another, each a 2-byte big-endian length and that many bytes; every
// record gets the next offset. The first byte picks the assembler's entry limit, and whether it
// lends records (EntryAssembler::LendRecords): then each record lives on the heap only while Add
// and the reading of what it handed out run, as a slot scan's message does, so that
// AddressSanitizer catches an entry that points into a record gone.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/log/entry_assembler.h"
#include "server/log/record_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint64_t max_entry_bytes = uint64_t{1} << (data[0] % 24);
  wal::EntryAssembler assembler(max_entry_bytes, data[0] % 3);
  const bool lend = (data[0] & 0x80) != 0;
  if (lend) assembler.LendRecords();
  std::vector<wal::AssembledEntry> out;
  size_t pos = 1;
  int64_t offset = 0;
  while (pos + 2 <= size) {
    const size_t len = std::min<size_t>((size_t{data[pos]} << 8) | data[pos + 1], size - pos - 2);
    std::string_view record(reinterpret_cast<const char*>(data + pos + 2), len);
    (void)wal::DecodeRecord(record);
    std::vector<wal::PackedPart> parts;
    if (wal::DecodePacked(record, &parts).ok()) record = parts.front().record;
    if (lend) {
      const std::string held(record);  // gone once this step ends
      std::vector<wal::AssembledEntry> step;
      assembler.Add(offset++, held, &step);
      for (wal::AssembledEntry& e : step) {
        e.data = std::string(e.bytes());  // read while the record lives, as ReadMember does
        e.lent.reset();
        out.push_back(std::move(e));
      }
    } else {
      assembler.Add(offset++, record, &out);
    }
    pos += 2 + len;
  }
  assembler.Flush(&out);
  uint64_t last = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    // Entries come out in id order, and none is larger than the bytes it came from.
    if (i > 0 && out[i].entry_id <= last) abort();
    if (out[i].bytes().size() > size) abort();
    last = out[i].entry_id;
  }
  if (assembler.buffered_bytes() != 0) abort();  // Flush gives everything up
  return 0;
}
