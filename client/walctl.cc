// walctl: the command-line tool for walserver, built on walclient.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/wal_client.h"
#include "google/protobuf/util/json_util.h"
#include "server/common/read_file.h"

namespace {

constexpr char kUsage[] = R"(walctl: inspect and drive walserver.

Usage: walctl [--server=ADDRESS] [--timeout=SECONDS] [--json] COMMAND [ARGS...]
       walctl COMMAND --help

Commands:
  create NAMESPACE                 create a namespace (idempotent)
  append NAMESPACE [DATA...]       append entries; from standard input when no DATA is given
  read NAMESPACE                   print entries (--start or --since, --limit, --follow)
  truncate NAMESPACE ENTRY_ID      make entries below ENTRY_ID unreadable
  info NAMESPACE                   a namespace's slot, watermarks and writer epoch
  acquire NAMESPACE                become its writer: print a new epoch (fences older writers)
  ls                               all namespaces
  delete NAMESPACE                 delete a namespace

Options:
  --server=ADDRESS   HOST:PORT or unix:///path (default $WALCTL_SERVER, else 127.0.0.1:50051)
  --timeout=SECONDS  deadline of each call (default 30)
  --json             machine-readable output: one JSON object per line
  --token_file=PATH  bearer token for a walserver with --auth_token_file (or $WALCTL_TOKEN)
  --tls_ca=PATH      verify walserver's TLS certificate with these PEM CAs (default plaintext)

Exit status: 0 ok, 1 other error, 2 bad usage, 3 not found, 4 invalid argument,
5 out of range, 6 unavailable or timed out (retry later), 7 data loss, 8 not allowed.
)";

struct Cli {
  wal::ClientOptions options;
  bool json = false;
  std::string command;
  std::vector<std::string> args;             // positional
  std::map<std::string, std::string> flags;  // --name[=value] after the command
};

int Usage(const std::string& problem) {
  std::cerr << "walctl: " << problem << "\n(walctl --help for usage)\n";
  return 2;
}

int ExitCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 0;
    case absl::StatusCode::kNotFound:
      return 3;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
      return 4;
    case absl::StatusCode::kOutOfRange:
      return 5;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kAborted:
      return 6;
    case absl::StatusCode::kDataLoss:
      return 7;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return 8;
    default:
      return 1;
  }
}

