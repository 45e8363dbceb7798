// The (writer id, sequence) pairs a read has seen, kept per writer as disjoint closed ranges:
// retries and concurrent appends may arrive out of order, but the ranges stay few. A pair with
// writer id 0 or sequence 0 names no entry and is never seen. Used by the server's reads to drop
// retried copies (log/entry_assembler.h) and by walclient's resumed reads for those past their
// resumption point.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>

namespace wal {

class SeenSequences {
 public:
  // Adds the pair; true when it was not seen before (or names no entry).
  bool Add(uint64_t writer_id, uint64_t sequence) {
    if (writer_id == 0 || sequence == 0) return true;
    std::map<uint64_t, uint64_t>& ranges = ranges_[writer_id];
    auto next = ranges.upper_bound(sequence);  // the first range starting after it
    if (next != ranges.begin()) {
      auto prev = std::prev(next);
      if (prev->second >= sequence) return false;  // inside a seen range
      if (prev->second + 1 == sequence) {          // extends prev
        prev->second = sequence;
        if (next != ranges.end() && next->first == sequence + 1) {
          prev->second = next->second;
          ranges.erase(next);
        }
        return true;
      }
    }
    if (next != ranges.end() && next->first == sequence + 1) {  // extends next downwards
      const uint64_t last = next->second;
      ranges.erase(next);
      ranges.emplace(sequence, last);
      return true;
    }
    ranges.emplace(sequence, sequence);
    return true;
  }

  bool Contains(uint64_t writer_id, uint64_t sequence) const {
    if (writer_id == 0 || sequence == 0) return false;
    auto writer = ranges_.find(writer_id);
    if (writer == ranges_.end()) return false;
    auto next = writer->second.upper_bound(sequence);
    return next != writer->second.begin() && std::prev(next)->second >= sequence;
  }

 private:
  std::map<uint64_t, std::map<uint64_t, uint64_t>> ranges_;  // writer id -> first -> last
};

}  // namespace wal
