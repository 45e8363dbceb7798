// One Read or ReadMany call: the read's thread pushes batches in through the ReadSink side (see
// log/read.h), gRPC's reactions drain them, one write in flight at a time. The batches go out as
// the read path serialised them (log/read_batch.h): the two methods are raw ones, whose messages
// gRPC takes as bytes.
//
// Threads. Send() runs on the read's thread and blocks while two batches wait (so the read cannot
// run ahead of its client); OnWriteDone and OnCancel run on gRPC's threads. They meet under the
// sink's mutex.
//
// Life. gRPC deletes the reactor in OnDone; the sink is shared with the read, which may still
// hold it then (its Send answers false once the call is cancelled).
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "server/log/read.h"
#include "server/log/read_batch.h"

namespace wal {

class ReadStreamReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  class Sink final : public ReadSink {
   public:
    explicit Sink(ReadStreamReactor* reactor) : reactor_(reactor) {}

    bool Send(ReadBatch batch) override;
    bool cancelled() const override;
    void Finish(absl::Status status) override;

    // From OnWriteDone and OnCancel.
    void WriteDone(bool ok);
    void Cancel();

   private:
    ReadStreamReactor* const reactor_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<grpc::ByteBuffer> queue_ ABSL_GUARDED_BY(mu_);  // the front one is being written
    bool writing_ ABSL_GUARDED_BY(mu_) = false;
    bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
    std::optional<absl::Status> final_status_ ABSL_GUARDED_BY(mu_);  // once the queue is written
  };

  ReadStreamReactor() : sink_(std::make_shared<Sink>(this)) {}
  // What the read delivers into.
  std::shared_ptr<Sink> sink() { return sink_; }

  void OnWriteDone(bool ok) override { sink_->WriteDone(ok); }
  void OnCancel() override { sink_->Cancel(); }
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<Sink> sink_;
};

}  // namespace wal
