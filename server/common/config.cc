#include "server/common/config.h"

#include <sstream>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/common/read_file.h"

namespace wal {
namespace {

constexpr char kEnvPrefix[] = "WALSERVER_";
constexpr char kKafkaPrefix[] = "kafka.";

// Applies one setting; `source` says where it came from, for the error message.
absl::Status Apply(const std::string& name, const std::string& value, const std::string& source,
                   LoadedSettings& settings) {
  if (absl::StartsWith(name, kKafkaPrefix) && name.size() > sizeof(kKafkaPrefix) - 1) {
    settings.kafka_properties[name.substr(sizeof(kKafkaPrefix) - 1)] = value;
    return absl::OkStatus();
  }
  absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  if (flag == nullptr || name == "config") {
    if (name == "config") return absl::OkStatus();  // already read
    return absl::InvalidArgumentError(
        absl::StrCat("unknown setting '", name, "' (", source, "); see walserver --help"));
  }
  std::string error;
  if (!flag->ParseFrom(value, &error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad value '", value, "' for ", name, " (", source, "): ", error));
  }
  return absl::OkStatus();
}

// Parses the text of a config file: `name = value` lines, `#` comments. `source` names the file
// in error messages.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseConfigText(
    const std::string& text, const std::string& source) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    absl::string_view view = absl::StripAsciiWhitespace(line);
    if (view.empty() || view[0] == '#') continue;
    const size_t eq = view.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", number, ": expected 'name = value', got '", view, "'"));
    }
    std::string name(absl::StripAsciiWhitespace(view.substr(0, eq)));
    name = std::string(absl::StripPrefix(name, "--"));
    std::string value(absl::StripAsciiWhitespace(view.substr(eq + 1)));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", number, ": no name before '='"));
    }
    out.emplace_back(name, value);
  }
  return out;
}

}  // namespace

absl::StatusOr<LoadedSettings> LoadSettings(int argc, char** argv, char** envp) {
  LoadedSettings settings;

  // The command line, split into name/value pairs first: it may name the config file.
  std::vector<std::pair<std::string, std::string>> args;
  std::string config_file;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (!absl::StartsWith(arg, "-")) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "'; settings look like --name=value"));
    }
    arg = absl::StripPrefix(absl::StripPrefix(arg, "-"), "-");
    if (absl::StartsWith(arg, "help")) {
      settings.help = true;
      return settings;
    }
    if (arg == "version") {
      settings.version = true;
      return settings;
    }
    std::string name, value;
    const size_t eq = arg.find('=');
    if (eq != absl::string_view::npos) {
      name = std::string(arg.substr(0, eq));
      value = std::string(arg.substr(eq + 1));
    } else if (i + 1 < argc && argv[i + 1][0] != '-') {
      name = std::string(arg);
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--", arg, " needs a value (--", arg, "=...)"));
    }
    if (name == "config") config_file = value;
    args.emplace_back(name, value);
  }

  std::vector<std::pair<std::string, std::string>> env;
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    absl::string_view entry = *e;
    if (!absl::StartsWith(entry, kEnvPrefix)) continue;
    const size_t eq = entry.find('=');
    if (eq == absl::string_view::npos) continue;
    std::string name =
        absl::AsciiStrToLower(entry.substr(sizeof(kEnvPrefix) - 1, eq - (sizeof(kEnvPrefix) - 1)));
    if (name == "config" && config_file.empty()) config_file = std::string(entry.substr(eq + 1));
    env.emplace_back(std::move(name), std::string(entry.substr(eq + 1)));
  }

  if (!config_file.empty()) {
    absl::StatusOr<std::string> text = ReadWholeFile(config_file, "config file");
    if (!text.ok()) return text.status();
    auto file = ParseConfigText(*text, config_file);
    if (!file.ok()) return file.status();
    for (const auto& [name, value] : *file) {
      if (auto s = Apply(name, value, "config file " + config_file, settings); !s.ok()) return s;
    }
  }
  for (const auto& [name, value] : env) {
    const std::string source =
        absl::StrCat("environment variable ", kEnvPrefix, absl::AsciiStrToUpper(name));
    if (auto s = Apply(name, value, source, settings); !s.ok()) return s;
  }
  for (const auto& [name, value] : args) {
    if (auto s = Apply(name, value, "command line", settings); !s.ok()) return s;
  }
  return settings;
}

}  // namespace wal
