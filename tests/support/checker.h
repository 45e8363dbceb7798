// The load generator and checker of the fault tests, after Jepsen's queue workload: one writer
// thread per namespace appends numbered entries whose bytes are derived from (namespace,
// number) and records which appends were acknowledged; afterwards the checker reads every
// namespace back and classifies every entry.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/wal_client.h"

namespace wal::testing {

struct Verdict {
  uint64_t acknowledged = 0;  // entries whose append returned OK
  uint64_t unknown = 0;       // entries whose append failed: may or may not be in the log
  uint64_t read = 0;          // entries the reads returned
  uint64_t lost = 0;          // acknowledged, not returned
  uint64_t duplicated = 0;    // returned more than once
  uint64_t reordered = 0;     // returned after an entry appended later
  uint64_t corrupted = 0;     // bytes that no writer wrote
  bool clean() const { return lost == 0 && duplicated == 0 && reordered == 0 && corrupted == 0; }
  std::string Summary() const;
};

class Workload {
 public:
  // `connect` makes each writer's client. Entries are `entry_bytes` long, `batch` per append.
  Workload(std::function<std::unique_ptr<Client>()> connect, std::vector<uint64_t> namespaces,
           size_t entry_bytes = 256, int batch = 4);
  ~Workload();  // Stop()

  void Start();
  void Stop();
  // Entries acknowledged so far.
  uint64_t acknowledged() const { return acknowledged_.load(); }
  // Entries of namespace `ns` acknowledged so far.
  uint64_t acknowledged_of(uint64_t ns) const;
  // Failed appends so far.
  uint64_t failures() const { return failures_.load(); }
  // The longest an append call took to answer, success or not (against the client's deadline).
  std::chrono::milliseconds slowest_append() const {
    return std::chrono::milliseconds(slowest_append_ms_.load());
  }
  // Blocks until `count` more entries are acknowledged than now; false after `timeout`.
  bool WaitForProgress(uint64_t count, std::chrono::milliseconds timeout) const;

  // Reads every namespace through `reader` and compares with what was acknowledged.
  Verdict Check(Client& reader) const;

  // The bytes of entry `seq` of namespace `ns`.
  static std::string EntryData(uint64_t ns, uint64_t seq, size_t bytes);

 private:
  void Write(uint64_t ns);

  const std::function<std::unique_ptr<Client>()> connect_;
  const std::vector<uint64_t> namespaces_;
  const size_t entry_bytes_;
  const int batch_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> acknowledged_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<int64_t> slowest_append_ms_{0};
  std::vector<std::thread> threads_;
  mutable std::mutex mu_;
  // Per namespace, per sequence: true acknowledged, false outcome unknown.
  std::map<uint64_t, std::map<uint64_t, bool>> outcomes_;
};

}  // namespace wal::testing
