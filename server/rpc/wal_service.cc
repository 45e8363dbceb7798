#include "server/rpc/wal_service.h"

#include <algorithm>
#include <deque>
#include <future>
#include <limits>
#include <map>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/common/crc32c.h"
#include "server/common/deadline.h"
#include "server/kafka/admin.h"
#include "server/rpc/grpc_status.h"
#include "spdlog/spdlog.h"

namespace wal {
namespace {

absl::Status CheckId(uint64_t namespace_id, absl::string_view field = "namespace_id") {
  if (namespace_id == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " 0 is reserved; use an id of 1 or more"));
  }
  return absl::OkStatus();
}

// Bytes of an append counted against --max_inflight_append_bytes for as long as this lives. It
// may outlive the service (records reported after shutdown), so it shares the counter.
class HeldBytes {
 public:
  HeldBytes(std::shared_ptr<std::atomic<uint64_t>> counter, uint64_t bytes)
      : counter_(std::move(counter)), bytes_(bytes) {}
  HeldBytes(const HeldBytes&) = delete;
  HeldBytes& operator=(const HeldBytes&) = delete;
  ~HeldBytes() { *counter_ -= bytes_; }

 private:
  std::shared_ptr<std::atomic<uint64_t>> counter_;
  uint64_t bytes_;
};

absl::Status NotFound(uint64_t namespace_id) {
  return absl::NotFoundError(
      absl::StrCat("namespace ", namespace_id, " not found; create it with CreateNamespace"));
}

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// One Read stream. The read's thread pushes batches in through the ReadSink side; gRPC's
// reactions drain them, one write in flight at a time.
class ReadReactor final : public grpc::ServerWriteReactor<v1::ReadResponse> {
 public:
  class Bridge final : public ReadSink {
   public:
    explicit Bridge(ReadReactor* reactor) : reactor_(reactor) {}

    bool Send(v1::ReadResponse batch) override {
      std::unique_lock<std::mutex> lock(mu_);
      // At most one batch waits behind the one being written: the reader cannot run ahead.
      cv_.wait(lock, [this] { return cancelled_ || queue_.size() < 2; });
      if (cancelled_) return false;
      queue_.push_back(std::move(batch));
      if (writing_) return true;
      writing_ = true;
      const v1::ReadResponse* next = &queue_.front();
      lock.unlock();
      reactor_->StartWrite(next);
      return true;
    }

    bool cancelled() const override {
      std::lock_guard<std::mutex> lock(mu_);
      return cancelled_;
    }

    void Finish(absl::Status status) override {
      std::unique_lock<std::mutex> lock(mu_);
      if (writing_) {  // finish once the queued batches are written
        final_status_ = std::move(status);
        return;
      }
      lock.unlock();
      reactor_->Finish(ToGrpcStatus(status));
    }

