#include "client/append_streamer.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/retry.h"

namespace wal {
namespace {

// Appends gathered into one message stay under this, unless one append alone is larger.
constexpr size_t kMaxMessageBytes = 4 << 20;
// walserver refuses appends past this many in one message (server/rpc/append_stream.h).
constexpr int kMaxAppendsPerMessage = 4096;
// How often the timer looks at deadlines and retries.
constexpr auto kTick = std::chrono::milliseconds(20);
// Waiting for this marks a retry that is not waiting.
constexpr auto kNotWaiting = std::chrono::system_clock::time_point::min();

absl::Status StatusOf(int code, const std::string& message) {
  // gRPC and absl share their numbering.
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

}  // namespace

AppendStreamer::AppendStreamer(v1::WalService::Stub* stub, Options options, Unary unary)
    : stub_(stub), options_(std::move(options)), unary_(std::move(unary)) {}

AppendStreamer::~AppendStreamer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    cv_.notify_all();
  }
  if (sender_.joinable()) sender_.join();
  if (timer_.joinable()) timer_.join();
  // Appends sent as unary calls complete on gRPC's threads, each by its deadline.
  std::unique_lock<std::mutex> lock(mu_);
  unary_cv_.wait(lock, [this] { return unary_in_flight_ == 0; });
}

void AppendStreamer::Run(Completions completions) {
  for (Completion& c : completions) c.done(std::move(c.result));
}

void AppendStreamer::Append(v1::AppendRequest request, Clock::time_point deadline, Done done) {
  std::unique_lock<std::mutex> lock(mu_);
  if (unary_only_ || request.ByteSizeLong() > kMaxMessageBytes) {
    lock.unlock();
    SendUnary(std::move(request), deadline, std::move(done));
    return;
  }
  if (!started_) {
    started_ = true;
    sender_ = std::thread([this] { SenderLoop(); });
    timer_ = std::thread([this] { TimerLoop(); });
  }
  const uint64_t id = next_id_++;
  Pending& p = pending_[id];
  p.request = std::move(request);
  p.first_attempt = std::chrono::steady_clock::now();
  p.deadline = deadline;
  p.deadline_entry = deadlines_.emplace(deadline, id);
  p.done = std::move(done);
  p.not_before = kNotWaiting;
  to_send_.push_back(id);
  cv_.notify_all();
}

void AppendStreamer::SendUnary(v1::AppendRequest request, Clock::time_point deadline, Done done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++unary_in_flight_;
  }
  unary_(std::move(request), deadline,
         [this, done = std::move(done)](absl::StatusOr<std::vector<uint64_t>> result) {
           done(std::move(result));
           std::lock_guard<std::mutex> lock(mu_);
           if (--unary_in_flight_ == 0) unary_cv_.notify_all();
         });
}

void AppendStreamer::NotifyIfDrained() {
  if (closing_ && pending_.empty()) cv_.notify_all();
}

std::map<uint64_t, AppendStreamer::Pending>::iterator AppendStreamer::Forget(
    std::map<uint64_t, Pending>::iterator it) {
  deadlines_.erase(it->second.deadline_entry);
  return pending_.erase(it);
}

bool AppendStreamer::RetryOrFail(uint64_t id, Pending& p, const absl::Status& status,
                                 Completions* out) {
  p.stream = 0;
  if (const auto wait =
          options_.retry.Next(RetryPolicy::Kind::kAppend, status.code(), p.retry, p.deadline)) {
    ++p.retry;
    p.not_before = Clock::now() + *wait;  // the timer queues it then
    retries_.emplace(p.not_before, id);
    return true;
  }
  out->push_back(Completion{std::move(p.done), status});
  return false;
}

