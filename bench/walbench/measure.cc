// Measuring and reporting: /proc figures, the table on stdout and the CSV file, medians.
#include "bench/walbench/measure.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace walbench {
namespace {

// --csv, once OpenCsv opened it; only Emit writes rows to it.
std::ofstream& Csv() {
  static std::ofstream csv;
  return csv;
}

}  // namespace

double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  std::vector<std::string> fields = absl::StrSplit(text.substr(close + 2), ' ');
  // Fields after the command: state is [0]; utime and stime are fields 14 and 15 of the file.
  return (std::stod(fields[11]) + std::stod(fields[12])) / sysconf(_SC_CLK_TCK);
}

double PathCpuSeconds(const std::string& system, pid_t server) {
  const bool direct = system.rfind("direct", 0) == 0;
  return ProcessCpuSeconds(getpid()) + (direct || server <= 0 ? 0 : ProcessCpuSeconds(server));
}

double ResidentMiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0;
}

void PrintTableHeader() {
  std::cout << absl::StrFormat("%-11s %-22s %-14s %12s %9s %9s %9s %9s %10s %8s %12s\n", "mode",
                               "system", "parameter", "entries/s", "MB/s", "p50 ms", "p99 ms",
                               "p99.9 ms", "CPU s/GB", "RSS MiB", "value");
}

void OpenCsv(const std::string& path) {
  Csv().open(path);
  Csv() << "mode,system,parameter,entries_per_s,mb_per_s,p50_ms,p99_ms,p999_ms,cpu_s_per_gb,"
           "rss_mib,value"
        << std::endl;
}

void Emit(const Row& r) {
  if (Csv().is_open()) {
    Csv() << r.mode << "," << r.system << "," << r.parameter << "," << r.entries_per_s << ","
          << r.mb_per_s << "," << r.p50_ms << "," << r.p99_ms << "," << r.p999_ms << ","
          << r.cpu_s_per_gb << "," << r.rss_mib << "," << r.value << std::endl;
  }
  std::cout << absl::StrFormat(
                   "%-11s %-22s %-14s %12.0f %9.2f %9.3f %9.3f %9.3f %10.2f %8.1f %12.3f\n", r.mode,
                   r.system, r.parameter, r.entries_per_s, r.mb_per_s, r.p50_ms, r.p99_ms,
                   r.p999_ms, r.cpu_s_per_gb, r.rss_mib, r.value)
            << std::flush;
}

void EmitRatio(const std::string& mode, const std::string& name, const std::string& parameter,
               double value) {
  Row ratio{mode, name, parameter};
  ratio.value = value;
  Emit(ratio);
}

Row Median(std::vector<Row> runs) {
  std::sort(runs.begin(), runs.end(),
            [](const Row& a, const Row& b) { return a.entries_per_s < b.entries_per_s; });
  return runs[runs.size() / 2];
}

Row MedianByP99(std::vector<Row> runs) {
  std::sort(runs.begin(), runs.end(),
            [](const Row& a, const Row& b) { return a.p99_ms < b.p99_ms; });
  return runs[runs.size() / 2];
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void Must(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::cerr << "walbench: " << what << ": " << status << "\n";
    std::exit(1);
  }
}

void MustDeliver(uint64_t got, uint64_t written, const char* what) {
  if (got != written) {
    std::cerr << "walbench: " << what << ": delivered " << got << " entry bytes of the " << written
              << " written\n";
    std::exit(1);
  }
}

}  // namespace walbench
