// walserver's settings come from, in rising precedence: the flag defaults, a config file
// (--config=FILE or $WALSERVER_CONFIG), environment variables WALSERVER_<FLAG_NAME> (for
// containers), and the command line. Every setting is a flag of main.cc, so --help lists them
// all with their defaults; `kafka.<property>` settings pass through to librdkafka.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace wal {

struct LoadedSettings {
  // librdkafka properties given as kafka.<property> (file or command line).
  std::map<std::string, std::string> kafka_properties;
  // --help and friends were asked for: hand argv to absl, which prints usage and exits.
  bool help = false;
  // --version was asked for: print walserver's and librdkafka's versions and exit.
  bool version = false;
};

// Sets the absl flags from the file, the environment (`envp`, NULL-terminated) and `argv`.
// INVALID_ARGUMENT, naming the source, for an unknown setting, a bad value or a missing file.
absl::StatusOr<LoadedSettings> LoadSettings(int argc, char** argv, char** envp);

}  // namespace wal
