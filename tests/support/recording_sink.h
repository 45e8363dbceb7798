// The one fake of a read's client: a ReadSink that records what a read delivers, and can play a
// slow, stalled or cancelled client.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/log/read.h"

namespace wal::testing {

class RecordingSink final : public ReadSink {
 public:
  using Clock = std::chrono::steady_clock;

  // `send_time`: each batch takes this long to send, as to a client over a slow network that
  // still keeps taking batches.
  explicit RecordingSink(Clock::duration send_time = Clock::duration::zero())
      : send_time_(send_time) {}

  bool Send(ReadBatch batch) override;
  bool cancelled() const override;
  void Finish(absl::Status status) override;

  // While stalled, the client takes no batch: Send blocks (a paused `walctl read --follow |
  // less`, or a datanode busy applying what it got). Stall before the read starts to stall it
  // at its first batch.
  void Stall(bool stalled);
  // Waits until a Send is blocked by the stall: the read has a batch its client does not take.
  bool WaitStalled(Clock::duration timeout);
  // What gRPC does when the stream ends (OnCancel): Send returns false from now on (a batch it
  // was given is still recorded).
  void Cancel();

  // Waits until the read holds `count` entries; false if it finished or timed out first.
  bool WaitForEntries(size_t count, Clock::duration timeout);
  // The read's status once it finished, waiting up to `timeout`; nullopt if it did not.
  std::optional<absl::Status> WaitFinished(Clock::duration timeout);
  // The read's entries once it finished well; its status if it failed or did not finish.
  absl::StatusOr<std::vector<v1::Entry>> Wait(Clock::duration timeout);

  size_t received() const;
  // The number of entries in each batch sent.
  std::vector<size_t> batch_sizes() const;
  std::vector<v1::Entry> entries() const;
  std::vector<uint64_t> ids() const;
  std::vector<std::string> data() const;
  // When each entry was handed to the client.
  std::vector<Clock::time_point> arrived() const;

 private:
  const Clock::duration send_time_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<size_t> batch_sizes_;
  bool stalled_ = false;
  bool blocked_ = false;  // a Send waits for the stall to end
  bool cancelled_ = false;
  std::optional<absl::Status> finished_;
  std::vector<v1::Entry> entries_;
  std::vector<Clock::time_point> arrived_;
};

}  // namespace wal::testing
