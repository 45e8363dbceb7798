// walserver's command-line flags: one per ServerOptions field (plus the process's own: logging,
// the ready file, the config file), each taking its default from ServerOptions.
#pragma once

#include <map>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "server/wal_server.h"

namespace wal {

// The server options the flags hold now. `kafka_properties` (from kafka.<property> settings)
// are added on top of --kafka_properties. INVALID_ARGUMENT for a malformed --kafka_properties.
absl::StatusOr<ServerOptions> ServerOptionsFromFlags(
    const std::map<std::string, std::string>& kafka_properties);

// Flags that are the process's, not the server's.
std::string LogFormatFlag();
std::string LogLevelFlag();
std::string ReadyFileFlag();

// walserver --help: the usage message, then every flag of this file with its help and default.
void PrintHelp(std::ostream& out);

}  // namespace wal
