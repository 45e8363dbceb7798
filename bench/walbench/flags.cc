// walbench's command-line flags, with their defaults and help (flags.h declares them).
#include "bench/walbench/flags.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, brokers, "", "Kafka bootstrap servers (required)");
ABSL_FLAG(std::string, walserver, "", "Path of the walserver binary (required)");
ABSL_FLAG(std::string, modes,
          "regions,throughput,single,latency,replay,index,follow,sweep,startup,compression",
          "Comma-separated modes to run");
ABSL_FLAG(double, seconds, 5, "Length of each timed run");
ABSL_FLAG(int, runs, 3, "Alternating service/direct runs per figure; the median is reported");
ABSL_FLAG(int, threads, 4, "Concurrent callers in closed-loop modes");
ABSL_FLAG(int, single_threads, 64,
          "Concurrent callers in single mode: enough to load the server, as many regions would");
ABSL_FLAG(int, batch, 64, "Entries per Append in throughput mode");
ABSL_FLAG(int, regions, 1000, "Regions (namespaces) of the regions mode");
ABSL_FLAG(int, regions_per_call, 32, "Regions each call of the regions mode writes one entry to");
ABSL_FLAG(int, region_callers, 8, "Closed-loop callers of the regions mode");
ABSL_FLAG(int, entry_bytes, 1024, "Bytes per entry");
ABSL_FLAG(std::string, latency_loads, "0.1,0.25,0.5,0.75,0.9",
          "Open-loop rates as fractions of the measured single-entry maximum");
ABSL_FLAG(int, replay_mib, 64, "MiB written into one slot for the replay modes");
ABSL_FLAG(int, replay_namespaces, 100, "Namespaces in the slot for replay-all");
ABSL_FLAG(int, index_mib, 256, "MiB written into one slot for the index mode");
ABSL_FLAG(int, max_namespaces, 10000,
          "Largest namespace count of the sweep: 10, 100, ... up to 1000000");
ABSL_FLAG(int, create_in_flight, 256, "CreateNamespace calls at once when the sweep creates");
ABSL_FLAG(std::vector<std::string>, walserver_args, {},
          "Extra walserver flags, comma-separated (e.g. --producers=1), to compare settings");
ABSL_FLAG(std::string, csv, "", "Write every row here as CSV");
ABSL_FLAG(std::string, kafka_data_dir, "",
          "The broker's log.dirs, for the bytes each codec stores (compression mode)");
ABSL_FLAG(std::string, codecs, "none,lz4,zstd,snappy,gzip", "Codecs the compression mode compares");
ABSL_FLAG(bool, checksums, true,
          "walclient sends a CRC-32C with each entry and checks those it reads (false: the cost "
          "of end-to-end checksums, by difference)");
ABSL_FLAG(bool, smoke, false, "Tiny sizes and one run per figure: proves walbench works");
