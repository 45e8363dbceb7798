// walbench: walserver against direct librdkafka on the same broker, in the same run.
//
// It starts a walserver process on the given brokers, then for each mode measures the service
// (through walclient) and the same work done directly with librdkafka (idempotent, acks=all,
// same linger and batching), alternating service and direct runs and reporting the median of
// --runs. Figures: entries/s, MB/s, latency percentiles, CPU seconds per GB (of walbench, and of
// walserver on the service's paths), walserver's
// resident memory, and the service/direct ratio. Output: a table on stdout, rows in --csv.
//
// Modes:
//   regions     a datanode's write batch: --region_callers closed-loop callers, each call one
//               entry for each of --regions_per_call consecutive regions (from a random one) of
//               --regions, one namespace each; against the same records produced straight to
//               the namespaces' slots, the call done when all are acknowledged
//   throughput  closed loop, batches of --batch entries of --entry_bytes per Append; on the
//               append stream (walclient's default) and as unary calls, for reference
//   single      closed loop, one entry per Append (streamed, and unary for reference), against
//               an empty RPC (health Check) and against one record produced straight to Kafka
//               by as many callers
//   latency     open loop at fixed rates (fractions of the measured maximum)
//   replay      read one namespace back; read all namespaces of one slot at once, as separate
//               Reads and as one ReadMany; read the same bytes written as one namespace, through
//               one stream, and with 999 empty namespaces of its slot on one ReadMany; and the
//               gRPC floor: the same entries streamed to the same client by a stub server
//               from prebuilt responses
//   index       --index_mib MiB of one namespace in a slot, 6 entries of 20 bytes of another
//               spread over it, a third with 1% of the bytes in 100 runs, and 1,000 regions
//               of which 10 hold 1% between them: the small ones read, and the regions opened
//               with one ReadMany, through the slot index (after the big one's replay) and
//               without it
//   follow      how late a follow read sees each entry: one entry every 20 ms from one client,
//               a follow read on another client, of the same walserver and of a second one on
//               the same topics; against a librdkafka
//               consumer following the same partition while a producer writes as often
//               (entries/s column: entries seen; p99.9 column: the slowest)
//   sweep       10 .. --max_namespaces namespaces: memory and CPU when idle, throughput; then
//               the same load over 10 and over all of them, alternating. Steps of 1,000 or
//               more namespaces are created --create_in_flight at a time, with a "create" row
//   startup     restart walserver with all those namespaces in the meta topic
//   compression for each of --codecs, a walserver with --compression=CODEC appends
//               --replay_mib MiB of time-series WAL entries (TimeSeriesEntry) from --threads
//               callers, then replays them: append MB/s and CPU per GB, the bytes the
//               broker stores per GB appended (from --kafka_data_dir), replay seconds
//
// main() parses the flags, prints the table's header and runs each mode of --modes in the order
// above on one Bench (bench.h).
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "bench/walbench/bench.h"
#include "bench/walbench/flags.h"
#include "bench/walbench/measure.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "walserver against direct librdkafka on the same broker, in the same run.\n"
      "Usage: walbench --brokers=HOST:PORT --walserver=PATH [--modes=...] [options]");
  absl::ParseCommandLine(argc, argv);
  spdlog::set_level(spdlog::level::warn);
  // As walserver does: Debian's Abseil checks every gRPC lock for deadlock cycles otherwise,
  // which cost this client 2% of the host in single mode.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (absl::GetFlag(FLAGS_brokers).empty() || absl::GetFlag(FLAGS_walserver).empty()) {
    std::cerr << "walbench: --brokers and --walserver are required\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_smoke)) {
    absl::SetFlag(&FLAGS_seconds, 0.5);
    absl::SetFlag(&FLAGS_runs, 1);
    absl::SetFlag(&FLAGS_replay_mib, 2);
    absl::SetFlag(&FLAGS_replay_namespaces, 5);
    absl::SetFlag(&FLAGS_regions, 64);
    absl::SetFlag(&FLAGS_index_mib, 4);
    absl::SetFlag(&FLAGS_max_namespaces, 100);
    absl::SetFlag(&FLAGS_latency_loads, "0.5");
    absl::SetFlag(&FLAGS_codecs, "none,lz4");
  }
  walbench::PrintTableHeader();
  if (!absl::GetFlag(FLAGS_csv).empty()) walbench::OpenCsv(absl::GetFlag(FLAGS_csv));
  walbench::Bench bench;
  bench.Setup();
  const std::string modes = absl::GetFlag(FLAGS_modes);
  if (absl::StrContains(modes, "regions")) bench.Regions();
  if (absl::StrContains(modes, "throughput")) bench.Throughput();
  if (absl::StrContains(modes, "single")) bench.Single();
  if (absl::StrContains(modes, "latency")) bench.Latency();
  if (absl::StrContains(modes, "replay")) bench.Replay();
  if (absl::StrContains(modes, "index")) bench.Index();
  if (absl::StrContains(modes, "follow")) bench.Follow();
  if (absl::StrContains(modes, "sweep")) bench.Sweep();
  if (absl::StrContains(modes, "compression")) bench.Compression();
  bench.server.Stop();
  return 0;
}
