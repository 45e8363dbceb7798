// walbench's command-line flags (defined in flags.cc): what to run, for how long, and on what.
#pragma once

#include <string>
#include <vector>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, brokers);
ABSL_DECLARE_FLAG(std::string, walserver);
ABSL_DECLARE_FLAG(std::string, modes);
ABSL_DECLARE_FLAG(double, seconds);
ABSL_DECLARE_FLAG(int, runs);
ABSL_DECLARE_FLAG(int, threads);
ABSL_DECLARE_FLAG(int, single_threads);
ABSL_DECLARE_FLAG(int, batch);
ABSL_DECLARE_FLAG(int, regions);
ABSL_DECLARE_FLAG(int, regions_per_call);
ABSL_DECLARE_FLAG(int, region_callers);
ABSL_DECLARE_FLAG(int, entry_bytes);
ABSL_DECLARE_FLAG(std::string, latency_loads);
ABSL_DECLARE_FLAG(int, replay_mib);
ABSL_DECLARE_FLAG(int, replay_namespaces);
ABSL_DECLARE_FLAG(int, index_mib);
ABSL_DECLARE_FLAG(int, max_namespaces);
ABSL_DECLARE_FLAG(int, create_in_flight);
ABSL_DECLARE_FLAG(std::vector<std::string>, walserver_args);
ABSL_DECLARE_FLAG(std::string, csv);
ABSL_DECLARE_FLAG(std::string, kafka_data_dir);
ABSL_DECLARE_FLAG(std::string, codecs);
ABSL_DECLARE_FLAG(bool, checksums);
ABSL_DECLARE_FLAG(bool, smoke);
