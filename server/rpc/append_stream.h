// One AppendStream call: many appends on one bidirectional stream, each answered on its own.
//
// Threads. gRPC's reactions (OnReadDone, OnWriteDone, OnCancel, OnDone) and the appends'
// completions (producer poll threads, the admin pool) all meet under mu_. Answers wait in
// `answers_` and leave together in one message per write, one write in flight at a time.
//
// Life. The reactor deletes itself when gRPC is done with it (OnDone) and every append it started
// has completed, whichever comes last: an append's completion may arrive after the call ended.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/common/deadline.h"
#include "server/common/metrics.h"
#include "server/rpc/append_stages.h"
#include "wal/v1/wal.grpc.pb.h"

namespace wal {

class AppendStreamReactor final
    : public grpc::ServerBidiReactor<v1::AppendStreamRequest, v1::AppendStreamResponse> {
 public:
  using Done = std::function<void(absl::StatusOr<std::vector<uint64_t>>)>;
  // Starts one append (WalServiceImpl::DoAppend): `done` runs exactly once.
  using Starter = std::function<void(std::shared_ptr<const v1::AppendRequest> request,
                                     Clock::time_point deadline, Done done)>;

  // Appends the stream may have unanswered (started, or answered but not yet written) before
  // it stops reading more. Bounds the server's memory for a client that sends without reading
  // its answers.
  static constexpr size_t kMaxUnanswered = 4096;
  // Appends one message may carry; those past it are refused (RESOURCE_EXHAUSTED, nothing
  // written), so that one message cannot start more than this at once.
  static constexpr int kMaxAppendsPerMessage = 4096;

  // `stream_deadline` is the call's (time_point::max() for none): an append without a timeout of
  // its own gets it (the writer bounds it further by its append timeout). `on_done` runs last,
  // just before the reactor deletes itself.
  // Each append is counted in `metrics` as a call of method "StreamedAppend", and its answer
  // stage (from its completion until the write carrying its answer is done) in `stages`.
  AppendStreamReactor(Starter start, Clock::time_point stream_deadline, Metrics* metrics,
                      AppendStages* stages, std::function<void(AppendStreamReactor*)> on_done);

  // Ends the stream for shutdown: appends already started are answered, then the call ends
  // UNAVAILABLE; appends read meanwhile are refused with UNAVAILABLE (nothing written).
  void Stop();

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // Queues the answer to an append read at `arrived`; `started` when it was handed to the
  // starter.
  void Answer(uint64_t request_id, Clock::time_point arrived,
              absl::StatusOr<std::vector<uint64_t>> ids, bool started);
  // Starts the next write or read, or finishes the call, as the state allows (mu_ held).
  void Pump() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when the reactor may be deleted (mu_ held).
  bool Gone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ && started_ == 0; }

  const Starter start_;
  const Clock::time_point stream_deadline_;
  Metrics* const metrics_;
  AppendStages* const stages_;
  const std::function<void(AppendStreamReactor*)> on_done_;

  v1::AppendStreamRequest request_;    // filled by the read in flight
  v1::AppendStreamResponse response_;  // sent by the write in flight

  std::mutex mu_;
  std::vector<v1::AppendResult> answers_ ABSL_GUARDED_BY(mu_);               // waiting for a write
  std::vector<Clock::time_point> answered_at_ ABSL_GUARDED_BY(mu_);          // one per answers_
  std::vector<Clock::time_point> writing_answered_at_ ABSL_GUARDED_BY(mu_);  // the write's
  size_t started_ ABSL_GUARDED_BY(mu_) = 0;     // appends not completed yet
  size_t unanswered_ ABSL_GUARDED_BY(mu_) = 0;  // started, or answered but not written
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool half_closed_ ABSL_GUARDED_BY(mu_) = false;  // the client sent its last append
  bool broken_ ABSL_GUARDED_BY(mu_) = false;       // cancelled, or a write failed
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace wal
