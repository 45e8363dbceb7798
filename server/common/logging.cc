#include "server/common/logging.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace wal {
namespace {

// %j: the message as the body of a JSON string.
class JsonMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    for (char c : msg.payload) {
      switch (c) {
        case '"':
          dest.append(std::string_view("\\\""));
          break;
        case '\\':
          dest.append(std::string_view("\\\\"));
          break;
        case '\n':
          dest.append(std::string_view("\\n"));
          break;
        case '\t':
          dest.append(std::string_view("\\t"));
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            snprintf(buf, sizeof(buf), "\\u%04x", c);
            dest.append(std::string_view(buf));
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

}  // namespace

absl::Status ConfigureLogging(const std::string& format, const std::string& level) {
  // Logs go to standard error, leaving standard output to the program's own output.
  spdlog::set_default_logger(spdlog::stderr_color_mt("walserver"));
  const spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("log level '", level, "' is not one of trace, debug, info, warn, error"));
  }
  spdlog::set_level(parsed);
  if (format == "text") return absl::OkStatus();
  if (format != "json") {
    return absl::InvalidArgumentError(
        absl::StrCat("log format '", format, "' is not one of text, json"));
  }
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<JsonMessageFlag>('j').set_pattern(
      R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","thread":%t,"msg":"%j"})");
  spdlog::set_formatter(std::move(formatter));
  return absl::OkStatus();
}

}  // namespace wal
