#include "server/common/crc32c.h"

#include <cstddef>
#include <cstring>

namespace wal {
namespace {

// Reflected polynomial 0x82F63B78: the checksum Kafka's record batches use too. SSE4.2 computes
// it in hardware at several GB/s; the table is the fallback.
constexpr uint32_t kCrc32cPoly = 0x82F63B78u;

struct Crc32cTable {
  uint32_t t[256];
  constexpr Crc32cTable() : t() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kCrc32cPoly : c >> 1;
      t[i] = c;
    }
  }
};
constexpr Crc32cTable kCrc32c;

uint32_t Crc32cSoftware(uint32_t crc, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) crc = kCrc32c.t[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(uint32_t crc, const uint8_t* p,
                                                          size_t n) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}
const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif

}  // namespace

uint32_t Crc32c(std::string_view data) {
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
#if defined(__x86_64__)
  if (kHaveSse42) return ~Crc32cHardware(~0u, p, data.size());
#endif
  return ~Crc32cSoftware(~0u, p, data.size());
}

}  // namespace wal
