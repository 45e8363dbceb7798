// walctl: the command-line tool for walserver, built on walclient.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/wal_client.h"

namespace {

constexpr char kUsage[] = R"(walctl: talk to walserver.

Usage: walctl [--server=HOST:PORT] [--timeout=SECONDS] COMMAND ARGS...

Commands:
  create NAMESPACE                 create a namespace (idempotent)
  append NAMESPACE [DATA...]       append each DATA as one entry; without DATA, each line of
                                   standard input is one entry. Prints the entry ids.
  read NAMESPACE [--start=ID] [--limit=N] [--follow]
                                   print entries as "ID<TAB>DATA", one per line
  truncate NAMESPACE ENTRY_ID      make entries below ENTRY_ID unreadable
  info NAMESPACE                   show a namespace's slot and watermarks
  ls                               list all namespaces
  delete NAMESPACE                 delete a namespace

Options:
  --server=HOST:PORT   walserver address (default 127.0.0.1:50051, or $WALCTL_SERVER)
  --timeout=SECONDS    deadline of each call (default 30)

Exit status: 0 success, 1 the server answered with an error, 2 bad usage.
)";

int Usage(const std::string& problem) {
  std::cerr << "walctl: " << problem << "\n\n" << kUsage;
  return 2;
}

int Report(const absl::Status& status) {
  std::cerr << "walctl: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
            << "\n";
  return 1;
}

bool ParseId(const std::string& text, uint64_t* id) { return absl::SimpleAtoi(text, id); }

void PrintNamespace(const wal::v1::Namespace& ns) {
  std::cout << "namespace_id:   " << ns.namespace_id() << "\n"
            << "topic:          " << ns.topic() << "\n"
            << "partition:      " << ns.partition() << "\n"
            << "first_entry_id: " << ns.first_entry_id() << "\n"
            << "next_entry_id:  " << ns.next_entry_id() << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  wal::ClientOptions options;
  if (const char* env = std::getenv("WALCTL_SERVER")) options.target = env;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (args.empty() && arg.rfind("--server=", 0) == 0) {
      options.target = arg.substr(9);
    } else if (args.empty() && arg.rfind("--timeout=", 0) == 0) {
      double seconds = 0;
      if (!absl::SimpleAtod(arg.substr(10), &seconds) || seconds <= 0) {
        return Usage("--timeout needs a positive number of seconds");
      }
      options.timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    } else {
      args.push_back(arg);
    }
  }
  if (args.empty()) return Usage("no command given");
  auto connected = wal::Client::Connect(options);
  if (!connected.ok()) return Report(connected.status());
  wal::Client& client = **connected;
  const std::string& command = args[0];

  if (command == "ls") {
    auto all = client.ListNamespaces();
    if (!all.ok()) return Report(all.status());
    std::cout << absl::StrFormat("%-20s %-24s %9s %20s %20s\n", "NAMESPACE", "TOPIC", "PARTITION",
                                 "FIRST_ENTRY_ID", "NEXT_ENTRY_ID");
    for (const auto& ns : *all) {
      std::cout << absl::StrFormat("%-20d %-24s %9d %20d %20d\n", ns.namespace_id(), ns.topic(),
                                   ns.partition(), ns.first_entry_id(), ns.next_entry_id());
    }
    return 0;
  }

  uint64_t ns = 0;
  if (args.size() < 2 || !ParseId(args[1], &ns)) {
    return Usage(absl::StrCat(command, " needs a numeric NAMESPACE"));
  }
  if (command == "create") {
    auto result = client.CreateNamespace(ns);
    if (!result.ok()) return Report(result.status());
    std::cout << (result->created ? "created\n" : "already existed\n");
    PrintNamespace(result->ns);
    return 0;
  }
  if (command == "append") {
    std::vector<std::string> entries(args.begin() + 2, args.end());
    if (entries.empty()) {
      for (std::string line; std::getline(std::cin, line);) entries.push_back(line);
    }
    if (entries.empty()) return Usage("append: nothing to append");
    auto ids = client.Append(ns, entries);
    if (!ids.ok()) return Report(ids.status());
    for (uint64_t id : *ids) std::cout << id << "\n";
    return 0;
  }
  if (command == "read") {
    wal::ReadOptions read;
    read.namespace_id = ns;
    for (size_t i = 2; i < args.size(); ++i) {
      const std::string& a = args[i];
      if (a.rfind("--start=", 0) == 0 && ParseId(a.substr(8), &read.start_entry_id)) continue;
      if (a.rfind("--limit=", 0) == 0 && ParseId(a.substr(8), &read.limit)) continue;
      if (a == "--follow") {
        read.follow = true;
        continue;
      }
      return Usage(absl::StrCat("read: unknown option ", a));
    }
    absl::Status status = client.Read(read, [](wal::v1::Entry& e) {
      std::cout << e.entry_id() << "\t" << e.data() << "\n";
      if (!std::cout) return false;  // our reader went away (a closed pipe)
      std::cout.flush();
      return true;
    });
    if (!status.ok()) return Report(status);
    return 0;
  }
  if (command == "truncate") {
    uint64_t entry_id = 0;
    if (args.size() != 3 || !ParseId(args[2], &entry_id)) {
      return Usage("truncate needs NAMESPACE ENTRY_ID");
    }
    auto result = client.Truncate(ns, entry_id);
    if (!result.ok()) return Report(result.status());
    PrintNamespace(*result);
    return 0;
  }
  if (command == "info") {
    auto result = client.GetNamespace(ns);
    if (!result.ok()) return Report(result.status());
    PrintNamespace(*result);
    return 0;
  }
  if (command == "delete") {
    absl::Status status = client.DeleteNamespace(ns);
    if (!status.ok()) return Report(status);
    std::cout << "deleted\n";
    return 0;
  }
  return Usage(absl::StrCat("unknown command ", command));
}