    // From OnWriteDone.
    void WriteDone(bool ok) {
      std::unique_lock<std::mutex> lock(mu_);
      queue_.pop_front();
      if (!ok) cancelled_ = true;
      cv_.notify_all();
      if (!queue_.empty() && ok) {
        const v1::ReadResponse* next = &queue_.front();
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

    void Cancel() {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      cv_.notify_all();
    }

   private:
    ReadReactor* const reactor_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<v1::ReadResponse> queue_ ABSL_GUARDED_BY(mu_);
    bool writing_ ABSL_GUARDED_BY(mu_) = false;
    bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
    std::optional<absl::Status> final_status_ ABSL_GUARDED_BY(mu_);
  };

  ReadReactor() : bridge_(std::make_shared<Bridge>(this)) {}
  std::shared_ptr<Bridge> bridge() { return bridge_; }

  void OnWriteDone(bool ok) override { bridge_->WriteDone(ok); }
  void OnCancel() override { bridge_->Cancel(); }
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<Bridge> bridge_;
};

// A stream refused before it began (authentication).
class RefusedStream final
    : public grpc::ServerBidiReactor<v1::AppendStreamRequest, v1::AppendStreamResponse> {
 public:
  explicit RefusedStream(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

Clock::time_point SteadyDeadline(const grpc::CallbackServerContext& ctx) {
  const auto deadline = ctx.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return Clock::time_point::max();
  const auto left = deadline - std::chrono::system_clock::now();
  // Far-future deadlines (grpcurl's default is none, some clients send years) count as none.
  if (left > std::chrono::hours(24 * 365)) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(left);
}

WalServiceImpl::WalServiceImpl(ServiceOptions options, MetaStore* meta, EntryWriter* writer,
                               EntryReader* reader, rd_kafka_t* kafka, Metrics* metrics)
    : options_(options),
      meta_(meta),
      writer_(writer),
      reader_(reader),
      slot_ends_(kafka),
      metrics_(metrics),
      stages_(metrics, options_.slow_append),
      admin_pool_(options.admin_threads) {}

Clock::time_point WalServiceImpl::AdminDeadline(grpc::CallbackServerContext* ctx) const {
  const Clock::time_point caller = SteadyDeadline(*ctx);
  const Clock::time_point own = Clock::now() + options_.admin_timeout;
  return std::min(own, AnswerBy(caller));
}

absl::StatusOr<int64_t> WalServiceImpl::SlotEnd(const Slot& slot,
                                                Clock::time_point deadline) const {
  return slot_ends_.Get(slot, deadline);
}

void WalServiceImpl::Fill(const NamespaceState& state, int64_t slot_end, v1::Namespace* out) const {
  out->set_namespace_id(state.namespace_id);
  out->set_topic(state.slot.topic);
  out->set_partition(state.slot.partition);
  out->set_first_entry_id(static_cast<uint64_t>(state.first_entry_id()));
  out->set_next_entry_id(static_cast<uint64_t>(std::max(slot_end, state.first_entry_id())));
  out->set_epoch(state.epoch);
}

absl::Status WalServiceImpl::Authenticate(const grpc::CallbackServerContext& ctx) const {
  if (options_.auth_token.empty()) return absl::OkStatus();
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        "this walserver requires a bearer token: send metadata 'authorization: Bearer <token>'");
  }
  const std::string expected = "Bearer " + options_.auth_token;
  const grpc::string_ref& got = it->second;
  // Compare in constant time, so that the answer's timing does not reveal the token.
  unsigned char diff = got.size() != expected.size();
  for (size_t i = 0; i < expected.size(); ++i) {
    diff |= static_cast<unsigned char>(expected[i] ^ (i < got.size() ? got.data()[i] : 0));
  }
  if (diff != 0) return absl::UnauthenticatedError("the bearer token is not valid");
  return absl::OkStatus();
}

absl::StatusOr<NamespaceState> WalServiceImpl::Lookup(uint64_t namespace_id,
                                                      Clock::time_point deadline) const {
  if (std::optional<NamespaceState> state = meta_->Get(namespace_id)) return *state;
  // Perhaps created through another server a moment ago.
  if (absl::Status s = meta_->CatchUp(deadline); !s.ok()) return s;
  if (std::optional<NamespaceState> state = meta_->Get(namespace_id)) return *state;
  return NotFound(namespace_id);
}

grpc::ServerUnaryReactor* WalServiceImpl::Defer(
    grpc::CallbackServerContext* ctx, std::function<absl::Status(Clock::time_point)> work) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const Clock::time_point deadline = AdminDeadline(ctx);
  admin_pool_.Post([reactor, deadline, work = std::move(work)] {
    // Work that waited in the queue past its deadline is dropped: its caller is gone.
    if (Clock::now() >= deadline) {
      reactor->Finish(ToGrpcStatus(absl::DeadlineExceededError(
          "the call waited too long behind other namespace changes; nothing was changed")));
      return;
    }
    reactor->Finish(ToGrpcStatus(work(deadline)));
  });
  return reactor;
}

grpc::ServerUnaryReactor* WalServiceImpl::CreateNamespace(grpc::CallbackServerContext* ctx,
                                                          const v1::CreateNamespaceRequest* request,
                                                          v1::CreateNamespaceResponse* response) {
  if (absl::Status s = Authenticate(*ctx); !s.ok()) return FinishNow(ctx, s);
  if (absl::Status s = CheckId(request->namespace_id()); !s.ok()) return FinishNow(ctx, s);
  return Defer(ctx, [this, request, response](Clock::time_point deadline) -> absl::Status {
    auto result = meta_->Create(
        request->namespace_id(), [&](const Slot& slot) { return SlotEnd(slot, deadline); },
        deadline);
    if (!result.ok()) return result.status();
    const auto& [state, created] = *result;
    // A new namespace's end is its start; an existing one's end needs a fresh look.
    int64_t end = state.start_offset;
    if (!created) {
      auto slot_end = SlotEnd(state.slot, deadline);
      if (!slot_end.ok()) return slot_end.status();
      end = *slot_end;
    }
    Fill(state, end, response->mutable_namespace_());
    response->set_created(created);
    if (created) {
      spdlog::info("created namespace {} in {}[{}] at offset {}", state.namespace_id,
                   state.slot.topic, state.slot.partition, state.start_offset);
    }
    return absl::OkStatus();
  });
}

absl::Status WalServiceImpl::PrepareAppend(const v1::AppendRequest& request,
                                           std::vector<AppendItem>* items, bool* epoch_ahead) {
  if (request.entries().empty()) return absl::InvalidArgumentError("the append carries no entries");
  items->clear();
  items->reserve(request.entries_size());
  // The namespaces of this request with their routes; usually one, so a linear search.
  std::vector<std::pair<uint64_t, AppendRoute>> known;
  for (int i = 0; i < request.entries_size(); ++i) {
    const v1::Entry& entry = request.entries(i);
    // The field's name only for a bad entry: this runs for every entry appended.
    if (entry.namespace_id() == 0) {
      return CheckId(0, absl::StrCat("entries[", i, "].namespace_id"));
    }
    if (entry.data().size() > options_.max_entry_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("entries[", i, "] is ", entry.data().size(), " bytes, over the limit of ",
                       options_.max_entry_bytes, " bytes (max_entry_bytes); nothing was written"));
    }
    if (entry.has_crc32c()) {
      // End to end: data that changed since its appender computed the checksum (on the wire, in
      // a proxy, in either process's memory) is refused, not written.
      if (const uint32_t actual = Crc32c(entry.data()); actual != entry.crc32c()) {
        ++metrics_->append_checksum_mismatches;
        return absl::InvalidArgumentError(absl::StrCat(
            "entries[", i, "]: crc32c ", entry.crc32c(), " does not match its ",
            entry.data().size(), " bytes of data (their CRC-32C is ", actual,
            "): the entry was corrupted between its appender and walserver, or the appender "
            "computed another checksum; nothing was written"));
      }
    }
    auto it = std::find_if(known.begin(), known.end(),
                           [&](const auto& k) { return k.first == entry.namespace_id(); });
    if (it == known.end()) {
      std::optional<AppendRoute> route = meta_->Route(entry.namespace_id());
      if (!route) return NotFound(entry.namespace_id());
      it = known.emplace(known.end(), entry.namespace_id(), std::move(*route));
    }
    const AppendRoute& ns = it->second;
    if (entry.epoch() < ns.epoch) {
      ++metrics_->appends_fenced;
      return absl::FailedPreconditionError(absl::StrCat(
          "entries[", i, "]: namespace ", entry.namespace_id(), " was acquired with epoch ",
          ns.epoch, "; this writer's epoch ", entry.epoch(),
          " is fenced (another writer owns the namespace now); nothing was written"));
    }
    if (entry.epoch() > ns.epoch) *epoch_ahead = true;
    items->push_back(AppendItem{
        ns.slot, entry.namespace_id(), entry.data(),
        EntryStamp{entry.epoch(), request.writer_id(), entry.sequence()}, /*fence=*/false,
        entry.has_crc32c() ? std::optional<uint32_t>(entry.crc32c()) : std::nullopt});
  }
  return absl::OkStatus();
}

