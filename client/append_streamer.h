// walclient's half of AppendStream: the appends of every thread of a Client travel on one
// long-lived stream, each tagged with a request id and answered on its own. Internal to walclient
// (wal_client.h is the API).
//
// Threads. Three per Client, started by the first append:
//   sender:  writes the appends waiting to go; those that arrive while a write is on the wire
//            go together in the next message (as a producer's linger gathers records).
//   reader:  reads answers and completes the appends (one per stream; replaced with it).
//   timer:   fails appends at their deadline, wakes retries when their backoff is over, and
//            cancels a stream whose write has not gone out within an attempt's timeout.
// An append whose stream broke, or whose answer was UNAVAILABLE or DEADLINE_EXCEEDED, goes again
// on the next stream with the same writer id and sequences, so a read returns it once; as with
// unary appends, until its deadline (max_retries <= 0 turns retries off). A stream counts as
// broken when a write does not go out, or an answer does not come, within an attempt's timeout
// and a second. Appends over 4 MiB go as unary calls: one such append saves no per-call cost,
// and alone it could exceed the server's message limit and fail the stream for everyone.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/retry.h"
#include "wal/v1/wal.grpc.pb.h"

namespace wal {

class AppendStreamer {
 public:
  using Clock = std::chrono::system_clock;   // the callers' deadlines
  using Steady = std::chrono::steady_clock;  // the streamer's own timing
  using Done = std::function<void(absl::StatusOr<std::vector<uint64_t>>)>;
  // Sends an append as a unary call instead, for a walserver without AppendStream.
  using Unary =
      std::function<void(v1::AppendRequest request, Clock::time_point deadline, Done done)>;

  struct Options {
    RetryPolicy retry;
    std::chrono::milliseconds attempt_timeout{10000};
    // Adds the call's metadata (the bearer token) to the stream's context.
    std::function<void(grpc::ClientContext&)> prepare;
  };

  AppendStreamer(v1::WalService::Stub* stub, Options options, Unary unary);
  // Waits until every append started has completed (each within its deadline), then closes the
  // stream.
  ~AppendStreamer();

  // `done` runs exactly once, on the reader or timer thread (or a gRPC thread after a fallback
  // to unary calls), and must not block.
  void Append(v1::AppendRequest request, Clock::time_point deadline, Done done);

 private:
  struct Pending {
    v1::AppendRequest request;
    Clock::time_point deadline;
    Done done;
    int retry = 0;
    std::chrono::steady_clock::time_point first_attempt;  // a retry says how long ago (MarkRetry)
    Clock::time_point not_before;                         // a retry waits until then
    uint64_t stream = 0;  // the stream it was written on; 0 while not on the wire
    uint64_t sent = 0;    // which sending it is (its entry in on_wire_)
    std::multimap<Clock::time_point, uint64_t>::iterator deadline_entry;
  };
  struct Completion {
    Done done;
    absl::StatusOr<std::vector<uint64_t>> result;
  };
  using Completions = std::vector<Completion>;

  void SenderLoop();
  // The sender's steps. Everything not yet answered goes as unary calls (walserver has no
  // AppendStream).
  void SendAllAsUnary(std::unique_lock<std::mutex>& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts a stream and its reader.
  void OpenStream(std::unique_lock<std::mutex>& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Everything waiting, in one message: what gathered while the last write was out (within
  // the message limits). The requests are lent to it and must be swapped back after the write.
  v1::AppendStreamRequest GatherMessage() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReaderLoop(uint64_t stream,
                  grpc::ClientReaderWriter<v1::AppendStreamRequest, v1::AppendStreamResponse>* rw);
  void TimerLoop();
  // Sends an append as a unary call, counted so that the destructor waits for it.
  void SendUnary(v1::AppendRequest request, Clock::time_point deadline, Done done);
  // Wakes the sender when it may be waiting for the last append of a closing client.
  void NotifyIfDrained() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes the broken stream: Finish, join its reader, and retry or fail what was on it.
  void CloseStream(std::unique_lock<std::mutex>& lock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After an attempt failed with `status`: true when a retry is due (the timer queues it after
  // its backoff); else false, and the append's completion is in `out` (the caller erases it).
  bool RetryOrFail(uint64_t id, Pending& p, const absl::Status& status, Completions* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Erases a completed append with its deadline entry.
  std::map<uint64_t, Pending>::iterator Forget(std::map<uint64_t, Pending>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Run(Completions completions);

  v1::WalService::Stub* const stub_;
  const Options options_;
  const Unary unary_;

  std::mutex mu_;
  std::condition_variable cv_;        // the sender waits on it
  std::condition_variable timer_cv_;  // the timer: every tick, or when the sender is done
  std::map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);  // by request id
  std::deque<uint64_t> to_send_ ABSL_GUARDED_BY(mu_);         // ready, in arrival order
  // What the timer watches, ordered so that it looks only at what is due: with thousands of
  // appends waiting, a scan of them all every tick would hold the lock the others need.
  std::multimap<Clock::time_point, uint64_t> deadlines_ ABSL_GUARDED_BY(mu_);  // every append
  std::multimap<Clock::time_point, uint64_t> retries_ ABSL_GUARDED_BY(mu_);    // may be stale
  struct OnWire {
    uint64_t id;
    uint64_t sent;
    Steady::time_point answer_by;  // the stream counts as broken past this
  };
  std::deque<OnWire> on_wire_ ABSL_GUARDED_BY(mu_);  // current stream, in sending order
  uint64_t sendings_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool unary_only_ ABSL_GUARDED_BY(mu_) = false;   // walserver has no AppendStream
  bool sender_done_ ABSL_GUARDED_BY(mu_) = false;  // the timer runs until then
  int unary_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::condition_variable unary_cv_;

  // The current stream, owned by the sender; the reader and timer only look at its number, the
  // broken flag and the write clock, and cancel its context.
  std::unique_ptr<grpc::ClientContext> ctx_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::ClientReaderWriter<v1::AppendStreamRequest, v1::AppendStreamResponse>>
      stream_;
  uint64_t stream_number_ ABSL_GUARDED_BY(mu_) = 0;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // its reader saw the end
  std::thread reader_;
  Steady::time_point writing_since_ ABSL_GUARDED_BY(mu_) = Steady::time_point::max();
  // The sender waits for a new stream to start: gRPC holds it until the connection is up, up to
  // its 20 s connect timeout at an address that does not answer.
  bool starting_ ABSL_GUARDED_BY(mu_) = false;

  std::thread sender_;
  std::thread timer_;
};

}  // namespace wal
