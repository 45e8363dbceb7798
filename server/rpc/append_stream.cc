#include "server/rpc/append_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/rpc/grpc_status.h"

namespace wal {

AppendStreamReactor::AppendStreamReactor(Starter start, Clock::time_point stream_deadline,
                                         Metrics* metrics, AppendStages* stages,
                                         std::function<void(AppendStreamReactor*)> on_done)
    : start_(std::move(start)),
      stream_deadline_(stream_deadline),
      metrics_(metrics),
      stages_(stages),
      on_done_(std::move(on_done)) {
  std::lock_guard<std::mutex> lock(mu_);
  reading_ = true;
  StartRead(&request_);
}

void AppendStreamReactor::OnReadDone(bool ok) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!ok) {  // the client closed its side (or the call broke: OnCancel says so)
    reading_ = false;
    half_closed_ = true;
    Pump();
    return;
  }
  const bool refuse = stopping_ || broken_;
  const size_t n = request_.appends_size();
  unanswered_ += n;
  if (!refuse) started_ += n;
  lock.unlock();
  // Outside the lock: an append may complete inline (a bad request, a full in-flight cap).
  // reading_ stays true meanwhile, so that no other thread starts a read into request_.
  const Clock::time_point now = Clock::now();
  int index = 0;
  for (v1::StreamedAppend& append : *request_.mutable_appends()) {
    if (!refuse && index++ >= kMaxAppendsPerMessage) {
      Answer(append.request_id(), now,
             absl::ResourceExhaustedError(absl::StrCat(
                 "a message of the append stream carries at most ", kMaxAppendsPerMessage,
                 " appends; this one was not written, send it again")),
             /*started=*/true);  // counted in started_ above
      continue;
    }
    if (refuse) {
      Answer(append.request_id(), now,
             absl::UnavailableError(
                 "walserver is shutting down; this append was not written, retry it elsewhere"),
             /*started=*/false);
      continue;
    }
    Clock::time_point deadline = stream_deadline_;
    if (append.timeout_ms() > 0) {
      deadline = std::min(deadline, now + std::chrono::milliseconds(append.timeout_ms()));
    }
    auto request = std::make_shared<const v1::AppendRequest>(std::move(*append.mutable_append()));
    start_(std::move(request), deadline,
           [this, id = append.request_id(), now](absl::StatusOr<std::vector<uint64_t>> ids) {
             Answer(id, now, std::move(ids), /*started=*/true);
           });
  }
  request_.Clear();
  lock.lock();
  reading_ = false;
  Pump();
}

void AppendStreamReactor::Answer(uint64_t request_id, Clock::time_point arrived,
                                 absl::StatusOr<std::vector<uint64_t>> ids, bool started) {
  v1::AppendResult result;
  result.set_request_id(request_id);
  if (ids.ok()) {
    result.mutable_entry_ids()->Assign(ids->begin(), ids->end());
  } else {
    const grpc::Status status = ToGrpcStatus(ids.status());
    result.set_code(status.error_code());
    result.set_message(status.error_message());
  }
  const Clock::time_point now = Clock::now();
  metrics_->RecordCall("StreamedAppend", result.code(),
                       std::chrono::duration<double>(now - arrived).count());
  std::unique_lock<std::mutex> lock(mu_);
  answers_.push_back(std::move(result));
  answered_at_.push_back(now);
  if (started) --started_;
  Pump();
  if (!Gone()) return;
  lock.unlock();
  on_done_(this);
  delete this;
}

void AppendStreamReactor::Pump() {
  if (finished_) return;
  if (!writing_ && !broken_ && !answers_.empty()) {
    response_.Clear();
    for (v1::AppendResult& answer : answers_) response_.add_results()->Swap(&answer);
    unanswered_ -= answers_.size();
    answers_.clear();
    writing_answered_at_.swap(answered_at_);
    answered_at_.clear();
    writing_ = true;
    StartWrite(&response_);
  }
  if (!reading_ && !half_closed_ && !broken_ && !stopping_ && unanswered_ < kMaxUnanswered) {
    reading_ = true;
    StartRead(&request_);
  }
  if (writing_) return;  // finish after the last write
  if (broken_) {
    finished_ = true;
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the append stream was cancelled"));
  } else if (started_ == 0 && answers_.empty() && (half_closed_ || stopping_)) {
    finished_ = true;
    Finish(half_closed_ ? grpc::Status::OK
                        : grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                       "walserver is shutting down: the appends answered on this "
                                       "stream are settled, any other was not written"));
  }
}

void AppendStreamReactor::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  Pump();
}

void AppendStreamReactor::OnWriteDone(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  writing_ = false;
  if (ok) {
    const Clock::time_point now = Clock::now();
    for (const Clock::time_point at : writing_answered_at_) {
      stages_->Record(AppendStage::kAnswer, now - at);
    }
  }
  writing_answered_at_.clear();
  if (!ok) broken_ = true;
  Pump();
}

void AppendStreamReactor::OnCancel() {
  std::lock_guard<std::mutex> lock(mu_);
  broken_ = true;
  Pump();
}

void AppendStreamReactor::OnDone() {
  std::unique_lock<std::mutex> lock(mu_);
  done_ = true;
  if (!Gone()) return;
  lock.unlock();
  on_done_(this);
  delete this;
}

}  // namespace wal
