// What walbench writes: entry payloads, and the bytes the broker stores for them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace walbench {

// One WAL entry as a time-series datanode writes it: a region's batch of rows (a schema, then
// per row two tags, a timestamp and five float fields in random walks), encoded like a
// protobuf message. Tags repeat and timestamps step regularly, as in real metrics; the floats'
// low bits are noise. Deterministic per seed.
std::string TimeSeriesEntry(uint64_t seed, size_t target_bytes);

// `bytes` random lowercase letters, the same for the same size.
std::string Payload(size_t bytes);

// Bytes of the partition's log segments in the broker's data directory.
uint64_t StoredBytes(const std::string& data_dir, const std::string& topic, int partition);

}  // namespace walbench
