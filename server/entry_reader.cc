#include "server/entry_reader.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "server/codec.h"
#include "server/errors.h"
#include "spdlog/spdlog.h"

namespace wal {

using std::chrono::steady_clock;

namespace {

int MillisUntil(steady_clock::time_point t, int cap) {
  if (t == steady_clock::time_point::max()) return cap;
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(t - steady_clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, cap));
}

}  // namespace

EntryReader::EntryReader(KafkaProperties properties, ReaderOptions options, MetaStore* meta,
                         Metrics* metrics, std::string name)
    : properties_(std::move(properties)),
      options_(options),
      meta_(meta),
      metrics_(metrics),
      name_(std::move(name)) {}

EntryReader::~EntryReader() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return running_ == 0; });
  idle_consumers_.clear();
}

absl::Status EntryReader::Start(ReadParams params, std::shared_ptr<ReadSink> sink) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_ >= options_.max_concurrent_reads) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "too many concurrent reads (", options_.max_concurrent_reads, "); retry later"));
    }
    ++running_;
  }
  std::thread([this, params, sink = std::move(sink)] {
    ++metrics_->reads_in_progress;
    absl::Status status = Run(params, *sink);
    --metrics_->reads_in_progress;
    sink->Finish(std::move(status));
    std::lock_guard<std::mutex> lock(mu_);
    if (--running_ == 0) idle_cv_.notify_all();
  }).detach();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Consumer>> EntryReader::AcquireConsumer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_consumers_.empty()) {
      auto consumer = std::move(idle_consumers_.back());
      idle_consumers_.pop_back();
      return consumer;
    }
  }
  return Consumer::Create(properties_, absl::StrCat(name_, "-reader-", consumers_made_++));
}

void EntryReader::ReleaseConsumer(std::unique_ptr<Consumer> consumer) {
  if (!consumer->Unassign().ok()) return;  // a consumer in doubt is not reused
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_consumers_.size() < options_.max_idle_consumers) {
    idle_consumers_.push_back(std::move(consumer));
  }
}

