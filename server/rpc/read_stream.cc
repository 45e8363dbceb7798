#include "server/rpc/read_stream.h"

#include <string>
#include <utility>
#include <vector>

#include "server/rpc/grpc_status.h"

namespace wal {

namespace {

// The message's bytes as slices that own them: gRPC writes them without a copy.
grpc::ByteBuffer ToByteBuffer(ReadBatch batch) {
  std::vector<grpc::Slice> slices;
  for (std::string& piece : batch.TakeSerialized()) {
    auto* bytes = new std::string(std::move(piece));
    slices.emplace_back(
        bytes->data(), bytes->size(), [](void* owned) { delete static_cast<std::string*>(owned); },
        bytes);
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace

bool ReadStreamReactor::Sink::Send(ReadBatch batch) {
  grpc::ByteBuffer message = ToByteBuffer(std::move(batch));
  std::unique_lock<std::mutex> lock(mu_);
  // At most one batch waits behind the one being written: the reader cannot run ahead.
  cv_.wait(lock, [this] { return cancelled_ || queue_.size() < 2; });
  if (cancelled_) return false;
  queue_.push_back(std::move(message));
  if (writing_) return true;
  writing_ = true;
  const grpc::ByteBuffer* next = &queue_.front();
  lock.unlock();
  reactor_->StartWrite(next);
  return true;
}

bool ReadStreamReactor::Sink::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

void ReadStreamReactor::Sink::Finish(absl::Status status) {
  std::unique_lock<std::mutex> lock(mu_);
  if (writing_) {  // finish once the queued batches are written
    final_status_ = std::move(status);
    return;
  }
  lock.unlock();
  reactor_->Finish(ToGrpcStatus(status));
}

void ReadStreamReactor::Sink::WriteDone(bool ok) {
  std::unique_lock<std::mutex> lock(mu_);
  queue_.pop_front();
  if (!ok) cancelled_ = true;
  cv_.notify_all();
  if (!queue_.empty() && ok) {
    const grpc::ByteBuffer* next = &queue_.front();
    lock.unlock();
    reactor_->StartWrite(next);
    return;
  }
  writing_ = false;
  if (final_status_) {
    const absl::Status status = std::move(*final_status_);
    final_status_.reset();
    lock.unlock();
    reactor_->Finish(ToGrpcStatus(ok ? status : absl::CancelledError("client went away")));
  }
}

void ReadStreamReactor::Sink::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  cv_.notify_all();
}

}  // namespace wal