void AppendStreamer::SenderLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (broken_) {
      CloseStream(lock);
      continue;
    }
    if (unary_only_) {
      SendAllAsUnary(lock);
      if (closing_) break;
      cv_.wait(lock);
      continue;
    }
    // Appends that ended (at their deadline) while queued need no stream.
    while (!to_send_.empty() && pending_.count(to_send_.front()) == 0) to_send_.pop_front();
    if (to_send_.empty()) {
      if (closing_ && pending_.empty()) break;
      cv_.wait(lock);
      continue;
    }
    if (!stream_) OpenStream(lock);
    v1::AppendStreamRequest message = GatherMessage();
    writing_since_ = Steady::now();
    lock.unlock();
    const bool written = stream_->Write(message);
    lock.lock();
    writing_since_ = Steady::time_point::max();
    for (v1::StreamedAppend& append : *message.mutable_appends()) {
      auto it = pending_.find(append.request_id());
      if (it != pending_.end()) it->second.request.Swap(append.mutable_append());
    }
    // A failed write means a broken stream: its reader sees the end, and sets broken_.
    if (!written) cv_.wait(lock, [this] { return broken_; });
  }
  // Closing: every append completed. Say so, and wait for walserver's OK, or not long.
  if (stream_) {
    lock.unlock();
    stream_->WritesDone();
    lock.lock();
    if (!cv_.wait_for(lock, options_.attempt_timeout, [this] { return broken_; })) {
      ctx_->TryCancel();
      cv_.wait(lock, [this] { return broken_; });
    }
    CloseStream(lock);
  }
  sender_done_ = true;
  timer_cv_.notify_all();
}

void AppendStreamer::SendAllAsUnary(std::unique_lock<std::mutex>& lock) {
  std::vector<std::pair<uint64_t, Pending>> moved;
  for (auto it = pending_.begin(); it != pending_.end();) {
    moved.emplace_back(it->first, std::move(it->second));
    it = pending_.erase(it);
  }
  to_send_.clear();
  deadlines_.clear();
  retries_.clear();
  lock.unlock();
  for (auto& [id, p] : moved) {
    if (p.retry > 0) MarkRetry(&p.request, p.first_attempt);
    SendUnary(std::move(p.request), p.deadline, std::move(p.done));
  }
  lock.lock();
}

void AppendStreamer::OpenStream(std::unique_lock<std::mutex>& lock) {
  ctx_ = std::make_unique<grpc::ClientContext>();
  if (options_.prepare) options_.prepare(*ctx_);
  const uint64_t number = ++stream_number_;
  grpc::ClientContext* ctx = ctx_.get();
  // Starting counts as a write: the timer cancels a start that takes longer than an attempt
  // (or that nothing waits for any more once the client closes).
  starting_ = true;
  writing_since_ = Steady::now();
  lock.unlock();
  auto stream = stub_->AppendStream(ctx);
  lock.lock();
  starting_ = false;
  writing_since_ = Steady::time_point::max();
  stream_ = std::move(stream);
  reader_ = std::thread([this, number, rw = stream_.get()] { ReaderLoop(number, rw); });
}

v1::AppendStreamRequest AppendStreamer::GatherMessage() {
  v1::AppendStreamRequest message;
  size_t bytes = 0;
  const Clock::time_point now = Clock::now();
  while (!to_send_.empty()) {
    auto it = pending_.find(to_send_.front());
    if (it == pending_.end()) {  // completed meanwhile (its deadline passed)
      to_send_.pop_front();
      continue;
    }
    Pending& p = it->second;
    const size_t size = p.request.ByteSizeLong();
    if (message.appends_size() > 0 &&
        (bytes + size > kMaxMessageBytes || message.appends_size() >= kMaxAppendsPerMessage)) {
      break;
    }
    to_send_.pop_front();
    bytes += size;
    v1::StreamedAppend* append = message.add_appends();
    append->set_request_id(it->first);
    const auto left = std::min(p.deadline, now + options_.attempt_timeout) - now;
    append->set_timeout_ms(static_cast<uint32_t>(
        std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(left).count())));
    // Lent to the message without a copy; SenderLoop gives it back after the write, before the
    // append can be sent again (only the sender sends).
    append->mutable_append()->Swap(&p.request);
    if (p.retry > 0) MarkRetry(append->mutable_append(), p.first_attempt);
    p.stream = stream_number_;
    p.sent = ++sendings_;
    on_wire_.push_back(OnWire{
        it->first, p.sent,
        Steady::now() + std::chrono::milliseconds(append->timeout_ms()) + std::chrono::seconds(1)});
  }
  return message;
}

