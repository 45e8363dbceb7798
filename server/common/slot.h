// A slot: one partition of one of the shared topics. Namespaces are placed in slots, scans read
// slots, the pruner cuts slots; maps of per-slot state are keyed by it.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>

namespace wal {

struct Slot {
  std::string topic;
  int32_t partition = 0;
  bool operator==(const Slot& o) const { return topic == o.topic && partition == o.partition; }
  bool operator<(const Slot& o) const {
    return std::tie(topic, partition) < std::tie(o.topic, o.partition);
  }
};

}  // namespace wal