void WalServiceImpl::Refuse(Clock::time_point arrived, const AppendDone& done,
                            absl::Status status) {
  stages_.Record(AppendStage::kStart, Clock::now() - arrived);
  done(std::move(status));
}

void WalServiceImpl::StartAppend(Clock::time_point arrived, Clock::time_point deadline,
                                 std::vector<AppendItem> items, AppendDone done) {
  uint64_t bytes = 0;
  for (const AppendItem& item : items) bytes += item.data.size();
  // Backpressure: past the cap, say so instead of queueing without bound. A request alone always
  // passes, whatever its size, so no valid request is refused forever.
  const uint64_t before = inflight_append_bytes_->fetch_add(bytes);
  if (before + bytes > options_.max_inflight_append_bytes && before > 0) {
    *inflight_append_bytes_ -= bytes;
    Refuse(arrived, done,
           absl::ResourceExhaustedError(absl::StrCat(
               "appends of ", before, " bytes are already waiting for Kafka (limit ",
               options_.max_inflight_append_bytes,
               " bytes, max_inflight_append_bytes); nothing was written, retry later")));
    return;
  }
  ++metrics_->appends_in_flight;
  const Clock::time_point handed = Clock::now();
  stages_.Record(AppendStage::kStart, handed - arrived);
  // The bytes count until librdkafka has reported every record, which may be after the answer
  // (a caller's deadline before --append_timeout_ms): the writer drops the callback only then.
  auto held = std::make_shared<HeldBytes>(inflight_append_bytes_, bytes);
  writer_->Append(std::move(items), deadline,
                  [this, bytes, handed, held = std::move(held),
                   done = std::move(done)](absl::StatusOr<std::vector<uint64_t>> ids) {
                    stages_.Record(AppendStage::kKafka, Clock::now() - handed);
                    --metrics_->appends_in_flight;
                    if (ids.ok()) {
                      metrics_->append_bytes += bytes;
                      metrics_->append_entries += ids->size();
                    }
                    done(std::move(ids));
                  });
}

