// Log output of walserver: spdlog as text for people or JSON lines for collectors. librdkafka's
// own log is routed into the same logger (see kafka/client.cc).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace wal {

// format: "text" or "json"; level: trace, debug, info, warn, error. INVALID_ARGUMENT otherwise.
absl::Status ConfigureLogging(const std::string& format, const std::string& level);

}  // namespace wal