void AppendStreamer::CloseStream(std::unique_lock<std::mutex>& lock) {
  auto stream = std::move(stream_);
  auto ctx = std::move(ctx_);
  std::thread reader = std::move(reader_);
  const uint64_t number = stream_number_;
  lock.unlock();
  const grpc::Status status = stream->Finish();
  reader.join();
  lock.lock();
  broken_ = false;
  on_wire_.clear();
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    unary_only_ = true;  // an older walserver; the loop hands the appends to unary calls
    for (auto& [id, p] : pending_) {
      p.stream = 0;
      p.not_before = kNotWaiting;
    }
    return;
  }
  // Appends on the stream were not answered: their outcome is unknown, so they go again (the
  // sequences make that safe), whatever ended the stream (a lost connection, shutdown, a proxy's
  // reset, our own cancel of a stuck stream), except a refusal of the caller itself.
  absl::Status lost = absl::UnavailableError(
      absl::StrCat("the append stream ended before this append was answered (",
                   status.error_message(), "); its outcome is unknown"));
  if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
      status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    lost = StatusOf(status.error_code(), status.error_message());
  }
  Completions out;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.stream != number) {
      ++it;
      continue;
    }
    it = RetryOrFail(it->first, it->second, lost, &out) ? std::next(it) : Forget(it);
  }
  NotifyIfDrained();
  lock.unlock();
  Run(std::move(out));
  lock.lock();
}

void AppendStreamer::ReaderLoop(
    uint64_t number,
    grpc::ClientReaderWriter<v1::AppendStreamRequest, v1::AppendStreamResponse>* rw) {
  v1::AppendStreamResponse response;
  while (rw->Read(&response)) {
    Completions out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (v1::AppendResult& result : *response.mutable_results()) {
        auto it = pending_.find(result.request_id());
        // Gone at its deadline, or already sent again on a newer stream.
        if (it == pending_.end() || it->second.stream != number) continue;
        if (result.code() == 0) {
          out.push_back(Completion{
              std::move(it->second.done),
              std::vector<uint64_t>(result.entry_ids().begin(), result.entry_ids().end())});
          Forget(it);
          continue;
        }
        if (!RetryOrFail(it->first, it->second, StatusOf(result.code(), result.message()), &out)) {
          Forget(it);
        }
      }
      NotifyIfDrained();
    }
    Run(std::move(out));
    response.Clear();
  }
  std::lock_guard<std::mutex> lock(mu_);
  broken_ = true;
  cv_.notify_all();
}

void AppendStreamer::TimerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!sender_done_) {
    const Clock::time_point now = Clock::now();
    Completions out;
    // Appends at their deadline fail.
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      auto it = pending_.find(deadlines_.begin()->second);
      out.push_back(Completion{
          std::move(it->second.done),
          absl::DeadlineExceededError("walserver did not answer the append within its deadline; "
                                      "it may still be written")});
      Forget(it);
    }
    // Retries whose backoff is over go out.
    while (!retries_.empty() && retries_.begin()->first <= now) {
      const uint64_t id = retries_.begin()->second;
      retries_.erase(retries_.begin());
      auto it = pending_.find(id);
      if (it == pending_.end() || it->second.not_before == kNotWaiting) continue;
      it->second.not_before = kNotWaiting;
      to_send_.push_back(id);
      cv_.notify_all();
    }
    // The oldest append on the wire of this stream, if still unanswered, tells whether the
    // stream answers at all.
    bool unanswered = false;
    while (!on_wire_.empty()) {
      const OnWire& oldest = on_wire_.front();
      auto it = pending_.find(oldest.id);
      if (it == pending_.end() || it->second.stream != stream_number_ ||
          it->second.sent != oldest.sent) {
        on_wire_.pop_front();  // answered, or sent again since
        continue;
      }
      unanswered = Steady::now() > oldest.answer_by;
      break;
    }
    // A write that does not go out (walserver stopped reading) holds up every append behind
    // it, and an answer that does not come (a dead connection) would hold its append until its
    // deadline: cancel that stream, and its appends go again on a new one.
    const bool stuck = writing_since_ != Steady::time_point::max() &&
                       Steady::now() - writing_since_ > options_.attempt_timeout;
    // A stream still starting when the client closes with nothing left to send.
    const bool unwanted = starting_ && closing_ && pending_.empty();
    if (ctx_ && !broken_ && (stuck || unanswered || unwanted)) {
      writing_since_ = Steady::time_point::max();
      on_wire_.clear();
      ctx_->TryCancel();
    }
    NotifyIfDrained();
    if (!out.empty()) {
      lock.unlock();
      Run(std::move(out));
      lock.lock();
    }
    timer_cv_.wait_for(lock, kTick);
  }
}

}  // namespace wal