void WalServiceImpl::DoAppend(std::shared_ptr<const v1::AppendRequest> request,
                              Clock::time_point deadline, Clock::time_point admin_deadline,
                              AppendDone done) {
  const Clock::time_point arrived = Clock::now();
  std::vector<AppendItem> items;
  bool epoch_ahead = false;
  absl::Status status = PrepareAppend(*request, &items, &epoch_ahead);
  if (!status.ok() && !absl::IsNotFound(status)) {
    Refuse(arrived, done, std::move(status));
    return;
  }
  if (status.ok() && !epoch_ahead) {
    StartAppend(arrived, deadline, std::move(items), std::move(done));
    return;
  }
  // A namespace or an epoch this server has not seen: another server may have just created or
  // acquired it. Catch up with the metadata topic (off the gRPC thread, in a catch-up shared
  // with every other such append) and look again; an epoch still unknown was never issued.
  catch_up_.After(admin_deadline, [this, request = std::move(request), arrived, deadline,
                                   done = std::move(done)](absl::Status caught_up) mutable {
    if (!caught_up.ok()) {
      Refuse(arrived, done, std::move(caught_up));
      return;
    }
    std::vector<AppendItem> items;
    bool still_ahead = false;
    absl::Status s = PrepareAppend(*request, &items, &still_ahead);
    if (s.ok() && still_ahead) {
      s = absl::FailedPreconditionError(
          "an entry carries an epoch that AcquireNamespace never issued for its namespace; "
          "nothing was written");
    }
    if (!s.ok()) {
      Refuse(arrived, done, std::move(s));
      return;
    }
    StartAppend(arrived, deadline, std::move(items), std::move(done));
  });
}

grpc::ServerUnaryReactor* WalServiceImpl::Append(grpc::CallbackServerContext* ctx,
                                                 const v1::AppendRequest* request,
                                                 v1::AppendResponse* response) {
  if (absl::Status s = Authenticate(*ctx); !s.ok()) return FinishNow(ctx, s);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // gRPC keeps the request until the call finishes, which is after `done` ran.
  std::shared_ptr<const v1::AppendRequest> unowned(request, [](const v1::AppendRequest*) {});
  DoAppend(std::move(unowned), SteadyDeadline(*ctx), AdminDeadline(ctx),
           [reactor, response](absl::StatusOr<std::vector<uint64_t>> ids) {
             if (!ids.ok()) {
               reactor->Finish(ToGrpcStatus(ids.status()));
               return;
             }
             response->mutable_entry_ids()->Assign(ids->begin(), ids->end());
             reactor->Finish(grpc::Status::OK);
           });
  return reactor;
}

