#include "tests/support/checker.h"

#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace wal::testing {

std::string Verdict::Summary() const {
  return absl::StrCat("acknowledged ", acknowledged, ", unknown outcome ", unknown, ", read ", read,
                      "; lost ", lost, ", duplicated ", duplicated, ", reordered ", reordered,
                      ", corrupted ", corrupted);
}

Workload::Workload(std::function<std::unique_ptr<Client>()> connect,
                   std::vector<uint64_t> namespaces, size_t entry_bytes, int batch)
    : connect_(std::move(connect)),
      namespaces_(std::move(namespaces)),
      entry_bytes_(entry_bytes),
      batch_(batch) {}

Workload::~Workload() { Stop(); }

std::string Workload::EntryData(uint64_t ns, uint64_t seq, size_t bytes) {
  std::string data = absl::StrCat(ns, "/", seq, "/");
  uint64_t x = ns * 0x9e3779b97f4a7c15ULL ^ seq * 0xbf58476d1ce4e5b9ULL;
  while (data.size() < bytes) {
    x ^= x >> 31;
    x *= 0x94d049bb133111ebULL;
    data.push_back(static_cast<char>('a' + x % 26));
  }
  return data;
}

void Workload::Start() {
  for (uint64_t ns : namespaces_) threads_.emplace_back([this, ns] { Write(ns); });
}

void Workload::Stop() {
  stop_ = true;
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void Workload::Write(uint64_t ns) {
  std::unique_ptr<Client> client = connect_();
  for (uint64_t seq = 1; !stop_;) {
    std::vector<std::string> batch;
    for (int i = 0; i < batch_; ++i) batch.push_back(EntryData(ns, seq + i, entry_bytes_));
    const auto start = std::chrono::steady_clock::now();
    auto ids = client->Append(ns, batch);
    const int64_t took = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
    int64_t slowest = slowest_append_ms_.load();
    while (took > slowest && !slowest_append_ms_.compare_exchange_weak(slowest, took)) {
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int i = 0; i < batch_; ++i) outcomes_[ns][seq + i] = ids.ok();
    }
    if (ids.ok()) {
      acknowledged_ += batch.size();
    } else {
      ++failures_;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    seq += batch_;
  }
}

uint64_t Workload::acknowledged_of(uint64_t ns) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = outcomes_.find(ns);
  if (it == outcomes_.end()) return 0;
  uint64_t count = 0;
  for (const auto& [seq, acknowledged] : it->second) count += acknowledged ? 1 : 0;
  return count;
}

bool Workload::WaitForProgress(uint64_t count, std::chrono::milliseconds timeout) const {
  const uint64_t target = acknowledged() + count;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (acknowledged() < target) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

Verdict Workload::Check(Client& reader) const {
  std::lock_guard<std::mutex> lock(mu_);
  Verdict v;
  for (uint64_t ns : namespaces_) {
    const std::map<uint64_t, bool>& outcomes =
        outcomes_.count(ns) ? outcomes_.at(ns) : std::map<uint64_t, bool>{};
    for (const auto& [seq, acked] : outcomes) (acked ? v.acknowledged : v.unknown)++;
    auto entries = reader.ReadAll(ns);
    if (!entries.ok()) {
      // Nothing readable: every acknowledged entry counts as lost.
      for (const auto& [seq, acked] : outcomes) v.lost += acked;
      continue;
    }
    std::set<uint64_t> seen;
    uint64_t last = 0;
    for (const v1::Entry& e : *entries) {
      ++v.read;
      const std::vector<absl::string_view> parts =
          absl::StrSplit(e.data(), absl::MaxSplits('/', 2));
      uint64_t entry_ns = 0, seq = 0;
      if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &entry_ns) ||
          !absl::SimpleAtoi(parts[1], &seq) || entry_ns != ns ||
          e.data() != EntryData(ns, seq, e.data().size()) || !outcomes.count(seq)) {
        ++v.corrupted;
        continue;
      }
      if (!seen.insert(seq).second) ++v.duplicated;
      if (seq < last) ++v.reordered;
      last = std::max(last, seq);
    }
    for (const auto& [seq, acked] : outcomes) {
      if (acked && !seen.count(seq)) ++v.lost;
    }
  }
  return v;
}

}  // namespace wal::testing
