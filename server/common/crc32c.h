// CRC-32C (Castagnoli): the checksum of an entry, computed by walclient when it appends, checked
// by walserver before it writes, kept in every record of the entry, checked by walserver when
// it reads the entry back and by walclient when it receives it (docs/ARCHITECTURE.md, "End-to-end
// checksums"). Shared by walserver and walclient, so it depends on nothing else of ours.
#pragma once

#include <cstdint>
#include <string_view>

namespace wal {

// CRC-32C of `data` (hardware-accelerated where the CPU has SSE4.2).
uint32_t Crc32c(std::string_view data);

}  // namespace wal