namespace {

// start_time_ms: one start or the other, and a time Kafka can hold (ms since the epoch, int64).
absl::Status CheckStartTime(const v1::ReadRequest& read, absl::string_view field_prefix,
                            ReadParams* params) {
  if (read.start_time_ms() == 0) return absl::OkStatus();
  if (read.start_entry_id() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field_prefix, "start_entry_id ", read.start_entry_id(), " and ", field_prefix,
        "start_time_ms ", read.start_time_ms(), " both say where to start; give one or the other"));
  }
  if (read.start_time_ms() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field_prefix, "start_time_ms ", read.start_time_ms(),
                     " is not a time: milliseconds since the Unix epoch, at most 2^63-1"));
  }
  params->start_time_ms = static_cast<int64_t>(read.start_time_ms());
  return absl::OkStatus();
}

}  // namespace

grpc::ServerWriteReactor<v1::ReadResponse>* WalServiceImpl::Read(grpc::CallbackServerContext* ctx,
                                                                 const v1::ReadRequest* request) {
  auto* reactor = new ReadReactor();
  absl::Status status = Authenticate(*ctx);
  if (status.ok()) status = CheckId(request->namespace_id());
  if (status.ok()) {
    ReadParams params;
    params.namespace_id = request->namespace_id();
    params.start_entry_id = request->start_entry_id();
    params.limit = request->limit();
    params.follow = request->follow();
    params.skip_lost = request->skip_lost();
    params.deadline = SteadyDeadline(*ctx);
    status = CheckStartTime(*request, "", &params);
    if (status.ok()) status = reader_->Start(params, reactor->bridge());
  }
  if (!status.ok()) reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerBidiReactor<v1::AppendStreamRequest, v1::AppendStreamResponse>*
WalServiceImpl::AppendStream(grpc::CallbackServerContext* ctx) {
  if (absl::Status s = Authenticate(*ctx); !s.ok()) return new RefusedStream(s);
  std::lock_guard<std::mutex> lock(streams_mu_);
  if (streams_stopped_) {
    return new RefusedStream(absl::UnavailableError("walserver is shutting down"));
  }
  auto* stream = new AppendStreamReactor(
      [this](std::shared_ptr<const v1::AppendRequest> request, Clock::time_point deadline,
             AppendDone done) {
        const Clock::time_point admin_deadline =
            std::min(Clock::now() + options_.admin_timeout, AnswerBy(deadline));
        DoAppend(std::move(request), deadline, admin_deadline, std::move(done));
      },
      SteadyDeadline(*ctx), metrics_, &stages_,
      [this](AppendStreamReactor* done) {
        std::lock_guard<std::mutex> lock(streams_mu_);
        streams_.erase(done);
        if (streams_.empty()) streams_cv_.notify_all();
      });
  streams_.insert(stream);
  return stream;
}

void WalServiceImpl::StopStreams() {
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_stopped_ = true;
  for (AppendStreamReactor* stream : streams_) stream->Stop();
}

bool WalServiceImpl::WaitForStreams(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(streams_mu_);
  return streams_cv_.wait_until(lock, deadline, [this] { return streams_.empty(); });
}

grpc::ServerWriteReactor<v1::ReadResponse>* WalServiceImpl::ReadMany(
    grpc::CallbackServerContext* ctx, const v1::ReadManyRequest* request) {
  auto* reactor = new ReadReactor();
  absl::Status status = Authenticate(*ctx);
  if (status.ok() && request->reads_size() > kMaxReadManyNamespaces) {
    status =
        absl::InvalidArgumentError(absl::StrCat("a ReadMany names at most ", kMaxReadManyNamespaces,
                                                " namespaces, not ", request->reads_size()));
  }
  std::vector<ReadParams> reads;
  std::set<uint64_t> seen;
  for (int i = 0; status.ok() && i < request->reads_size(); ++i) {
    const v1::ReadRequest& read = request->reads(i);
    status = CheckId(read.namespace_id(), absl::StrCat("reads[", i, "].namespace_id"));
    if (status.ok() && !seen.insert(read.namespace_id()).second) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "reads[", i, "]: namespace ", read.namespace_id(), " is named twice in one ReadMany"));
    }
    ReadParams params;
    params.namespace_id = read.namespace_id();
    params.start_entry_id = read.start_entry_id();
    params.limit = read.limit();
    params.follow = request->follow();
    params.skip_lost = read.skip_lost();
    params.deadline = SteadyDeadline(*ctx);
    if (status.ok()) status = CheckStartTime(read, absl::StrCat("reads[", i, "]."), &params);
    reads.push_back(params);
  }
  if (status.ok()) status = reader_->StartMany(std::move(reads), reactor->bridge());
  if (!status.ok()) reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* WalServiceImpl::Truncate(grpc::CallbackServerContext* ctx,
                                                   const v1::TruncateRequest* request,
                                                   v1::TruncateResponse* response) {
  if (absl::Status s = Authenticate(*ctx); !s.ok()) return FinishNow(ctx, s);
  if (absl::Status s = CheckId(request->namespace_id()); !s.ok()) return FinishNow(ctx, s);
  return Defer(ctx, [this, request, response](Clock::time_point deadline) -> absl::Status {
    const uint64_t ns_id = request->namespace_id();
    absl::StatusOr<NamespaceState> state = Lookup(ns_id, deadline);
    if (!state.ok()) return state.status();
    auto end = SlotEnd(state->slot, deadline);
    if (!end.ok()) return end.status();
    const uint64_t entry_id = request->entry_id();
    if (entry_id > static_cast<uint64_t>(*end)) {
      return absl::OutOfRangeError(absl::StrCat("cannot truncate namespace ", ns_id, " before ",
                                                entry_id, ": past its end ", *end));
    }
    // Truncating to 0 or below the current point changes nothing.
    if (static_cast<int64_t>(entry_id) > state->truncated_before) {
      state = meta_->Truncate(ns_id, static_cast<int64_t>(entry_id), deadline);
      if (!state.ok()) return state.status();
    }
    Fill(*state, *end, response->mutable_namespace_());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WalServiceImpl::GetNamespace(grpc::CallbackServerContext* ctx,
                                                       const v1::GetNamespaceRequest* request,
                                                       v1::GetNamespaceResponse* response) {
  if (absl::Status s = Authenticate(*ctx); !s.ok()) return FinishNow(ctx, s);
  if (absl::Status s = CheckId(request->namespace_id()); !s.ok()) return FinishNow(ctx, s);
  return Defer(ctx, [this, request, response](Clock::time_point deadline) -> absl::Status {
    absl::StatusOr<NamespaceState> state = Lookup(request->namespace_id(), deadline);
    if (!state.ok()) return state.status();
    auto end = SlotEnd(state->slot, deadline);
    if (!end.ok()) return end.status();
    Fill(*state, *end, response->mutable_namespace_());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WalServiceImpl::ListNamespaces(grpc::CallbackServerContext* ctx,
                                                         const v1::ListNamespacesRequest* request,
                                                         v1::ListNamespacesResponse* response) {
  if (absl::Status s = Authenticate(*ctx); !s.ok()) return FinishNow(ctx, s);
  uint64_t after = 0;
  if (!request->page_token().empty() && !absl::SimpleAtoi(request->page_token(), &after)) {
    return FinishNow(ctx, absl::InvalidArgumentError(absl::StrCat(
                              "page_token '", request->page_token(),
                              "' is not a token from a previous ListNamespaces reply")));
  }
  const size_t page_size =
      request->page_size() == 0 ? 1000 : std::min(request->page_size(), 10000u);
  return Defer(ctx, [this, after, page_size, response](Clock::time_point deadline) -> absl::Status {
    std::vector<NamespaceState> page = meta_->List(after, page_size + 1);
    const bool more = page.size() > page_size;
    if (more) page.resize(page_size);
    std::map<Slot, int64_t> ends;  // one query per slot
    for (const NamespaceState& state : page) {
      auto it = ends.find(state.slot);
      if (it == ends.end()) {
        auto end = SlotEnd(state.slot, deadline);
        if (!end.ok()) return end.status();
        it = ends.emplace(state.slot, *end).first;
      }
      Fill(state, it->second, response->add_namespaces());
    }
    if (more) response->set_next_page_token(absl::StrCat(page.back().namespace_id));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WalServiceImpl::DeleteNamespace(grpc::CallbackServerContext* ctx,
                                                          const v1::DeleteNamespaceRequest* request,
                                                          v1::DeleteNamespaceResponse* response) {
  if (absl::Status s = Authenticate(*ctx); !s.ok()) return FinishNow(ctx, s);
  if (absl::Status s = CheckId(request->namespace_id()); !s.ok()) return FinishNow(ctx, s);
  return Defer(ctx, [this, request](Clock::time_point deadline) -> absl::Status {
    if (auto state = Lookup(request->namespace_id(), deadline); !state.ok()) return state.status();
    absl::Status status = meta_->Delete(request->namespace_id(), deadline);
    if (status.ok()) spdlog::info("deleted namespace {}", request->namespace_id());
    return status;
  });
}

grpc::ServerUnaryReactor* WalServiceImpl::AcquireNamespace(
    grpc::CallbackServerContext* ctx, const v1::AcquireNamespaceRequest* request,
    v1::AcquireNamespaceResponse* response) {
  if (absl::Status s = Authenticate(*ctx); !s.ok()) return FinishNow(ctx, s);
  if (absl::Status s = CheckId(request->namespace_id()); !s.ok()) return FinishNow(ctx, s);
  return Defer(ctx, [this, request, response](Clock::time_point deadline) -> absl::Status {
    const uint64_t ns_id = request->namespace_id();
    if (auto known = Lookup(ns_id, deadline); !known.ok()) return known.status();
    // 1. The new epoch, in the metadata topic: from now on this server refuses older epochs,
    //    and so does every other one once it has read that far.
    auto state = meta_->Acquire(ns_id, deadline);
    if (!state.ok()) return state.status();
    const uint64_t epoch = state->epoch;
    // 2. The fence in the slot: a server that has not read the new epoch yet may still write
    //    older ones, but readers drop whatever of them lands after the fence.
    std::promise<absl::StatusOr<std::vector<uint64_t>>> fenced;
    AppendItem fence{state->slot, ns_id, {}, EntryStamp{epoch, 0, 0}, /*fence=*/true};
    writer_->Append({fence}, deadline, [&fenced](absl::StatusOr<std::vector<uint64_t>> ids) {
      fenced.set_value(std::move(ids));
    });
    absl::StatusOr<std::vector<uint64_t>> fence_at = fenced.get_future().get();
    // From here on the call has taken effect: a failure says so (DEADLINE_EXCEEDED, never a
    // code that promises nothing changed).
    if (!fence_at.ok()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "epoch ", epoch, " of namespace ", ns_id, " was recorded but its fence was not written (",
          fence_at.status().ToString(), "); acquire again"));
    }
    // 3. Where the fence lies, so that reads starting after it know the epoch it set.
    state = meta_->RecordFence(ns_id, Fence{epoch, static_cast<int64_t>((*fence_at)[0])}, deadline);
    if (!state.ok()) {
      return absl::DeadlineExceededError(absl::StrCat("epoch ", epoch, " of namespace ", ns_id,
                                                      " and its fence were written, but not where "
                                                      "the fence lies (",
                                                      state.status().ToString(),
                                                      "); acquire again"));
    }
    auto end = SlotEnd(state->slot, deadline);
    if (!end.ok()) {
      return absl::DeadlineExceededError(
          absl::StrCat("namespace ", ns_id, " was acquired with epoch ", epoch,
                       ", but its end was not read (", end.status().ToString(), ")"));
    }
    Fill(*state, *end, response->mutable_namespace_());
    response->set_epoch(epoch);
    spdlog::info("namespace {} acquired with epoch {}, fence at offset {}", ns_id, epoch,
                 (*fence_at)[0]);
    return absl::OkStatus();
  });
}

}  // namespace wal
