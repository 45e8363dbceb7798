// Keeps gRPC's callback threads from all sleeping at once while walserver is idle.
//
// gRPC 1.51 (Debian 12's) runs the callback API's work on a few "nexting" threads (half the
// cores, at least 2). Each waits for work at most 1 s and, when none came, sleeps 100 ms before
// waiting again; while they all sleep, nothing reads the server's sockets. After a quiet second
// they time out together, and a call that arrives then waits up to 100 ms before walserver even
// reads it: measured, the first appends after 1 s of quiet took 95-125 ms instead of 1-3 ms
// (strace: both threads in a 100 ms nanosleep while the client's bytes sat in the socket).
// An in-process call to the health service every 250 ms gives one of them work well within
// each second, so at least one is always waiting on the sockets. The calls carry this process's
// InternalCallToken (common/metrics.h), so that /metrics leaves them out.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "grpcpp/server.h"

namespace wal {

class CallbackThreadsAwake {
 public:
  static constexpr std::chrono::milliseconds kInterval{250};

  // Starts calling `server` (which must outlive this object) every kInterval.
  explicit CallbackThreadsAwake(grpc::Server* server);
  ~CallbackThreadsAwake();  // stops; call before the server shuts down

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace wal
