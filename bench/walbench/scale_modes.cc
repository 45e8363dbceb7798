// The scale modes: sweep (10 .. --max_namespaces namespaces) and startup (restart with them).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bench/walbench/bench.h"

namespace walbench {

// Closed-loop batches, each for one namespace, as a datanode appends one region's batch per
// call; successive calls go round-robin over namespaces 1000000 .. 1000000+n-1.
Row Bench::SpreadLoad(wal::Client& c, pid_t pid, int n) {
  std::atomic<uint64_t> next{0};
  const int batch = absl::GetFlag(FLAGS_batch);
  return ClosedLoop("sweep", "service", threads, pid, payload.size(), [&](int) {
    wal::v1::AppendRequest request;
    const uint64_t ns = 1000000 + next++ % n;
    for (int i = 0; i < batch; ++i) {
      auto* e = request.add_entries();
      e->set_namespace_id(ns);
      e->set_data(payload);
    }
    return c.Append(request).ok() ? static_cast<uint64_t>(batch) : 0;
  });
}

// Creates namespaces 1000000+from .. 1000000+to-1 with --create_in_flight calls at once, as
// many datanodes opening their regions together; a row with the rate.
Row Bench::CreateConcurrently(wal::Client& c, pid_t pid, int from, int to) {
  const int in_flight = std::min(absl::GetFlag(FLAGS_create_in_flight), to - from);
  std::atomic<int> next{from};
  const double cpu0 = PathCpuSeconds("service", pid);
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < in_flight; ++t) {
    pool.emplace_back([&] {
      for (int id = next++; id < to; id = next++) {
        Must(c.CreateNamespace(1000000 + id).status(), "create");
      }
    });
  }
  for (auto& th : pool) th.join();
  const double secs = duration<double>(Clock::now() - t0).count();
  Row r{"create", "service", absl::StrCat(to - from, " x ", in_flight, " in flight")};
  r.entries_per_s = (to - from) / secs;
  r.value = PathCpuSeconds("service", pid) - cpu0;  // CPU seconds of walbench and walserver
  r.rss_mib = ResidentMiB(pid);
  return r;
}

void Bench::Sweep() {
  Walserver sweep(absl::StrCat("sweep", getpid()));
  sweep.Start();
  auto c = Connect(sweep.address());
  const int max = absl::GetFlag(FLAGS_max_namespaces);
  int created = 0;
  double rss_at_10 = 0;
  for (int n : {10, 100, 1000, 10000, 100000, 1000000}) {
    if (n > max) break;
    if (n - created >= 1000) {
      Emit(CreateConcurrently(*c, sweep.pid(), created, n));
      created = n;
    }
    for (; created < n; ++created) {
      Must(c->CreateNamespace(1000000 + created).status(), "create");
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
    // Idle: no calls for a while, then CPU and memory.
    const double cpu0 = ProcessCpuSeconds(sweep.pid());
    // CPU time comes in 10 ms ticks, 0.2% of a core over 5 s: the largest count, which the
    // target is about, is watched six times as long.
    const bool largest = n * 10 > max;
    const double idle = absl::GetFlag(FLAGS_seconds) * (largest ? 6 : 2);
    std::this_thread::sleep_for(duration<double>(idle));
    const double cpu = (ProcessCpuSeconds(sweep.pid()) - cpu0) / idle;
    const double rss = ResidentMiB(sweep.pid());
    if (n == 10) rss_at_10 = rss;
    // The same total load spread over all namespaces.
    Row load = SpreadLoad(*c, sweep.pid(), n);
    load.parameter = absl::StrCat(n, " namespaces");
    load.rss_mib = rss;
    load.value = cpu * 100;  // idle CPU, % of a core
    Emit(load);
    if (n > 10) {
      Row mem{"sweep", "bytes per idle namespace", load.parameter};
      mem.value = (rss - rss_at_10) * 1048576.0 / (n - 10);
      Emit(mem);
    }
  }
  // The throughput target, with every namespace created: the same load spread over the first
  // 10 and over all of them, alternating, median of --runs each.
  if (created > 10) {
    std::vector<Row> few, all;
    for (int run = 0; run < runs; ++run) {
      few.push_back(SpreadLoad(*c, sweep.pid(), 10));
      all.push_back(SpreadLoad(*c, sweep.pid(), created));
    }
    Row f = Median(few), a = Median(all);
    f.parameter = "over 10";
    a.parameter = absl::StrCat("over ", created);
    Emit(f);
    Emit(a);
    EmitRatio("sweep", absl::StrCat("ratio ", created, "/10"), a.parameter,
              a.entries_per_s / f.entries_per_s);
  }
  sweep.Stop();
  if (absl::StrContains(absl::GetFlag(FLAGS_modes), "startup")) {
    Walserver again(sweep.prefix());
    Row r{"startup", "service", absl::StrCat(created, " namespaces")};
    r.value = again.Start();
    Emit(r);
  }
}

}  // namespace walbench
