// The compression mode: time-series entries appended and replayed through a walserver per codec.
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/walbench/bench.h"

namespace walbench {

void Bench::Compression() {
  // Without the broker's data directory the bytes stored are not measured (value 0).
  const std::string data_dir = absl::GetFlag(FLAGS_kafka_data_dir);
  const auto stored_bytes = [&](const wal::v1::Namespace& ns) -> uint64_t {
    return data_dir.empty() ? 0 : StoredBytes(data_dir, ns.topic(), ns.partition());
  };
  const uint64_t total = static_cast<uint64_t>(absl::GetFlag(FLAGS_replay_mib)) << 20;
  const int threads = absl::GetFlag(FLAGS_threads);
  const int batch = 16;
  // Distinct entries (a few hundred), so that no codec sees the same bytes over and over.
  std::vector<std::string> entries;
  for (uint64_t seed = 1; seed <= 512; ++seed) entries.push_back(TimeSeriesEntry(seed, 4096));
  const std::vector<std::string> codecs = absl::StrSplit(absl::GetFlag(FLAGS_codecs), ',');
  for (const std::string& codec : codecs) {
    Walserver ws(absl::StrCat("codec", codec, getpid()),
                 {"--topic_count=1", "--partitions_per_topic=1", "--compression=" + codec});
    ws.Start();
    auto c = Connect(ws.address());
    Must(c->CreateNamespace(1).status(), "create");
    const auto ns = c->GetNamespace(1);
    const uint64_t before = stored_bytes(*ns);
    std::atomic<uint64_t> written{0}, appended{0}, appended_entries{0}, next{0};
    const double cpu0 = PathCpuSeconds("service", ws.pid());
    const auto t0 = Clock::now();
    std::vector<std::thread> callers;
    for (int t = 0; t < threads; ++t) {
      callers.emplace_back([&] {
        while (written.load() < total) {
          wal::v1::AppendRequest request;
          uint64_t bytes = 0;
          for (int i = 0; i < batch; ++i) {
            const std::string& data = entries[next++ % entries.size()];
            auto* e = request.add_entries();
            e->set_namespace_id(1);
            e->set_data(data);
            bytes += data.size();
          }
          written += bytes;
          Must(c->Append(std::move(request)).status(), "append");
          appended += bytes;
          appended_entries += batch;
        }
      });
    }
    for (auto& t : callers) t.join();
    const double secs = duration<double>(Clock::now() - t0).count();
    const double cpu = PathCpuSeconds("service", ws.pid()) - cpu0;
    const double gb = appended / 1e9;
    const uint64_t stored = stored_bytes(*ns) - before;
    std::vector<double> replays;
    for (int run = 0; run < runs; ++run) {
      const auto r0 = Clock::now();
      uint64_t n = 0;
      wal::ReadOptions read;
      read.namespace_id = 1;
      Must(c->Read(read, [&](wal::v1::Entry&) { return ++n > 0; }), "replay");
      replays.push_back(duration<double>(Clock::now() - r0).count());
    }
    const double replay_seconds = Median(replays);
    const std::string parameter = absl::StrFormat("%.0f MB rows", appended / 1e6);
    Row append{"compression", codec + " append", parameter};
    append.entries_per_s = appended_entries / secs;
    append.mb_per_s = appended / 1e6 / secs;
    append.cpu_s_per_gb = cpu / gb;
    append.rss_mib = ResidentMiB(ws.pid());
    append.value = static_cast<double>(stored) / gb;  // bytes stored per GB appended
    Emit(append);
    Row replay{"compression", codec + " replay", parameter};
    replay.mb_per_s = appended / 1e6 / replay_seconds;
    replay.value = replay_seconds;
    Emit(replay);
  }
}

}  // namespace walbench
