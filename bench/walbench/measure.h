// Measuring and reporting: /proc CPU and memory, latencies, table rows, medians, ClosedLoop.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "bench/walbench/flags.h"

namespace walbench {

using Clock = std::chrono::steady_clock;
using std::chrono::duration;

// CPU seconds (user and system) the process has used so far.
double ProcessCpuSeconds(pid_t pid);

// The CPU a path costs: walbench's own process, plus walserver's unless the path goes straight
// to Kafka ("direct ..."). Per process, so that the broker and other load on the host do not
// fall on whichever path runs beside them.
double PathCpuSeconds(const std::string& system, pid_t server);

// The process's resident memory.
double ResidentMiB(pid_t pid);

// Milliseconds per call, added from any thread.
struct Latencies {
  std::mutex mu;
  std::vector<double> ms;
  void Add(double v) {
    std::lock_guard<std::mutex> lock(mu);
    ms.push_back(v);
  }
  double Percentile(double p) {
    std::lock_guard<std::mutex> lock(mu);
    if (ms.empty()) return 0;
    std::sort(ms.begin(), ms.end());
    return ms[std::min(ms.size() - 1, static_cast<size_t>(p * ms.size()))];
  }
};

// One line of the table and of the CSV file.
struct Row {
  std::string mode;
  std::string system;  // service or direct (or a description)
  std::string parameter;
  double entries_per_s = 0;
  double mb_per_s = 0;
  double p50_ms = 0, p99_ms = 0, p999_ms = 0;
  double cpu_s_per_gb = 0;
  double rss_mib = 0;
  double value = 0;  // a mode-specific figure (seconds, bytes per namespace...)
};

// Prints the table's column titles on stdout.
void PrintTableHeader();

// Writes every row Emit reports to `path` as CSV from now on, starting with the column names.
void OpenCsv(const std::string& path);

// Reports a row: on stdout, and in the CSV file if one is open. Rows are written as they come,
// so a failed mode keeps the earlier ones.
void Emit(const Row& r);

// Reports a row whose only figure is `value`: a ratio of two of the mode's rows.
void EmitRatio(const std::string& mode, const std::string& name, const std::string& parameter,
               double value);

// The run with the median entries/s.
Row Median(std::vector<Row> runs);

// The run with the median p99 latency.
Row MedianByP99(std::vector<Row> runs);

// The median of some figures (seconds of the runs of a mode).
double Median(std::vector<double> values);

// A benchmark whose setup failed measures nothing: stop with the reason.
void Must(const absl::Status& status, const char* what);

// A read that delivered other than what was written measured something else (an index that
// skipped too much would look fast): stop with both figures.
void MustDeliver(uint64_t got, uint64_t written, const char* what);

// Runs `work` on `threads` threads for the run length; work returns entries done per call.
template <typename Work>
Row ClosedLoop(const std::string& mode, const std::string& system, int threads, pid_t server,
               size_t bytes_per_entry, Work work) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> entries{0};
  Latencies latencies;
  const double cpu0 = PathCpuSeconds(system, server);
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      while (!stop) {
        const auto c0 = Clock::now();
        entries += work(t);
        latencies.Add(duration<double, std::milli>(Clock::now() - c0).count());
      }
    });
  }
  std::this_thread::sleep_for(duration<double>(absl::GetFlag(FLAGS_seconds)));
  stop = true;
  for (auto& th : pool) th.join();
  const double secs = duration<double>(Clock::now() - t0).count();
  const double cpu = PathCpuSeconds(system, server) - cpu0;
  Row r;
  r.mode = mode;
  r.system = system;
  r.entries_per_s = entries / secs;
  r.mb_per_s = entries * bytes_per_entry / secs / 1e6;
  r.p50_ms = latencies.Percentile(0.5);
  r.p99_ms = latencies.Percentile(0.99);
  r.p999_ms = latencies.Percentile(0.999);
  const double gb = entries * bytes_per_entry / 1e9;
  r.cpu_s_per_gb = gb > 0 ? cpu / gb : 0;
  r.rss_mib = server > 0 ? ResidentMiB(server) : 0;
  return r;
}

}  // namespace walbench
