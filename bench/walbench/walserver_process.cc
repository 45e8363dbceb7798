// Starting and stopping walserver child processes, and connecting walclient to them.
#include "bench/walbench/walserver_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "bench/walbench/flags.h"
#include "bench/walbench/measure.h"

namespace walbench {

double Walserver::Start() {
  // Two walservers may share a prefix (the follow mode's second one): each its own files.
  static int started = 0;
  const std::string name = absl::StrCat(prefix_, "-", started++);
  const std::string ready = absl::StrCat("/tmp/walbench-", getpid(), "-", name, ".ready");
  std::filesystem::remove(ready);
  std::vector<std::string> args = {absl::GetFlag(FLAGS_walserver),
                                   "--brokers=" + absl::GetFlag(FLAGS_brokers),
                                   "--topic_prefix=" + prefix_,
                                   "--listen=127.0.0.1:0",
                                   "--http_listen=",
                                   "--replication_factor=1",
                                   "--min_insync_replicas=1",
                                   "--log_level=warn",
                                   "--ready_file=" + ready};
  args.insert(args.end(), extra_.begin(), extra_.end());
  for (const std::string& a : absl::GetFlag(FLAGS_walserver_args)) args.push_back(a);
  const auto t0 = Clock::now();
  pid_ = fork();
  if (pid_ == 0) {
    // Dies with walbench, and keeps its output out of walbench's.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    FILE* log = std::freopen(absl::StrCat("/tmp/walbench-", name, ".log").c_str(), "w", stderr);
    if (log != nullptr) dup2(fileno(log), STDOUT_FILENO);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  while (true) {
    std::ifstream in(ready);
    if (in && std::getline(in, address_) && !address_.empty()) break;
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      std::cerr << "walbench: walserver exited during start-up\n";
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return duration<double>(Clock::now() - t0).count();
}

void Walserver::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::unique_ptr<wal::Client> Connect(const std::string& address, bool stream) {
  wal::ClientOptions options;
  options.target = address;
  options.append_stream = stream;
  options.checksums = absl::GetFlag(FLAGS_checksums);
  options.timeout = std::chrono::seconds(60);
  return std::move(*wal::Client::Connect(options));
}

}  // namespace walbench