absl::Status EntryReader::Run(const ReadParams& params, ReadSink& sink) {
  std::optional<NamespaceState> ns = meta_->Get(params.namespace_id);
  if (!ns)
    return absl::NotFoundError(absl::StrCat("namespace ", params.namespace_id, " not found"));

  auto acquired = AcquireConsumer();
  if (!acquired.ok()) return acquired.status();
  std::unique_ptr<Consumer> consumer = std::move(*acquired);
  struct ReturnConsumer {
    EntryReader* reader;
    std::unique_ptr<Consumer>& consumer;
    ~ReturnConsumer() { reader->ReleaseConsumer(std::move(consumer)); }
  } return_consumer{this, consumer};

  // Stop a little before the caller's deadline, so the caller learns why.
  const auto now = steady_clock::now();
  auto stop_at = params.deadline;
  if (params.deadline != steady_clock::time_point::max()) {
    stop_at -= std::clamp<steady_clock::duration>((params.deadline - now) / 10,
                                                  std::chrono::milliseconds(10),
                                                  std::chrono::milliseconds(500));
  }

  // The end of the log as seen now bounds a read without follow.
  absl::StatusOr<Watermarks> marks =
      QueryWatermarks(consumer->handle(), ns->slot.topic, ns->slot.partition,
                      std::max(1, MillisUntil(stop_at, 10000)));
  if (!marks.ok()) return marks.status();
  const int64_t end = marks->high;
  const int64_t first = ns->first_entry_id();
  const int64_t start =
      params.start_entry_id == 0 ? first : static_cast<int64_t>(params.start_entry_id);
  if (start < first) {
    return absl::OutOfRangeError(absl::StrCat("start_entry_id ", start, " is below first_entry_id ",
                                              first, " of namespace ", params.namespace_id,
                                              " (truncated); use 0 to read from the first entry"));
  }
  if (start > end) {
    return absl::OutOfRangeError(absl::StrCat("start_entry_id ", start, " is past the end ", end,
                                              " of namespace ", params.namespace_id));
  }
  if (start < marks->low) {
    return absl::DataLossError(
        absl::StrCat("records ", start, " to ", marks->low - 1, " of ", ns->slot.topic, "[",
                     ns->slot.partition, "] were deleted from Kafka although namespace ",
                     params.namespace_id, " did not truncate them (retention set on the topic?)"));
  }
  if (start == end && !params.follow) return absl::OkStatus();
  if (absl::Status s = consumer->Assign(ns->slot.topic, ns->slot.partition, start); !s.ok()) {
    return s;
  }

  EntryAssembler assembler(options_.max_entry_bytes);
  std::vector<AssembledEntry> ready;
  v1::ReadResponse batch;
  size_t batch_bytes = 0;
  uint64_t sent = 0;
  int64_t position = start;
  int64_t truncated_before = ns->truncated_before;
  absl::Status last_error;
  uint64_t skipped = 0;

  auto flush = [&]() -> bool {
    if (batch.entries_size() == 0) return true;
    const bool ok = sink.Send(std::move(batch));
    batch.Clear();
    batch_bytes = 0;
    return ok;
  };
  // Moves assembled entries into the batch; false once the limit is reached.
  auto take_ready = [&]() -> bool {
    for (AssembledEntry& e : ready) {
      if (static_cast<int64_t>(e.entry_id) < std::max(start, truncated_before)) continue;
      v1::Entry* out = batch.add_entries();
      out->set_namespace_id(params.namespace_id);
      out->set_entry_id(e.entry_id);
      batch_bytes += e.data.size();
      metrics_->read_bytes += e.data.size();
      ++metrics_->read_entries;
      *out->mutable_data() = std::move(e.data);
      ++sent;
      if (params.limit != 0 && sent >= params.limit) {
        ready.clear();
        return false;
      }
      if (batch_bytes >= options_.batch_bytes && !flush()) return false;
    }
    ready.clear();
    return true;
  };
  auto finish_ok = [&]() -> absl::Status {
    assembler.Flush(&ready);
    take_ready();
    records_skipped_ += assembler.skipped() + skipped;
    if (!flush()) return absl::CancelledError("read cancelled");
    return absl::OkStatus();
  };

  while (true) {
    if (sink.cancelled()) return absl::CancelledError("read cancelled");
    if (steady_clock::now() >= stop_at) {
      records_skipped_ += assembler.skipped() + skipped;
      if (!last_error.ok()) return last_error;
      return absl::DeadlineExceededError(absl::StrCat("read of namespace ", params.namespace_id,
                                                      " reached its deadline at entry ", position,
                                                      " of ", end));
    }
    if (!params.follow && position >= end) return finish_ok();

    Message msg = consumer->Poll(std::max(1, MillisUntil(stop_at, 100)));
    if (!msg) {
      if (!flush()) return absl::CancelledError("read cancelled");
      continue;
    }
    if (msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      position = std::max(position, msg->offset);
      last_error = absl::OkStatus();
      if (!flush()) return absl::CancelledError("read cancelled");
      if (params.follow) {
        // Between polls of a following read, notice a truncation or a deletion.
        std::optional<NamespaceState> now_ns = meta_->Get(params.namespace_id);
        if (!now_ns) {
          return absl::NotFoundError(
              absl::StrCat("namespace ", params.namespace_id, " was deleted"));
        }
        truncated_before = now_ns->truncated_before;
      }
      continue;
    }
    if (msg->err) {
      absl::Status status = KafkaErrorToStatus(
          msg->err, absl::StrCat("reading ", ns->slot.topic, "[", ns->slot.partition, "]"));
      if (absl::IsUnavailable(status)) {
        last_error = status;  // librdkafka retries on its own; give up at the deadline
        continue;
      }
      if (absl::IsDataLoss(status)) {
        return absl::DataLossError(absl::StrCat(
            "records of namespace ", params.namespace_id, " from entry ", position,
            " are gone from Kafka although they were not truncated: ", status.message()));
      }
      return status;
    }
    last_error = absl::OkStatus();
    if (!params.follow && msg->offset >= end) {
      position = msg->offset;
      continue;
    }
    position = msg->offset + 1;
    const std::optional<uint64_t> key = DecodeKey(msg->key, msg->key_len);
    if (!key) {
      ++skipped;  // not written by walserver
      continue;
    }
    if (*key != params.namespace_id) continue;
    assembler.Add(msg->offset, std::string_view(static_cast<const char*>(msg->payload), msg->len),
                  &ready);
    if (!take_ready()) {
      records_skipped_ += assembler.skipped() + skipped;
      if (params.limit != 0 && sent >= params.limit) {
        if (!flush()) return absl::CancelledError("read cancelled");
        return absl::OkStatus();
      }
      return absl::CancelledError("read cancelled");
    }
  }
}

}  // namespace wal