int Report(const absl::Status& status) {
  std::cerr << "walctl: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
            << "\n";
  return ExitCode(status.code());
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

void PrintNamespace(const Cli& cli, const wal::v1::Namespace& ns, const char* note = nullptr) {
  if (cli.json) {
    std::cout << ToJson(ns) << "\n";
    return;
  }
  if (note) std::cout << note << "\n";
  std::cout << "namespace_id:   " << ns.namespace_id() << "\n"
            << "topic:          " << ns.topic() << "\n"
            << "partition:      " << ns.partition() << "\n"
            << "first_entry_id: " << ns.first_entry_id() << "\n"
            << "next_entry_id:  " << ns.next_entry_id() << "\n"
            << "epoch:          " << ns.epoch() << "\n";
}

// Progress of a long read or append on stderr, only when stderr is a terminal.
class Progress {
 public:
  explicit Progress(const char* verb) : verb_(verb), enabled_(isatty(STDERR_FILENO) != 0) {}
  // Leaves a summary line on the terminal.
  ~Progress() {
    if (enabled_ && entries_ > 0) {
      Show();
      std::cerr << "\n";
    }
  }
  void Add(uint64_t entries, uint64_t bytes) {
    entries_ += entries;
    bytes_ += bytes;
    const auto now = std::chrono::steady_clock::now();
    if (!enabled_ || now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    Show();
  }

 private:
  const char* verb_;
  bool enabled_;
  uint64_t entries_ = 0;
  uint64_t bytes_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_ = start_;

  void Show() {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::cerr << absl::StrFormat("\r\033[K%s %d entries, %.1f MiB (%.1f MiB/s)", verb_, entries_,
                                 bytes_ / 1048576.0, bytes_ / 1048576.0 / std::max(seconds, 1e-3))
              << std::flush;
  }
};

// Appends of one namespace, up to `window` in flight, their ids printed in input order.
class AppendWindow {
 public:
  AppendWindow(const Cli& cli, wal::Client& client, uint64_t ns, uint64_t epoch, uint64_t window)
      : cli_(cli), client_(client), ns_(ns), epoch_(epoch), window_(window) {}
  // Waits for what is still in flight, so that no append outlives the client.
  ~AppendWindow() {
    for (InFlight& call : in_flight_) call.ids.wait();
  }

  // Starts an append of `entries`, then waits for the oldest while the window is full. Nonzero:
  // the exit status of a failed append (the ones behind it are abandoned).
  int Send(const std::vector<std::string>& entries) {
    Start(entries);
    while (in_flight_.size() >= window_) {
      if (int rc = FinishOldest(); rc != 0) return rc;
    }
    return 0;
  }
  // Waits for every append in flight; nonzero as for Send.
  int Drain() {
    while (!in_flight_.empty()) {
      if (int rc = FinishOldest(); rc != 0) return rc;
    }
    return 0;
  }

 private:
  using Ids = absl::StatusOr<std::vector<uint64_t>>;
  struct InFlight {
    std::future<Ids> ids;
    uint64_t entries = 0;
    uint64_t bytes = 0;
  };

  void Start(const std::vector<std::string>& entries) {
    wal::v1::AppendRequest request;
    InFlight call;
    for (const std::string& data : entries) {
      wal::v1::Entry* e = request.add_entries();
      e->set_namespace_id(ns_);
      e->set_data(data);
      e->set_epoch(epoch_);
      call.bytes += data.size();
    }
    call.entries = entries.size();
    auto answered = std::make_shared<std::promise<Ids>>();
    call.ids = answered->get_future();
    client_.AppendAsync(std::move(request), [answered](Ids ids) { answered->set_value(ids); });
    in_flight_.push_back(std::move(call));
  }

  // Waits for the oldest append and prints its ids.
  int FinishOldest() {
    InFlight call = std::move(in_flight_.front());
    in_flight_.pop_front();
    Ids ids = call.ids.get();
    if (!ids.ok()) return Report(ids.status());
    progress_.Add(call.entries, call.bytes);
    for (uint64_t id : *ids) {
      if (cli_.json) {
        std::cout << "{\"entryId\":\"" << id << "\"}\n";
      } else {
        std::cout << id << "\n";
      }
    }
    return 0;
  }

  const Cli& cli_;
  wal::Client& client_;
  const uint64_t ns_;
  const uint64_t epoch_;
  const uint64_t window_;
  std::deque<InFlight> in_flight_;  // in input order
  Progress progress_{"appended"};
};

int Append(const Cli& cli, wal::Client& client, uint64_t ns) {
  std::vector<std::string> given;
  if (auto file = cli.flags.find("file"); file != cli.flags.end()) {
    absl::StatusOr<std::string> whole;
    if (file->second == "-") {
      std::stringstream in;
      in << std::cin.rdbuf();
      whole = in.str();
    } else {
      whole = wal::ReadWholeFile(file->second, "--file");
    }
    if (!whole.ok()) return Usage("append: " + std::string(whole.status().message()));
    given.push_back(*std::move(whole));
  } else {
    given.assign(cli.args.begin() + 1, cli.args.end());
  }
  uint64_t batch = 1000;
  if (auto b = cli.flags.find("batch"); b != cli.flags.end()) {
    if (!absl::SimpleAtoi(b->second, &batch) || batch == 0) return Usage("--batch needs N > 0");
  }
  uint64_t epoch = 0;
  if (auto e = cli.flags.find("epoch"); e != cli.flags.end()) {
    if (!absl::SimpleAtoi(e->second, &epoch)) return Usage("--epoch needs a number");
  }
  uint64_t window = 8;
  if (auto w = cli.flags.find("window"); w != cli.flags.end()) {
    if (!absl::SimpleAtoi(w->second, &window) || window == 0) return Usage("--window needs N > 0");
  }
  if (!given.empty()) return AppendWindow(cli, client, ns, epoch, 1).Send(given);
  // One entry per line of standard input, --batch lines per append.
  AppendWindow appends(cli, client, ns, epoch, window);
  std::vector<std::string> lines;
  bool any = false;
  for (std::string line; std::getline(std::cin, line);) {
    lines.push_back(std::move(line));
    if (lines.size() >= batch) {
      if (int rc = appends.Send(lines); rc != 0) return rc;
      lines.clear();
      any = true;
    }
  }
  if (!lines.empty()) {
    if (int rc = appends.Send(lines); rc != 0) return rc;
    any = true;
  }
  if (int rc = appends.Drain(); rc != 0) return rc;
  return any ? 0 : Usage("append: nothing to append (no DATA and empty standard input)");
}

// --since: a duration back from now ("10m", "1h30m", "45s") or an RFC 3339 time
// ("2026-12-01T08:00:00Z"); ms since the Unix epoch.
absl::StatusOr<uint64_t> SinceMs(const std::string& value) {
  absl::Duration ago;
  if (absl::ParseDuration(value, &ago)) {
    const int64_t ms = absl::ToUnixMillis(absl::Now() - ago);
    if (ago <= absl::ZeroDuration() || ms <= 0) {
      return absl::InvalidArgumentError(
          "read: --since needs a duration back from now that ends after 1970, like 10m");
    }
    return static_cast<uint64_t>(ms);
  }
  absl::Time at;
  std::string error;
  if (absl::ParseTime(absl::RFC3339_full, value, &at, &error)) {
    if (at <= absl::UnixEpoch() || at == absl::InfiniteFuture()) {
      return absl::InvalidArgumentError("read: --since needs a time after 1970");
    }
    return static_cast<uint64_t>(absl::ToUnixMillis(at));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("read: --since=", value,
                   " is neither a duration (10m, 1h30m) nor an RFC 3339 time "
                   "(2026-12-01T08:00:00Z)"));
}

int Read(const Cli& cli, wal::Client& client, uint64_t ns) {
  wal::ReadOptions read;
  read.namespace_id = ns;
  for (const auto& [name, value] : cli.flags) {
    if (name == "start" && absl::SimpleAtoi(value, &read.start_entry_id)) continue;
    if (name == "limit" && absl::SimpleAtoi(value, &read.limit)) continue;
    if (name == "follow") {
      read.follow = true;
      continue;
    }
    if (name == "data-only") continue;
    if (name == "skip-lost") {
      read.skip_lost = true;
      continue;
    }
    if (name == "since") {
      auto since = SinceMs(value);
      if (!since.ok()) return Usage(std::string(since.status().message()));
      read.start_time_ms = *since;
      continue;
    }
    return Usage(absl::StrCat("read: bad option --", name, value.empty() ? "" : "=" + value));
  }
  if (read.start_time_ms != 0 && cli.flags.count("start") > 0) {
    return Usage("read: --start and --since both say where to start; give one");
  }
  const bool data_only = cli.flags.count("data-only") > 0;
  int gaps = 0;
  read.on_gap = [&](const wal::v1::Gap& gap) {
    ++gaps;
    if (cli.json) {
      std::cout << "{\"gap\":" << ToJson(gap) << "}\n";
    } else {
      // Standard error with --data-only, so that the data stays what was appended.
      (data_only ? std::cerr : std::cout)
          << "GAP\t" << gap.from_entry_id() << "\t" << gap.to_entry_id() << "\t"
          << wal::v1::Gap::Reason_Name(gap.reason()) << "\t" << gap.message() << "\n";
    }
  };
  Progress progress("read");
  absl::Status status = client.Read(read, [&](wal::v1::Entry& e) {
    if (cli.json) {
      std::cout << ToJson(e) << "\n";
    } else if (data_only) {
      std::cout << e.data() << "\n";
    } else {
      std::cout << e.entry_id() << "\t" << e.data() << "\n";
    }
    if (read.follow) std::cout.flush();
    progress.Add(1, e.data().size());
    return static_cast<bool>(std::cout);  // stop when our reader went away (a closed pipe)
  });
  return status.ok() ? 0 : Report(status);
}

int List(const Cli& cli, wal::Client& client, uint64_t /*ns*/) {
  auto all = client.ListNamespaces();
  if (!all.ok()) return Report(all.status());
  if (cli.json) {
    for (const auto& ns : *all) std::cout << ToJson(ns) << "\n";
    return 0;
  }
  std::cout << absl::StrFormat("%-20s %-24s %9s %20s %20s %6s\n", "NAMESPACE", "TOPIC", "PARTITION",
                               "FIRST_ENTRY_ID", "NEXT_ENTRY_ID", "EPOCH");
  for (const auto& ns : *all) {
    std::cout << absl::StrFormat("%-20d %-24s %9d %20d %20d %6d\n", ns.namespace_id(), ns.topic(),
                                 ns.partition(), ns.first_entry_id(), ns.next_entry_id(),
                                 ns.epoch());
  }
  return 0;
}

int Create(const Cli& cli, wal::Client& client, uint64_t ns) {
  auto result = client.CreateNamespace(ns);
  if (!result.ok()) return Report(result.status());
  if (cli.json) {
    wal::v1::CreateNamespaceResponse response;
    *response.mutable_namespace_() = result->ns;
    response.set_created(result->created);
    std::cout << ToJson(response) << "\n";
    return 0;
  }
  PrintNamespace(cli, result->ns, result->created ? "created" : "already existed");
  return 0;
}

int Truncate(const Cli& cli, wal::Client& client, uint64_t ns) {
  uint64_t entry_id = 0;
  if (!absl::SimpleAtoi(cli.args[1], &entry_id)) return Usage("truncate needs NAMESPACE ENTRY_ID");
  auto result = client.Truncate(ns, entry_id);
  if (!result.ok()) return Report(result.status());
  PrintNamespace(cli, *result);
  return 0;
}

int Acquire(const Cli& cli, wal::Client& client, uint64_t ns) {
  auto result = client.AcquireNamespace(ns);
  if (!result.ok()) return Report(result.status());
  if (cli.json) {
    wal::v1::AcquireNamespaceResponse response;
    *response.mutable_namespace_() = result->ns;
    response.set_epoch(result->epoch);
    std::cout << ToJson(response) << "\n";
    return 0;
  }
  PrintNamespace(cli, result->ns, "acquired");
  return 0;
}

int Info(const Cli& cli, wal::Client& client, uint64_t ns) {
  auto result = client.GetNamespace(ns);
  if (!result.ok()) return Report(result.status());
  PrintNamespace(cli, *result);
  return 0;
}

int Delete(const Cli& cli, wal::Client& client, uint64_t ns) {
  absl::Status status = client.DeleteNamespace(ns);
  if (!status.ok()) return Report(status);
  if (cli.json) {
    std::cout << "{\"deleted\":\"" << ns << "\"}\n";
  } else {
    std::cout << "deleted\n";
  }
  return 0;
}

// What each command takes (checked before it runs), the function that runs it, and its --help.
struct Command {
  std::set<std::string> options;  // its --options
  // Its arguments, NAMESPACE first; kAnyArgs for NAMESPACE and any number after it.
  size_t args;
  const char* args_usage;  // said when the count is wrong
  int (*run)(const Cli& cli, wal::Client& client, uint64_t ns);
  const char* help;
};
constexpr size_t kAnyArgs = static_cast<size_t>(-1);

const std::map<std::string, Command> kCommands = {
    {"create", {{}, 1, "one NAMESPACE", Create, R"(Usage: walctl create NAMESPACE

Creates namespace NAMESPACE (an id of 1 or more) and prints its assignment. Creating an existing
namespace is not an error: it prints the same assignment and says "already existed".
)"}},
    {"append",
     {{"file", "batch", "window", "epoch"},
      kAnyArgs,
      "NAMESPACE [DATA...]",
      Append,
      R"(Usage: walctl append NAMESPACE [DATA...]
       walctl append NAMESPACE --file=PATH      (PATH - is standard input)

Appends entries and prints their entry ids, one per line, once Kafka acknowledged them.
  DATA...        each argument is one entry
  (no DATA)      each line of standard input is one entry, sent in batches of --batch lines
                 on one stream with --window batches in flight; ids print in input order
  --file=PATH    the whole file is one entry
  --batch=N      lines per request when reading standard input (default 1000)
  --window=N     batches in flight when reading standard input (default 8). A batch retried
                 after a failure may land after batches sent behind it; --window=1 keeps the
                 log in input order even then
  --epoch=E      the writer epoch from "walctl acquire" (default 0: no epoch); an older epoch
                 than the namespace's is refused (exit 4)
Failed attempts are retried with the same sequence numbers (reads show each entry once); when
the last attempt fails too, a prefix of the entries may have been written. From standard input,
the ids printed are those of the batches up to the one that failed; batches sent after it may
also have been written, so read the namespace's end before appending the rest again.
)"}},
    {"read",
     {{"start", "limit", "follow", "data-only", "skip-lost", "since"},
      1,
      "one NAMESPACE",
      Read,
      R"(Usage: walctl read NAMESPACE [--start=ID | --since=WHEN] [--limit=N] [--follow]
                  [--skip-lost] [--data-only]

Prints entries in id order as "ID<TAB>DATA" lines (--json: {"entryId", "data" (base64),
"crc32c", ...}). Each entry's CRC-32C is checked: one that does not match its data stops the
read with DATA_LOSS. (walctl append sends one with every entry.)
  --start=ID     first entry id to print (default: the first readable entry)
  --since=WHEN   from the first entry appended at or after WHEN: a duration back from now
                 (10m, 1h30m, 45s) or an RFC 3339 time (2026-12-01T08:00:00Z)
  --limit=N      stop after N entries
  --follow       keep printing new entries as they are appended, like tail -f
  --data-only    print only the data of each entry, one per line
  --skip-lost    go on past records gone from Kafka and corrupt entries, printing each gap as
                 "GAP<TAB>FROM<TAB>TO<TAB>REASON<TAB>MESSAGE" (ids FROM to TO-1; on standard
                 error with --data-only; --json: {"gap": {...}}); the exit status is 0. Without
                 it such a read stops with DATA_LOSS
)"}},
    {"truncate",
     {{}, 2, "NAMESPACE ENTRY_ID", Truncate, R"(Usage: walctl truncate NAMESPACE ENTRY_ID

Makes entries with id below ENTRY_ID unreadable (they may be deleted later). A lower ENTRY_ID
than before is a no-op. Prints the namespace afterwards.
)"}},
    {"acquire", {{}, 1, "one NAMESPACE", Acquire, R"(Usage: walctl acquire NAMESPACE

Raises the namespace's writer epoch and prints the namespace with it. Appends with a lower epoch
are refused from then on, and reads ignore what older writers still manage to write after the
fence. Pass the epoch to "walctl append --epoch=E".
)"}},
    {"info", {{}, 1, "one NAMESPACE", Info, R"(Usage: walctl info NAMESPACE

Prints the namespace's slot (topic, partition), first_entry_id, next_entry_id and writer epoch.
)"}},
    {"delete", {{}, 1, "one NAMESPACE", Delete, R"(Usage: walctl delete NAMESPACE

Deletes the namespace: it disappears and its records become prunable.
)"}},
    {"ls", {{}, 0, "no arguments", List, R"(Usage: walctl ls

Lists all live namespaces with their slots and watermarks.
)"}},
};

// Runs the parsed command; returns walctl's exit code.
int RunCommand(const Cli& cli, wal::Client& client) {
  const Command& command = kCommands.at(cli.command);
  uint64_t ns = 0;
  if (command.args != 0 && (cli.args.empty() || !absl::SimpleAtoi(cli.args[0], &ns))) {
    return Usage(cli.command + " needs a numeric NAMESPACE");
  }
  for (const auto& [name, value] : cli.flags) {
    if (!command.options.count(name)) {
      return Usage(command.options.empty() ? cli.command + " takes no options"
                                           : cli.command + ": unknown option --" + name);
    }
  }
  if (command.args != kAnyArgs && cli.args.size() != command.args) {
    return Usage(absl::StrCat(cli.command, " takes ", command.args_usage));
  }
  return command.run(cli, client, ns);
}

// Reads the global options, the command and its arguments into `cli`; an exit code when walctl
// is done already (--help, or a usage error).
std::optional<int> ParseArgs(int argc, char** argv, Cli& cli) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool global = cli.command.empty();
    if (arg == "--help" || arg == "-h") {
      if (global) {
        std::cout << kUsage;
      } else {
        std::cout << kCommands.at(cli.command).help;
      }
      return 0;
    }
    if (global && arg.rfind("--server=", 0) == 0) {
      cli.options.target = arg.substr(9);
    } else if (global && arg.rfind("--timeout=", 0) == 0) {
      double seconds = 0;
      if (!absl::SimpleAtod(arg.substr(10), &seconds) || seconds <= 0) {
        return Usage("--timeout needs a positive number of seconds");
      }
      cli.options.timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    } else if (global && arg.rfind("--token_file=", 0) == 0) {
      absl::StatusOr<std::string> token = wal::ReadWholeFile(arg.substr(13), "--token_file");
      if (!token.ok()) return Usage(std::string(token.status().message()));
      cli.options.auth_token = std::string(absl::StripAsciiWhitespace(*token));
    } else if (global && arg.rfind("--tls_ca=", 0) == 0) {
      cli.options.tls_ca_file = arg.substr(9);
    } else if (global && arg == "--json") {
      cli.json = true;
    } else if (global && arg.rfind("-", 0) == 0) {
      return Usage("unknown option " + arg);
    } else if (global) {
      cli.command = arg == "get" ? "info" : arg == "list" ? "ls" : arg;
      if (!kCommands.count(cli.command)) return Usage("unknown command " + arg);
    } else if (arg.rfind("--", 0) == 0 && arg.size() > 2) {
      const size_t eq = arg.find('=');
      cli.flags[arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2)] =
          eq == std::string::npos ? "" : arg.substr(eq + 1);
    } else {
      cli.args.push_back(arg);
    }
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  Cli cli;
  if (const char* env = std::getenv("WALCTL_SERVER")) cli.options.target = env;
  if (const char* env = std::getenv("WALCTL_TOKEN")) cli.options.auth_token = env;
  if (std::optional<int> done = ParseArgs(argc, argv, cli)) return *done;
  if (cli.command.empty()) return Usage("no command given");
  auto connected = wal::Client::Connect(cli.options);
  if (!connected.ok()) return Report(connected.status());
  return RunCommand(cli, **connected);
}
