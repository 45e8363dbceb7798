// Entry payloads (random letters, time-series rows) and the broker's stored bytes for a slot.
#include "bench/walbench/entries.h"

#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"

namespace walbench {

std::string TimeSeriesEntry(uint64_t seed, size_t target_bytes) {
  std::mt19937_64 rng(seed);
  std::string out;
  const auto varint = [&](uint64_t v) {
    while (v >= 0x80) {
      out.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<char>(v));
  };
  const auto text = [&](int field, const std::string& value) {
    varint(static_cast<uint64_t>(field) << 3 | 2);
    varint(value.size());
    out += value;
  };
  for (const char* column :
       {"host", "az", "ts", "cpu_user", "cpu_system", "mem_used", "disk_io", "net_rx"}) {
    text(1, column);
  }
  std::uniform_real_distribution<double> step(-0.5, 0.5);
  double fields[5] = {23.5, 7.25, 61.0, 120.0, 830.0};
  int64_t ts = 1764547200000 + static_cast<int64_t>(seed % 100000) * 10000;
  for (int row = 0; out.size() < target_bytes; ++row) {
    text(2, absl::StrCat("host-", (seed * 7 + row) % 64));
    text(3, absl::StrCat("us-west-2", std::string(1, static_cast<char>('a' + row % 3))));
    varint(4 << 3);
    varint(static_cast<uint64_t>(ts));
    ts += 10000;
    for (double& f : fields) {
      f += step(rng);
      const double rounded = static_cast<double>(static_cast<int64_t>(f * 100)) / 100;
      out.push_back(static_cast<char>(5 << 3 | 1));
      out.append(reinterpret_cast<const char*>(&rounded), sizeof(rounded));
    }
  }
  return out;
}

std::string Payload(size_t bytes) {
  std::mt19937_64 rng(bytes);
  std::string s(bytes, '\0');
  for (char& c : s) c = static_cast<char>('a' + rng() % 26);
  return s;
}

uint64_t StoredBytes(const std::string& data_dir, const std::string& topic, int partition) {
  uint64_t bytes = 0;
  const std::filesystem::path dir =
      std::filesystem::path(data_dir) / absl::StrCat(topic, "-", partition);
  for (const auto& file : std::filesystem::directory_iterator(dir)) {
    if (file.path().extension() == ".log") bytes += file.file_size();
  }
  return bytes;
}

}  // namespace walbench
