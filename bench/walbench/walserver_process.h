// walserver as a child process of walbench, and walclient connections to it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/wal_client.h"

namespace walbench {

// A walserver on --brokers with topics named after `prefix`, started by Start and stopped (by
// SIGTERM) by Stop or the destructor; `extra` flags come before --walserver_args.
class Walserver {
 public:
  Walserver(std::string prefix, std::vector<std::string> extra = {})
      : prefix_(std::move(prefix)), extra_(std::move(extra)) {}
  ~Walserver() { Stop(); }

  // Starts it and returns the seconds until it served.
  double Start();
  void Stop();
  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }
  const std::string& prefix() const { return prefix_; }

 private:
  std::string prefix_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
  std::string address_;
};

// A client on walserver; `stream` false sends each append as its own unary call (the old path,
// kept as a reference row).
std::unique_ptr<wal::Client> Connect(const std::string& address, bool stream = true);

}  // namespace walbench
