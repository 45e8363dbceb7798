#include "server/rpc/wal_service.h"

#include <algorithm>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "server/common/crc32c.h"
#include "server/common/deadline.h"
#include "server/kafka/admin.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/read_stream.h"
#include "server/rpc/request_checks.h"
#include "spdlog/spdlog.h"

namespace wal {
namespace {

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
                               RetriedEntries* retried, EntryReader* reader, rd_kafka_t* kafka,
                               Metrics* metrics)
    : options_(options),
      meta_(meta),
      writer_(writer),
      retried_(retried),
      reader_(reader),
      slot_ends_(kafka),
      metrics_(metrics),
      stages_(metrics, options_.slow_append),
      admin_pool_(options.admin_threads) {}

Clock::time_point WalServiceImpl::AdminDeadline(Clock::time_point caller) const {
  return Within(AnswerBy(caller), options_.admin_timeout);
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

absl::StatusOr<NamespaceState> WalServiceImpl::Lookup(uint64_t namespace_id,
                                                      Clock::time_point deadline) const {
  if (std::optional<NamespaceState> state = meta_->Get(namespace_id)) return *state;
  // Perhaps created through another server a moment ago.
  if (absl::Status s = meta_->CatchUp(deadline); !s.ok()) return s;
  if (std::optional<NamespaceState> state = meta_->Get(namespace_id)) return *state;
  return NotFound(namespace_id);
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
      return CheckId(0, absl::StrCat("entries[", i, "]."));
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
                                 std::vector<AppendItem> items,
                                 std::shared_ptr<RetriedEntries::Claim> claim, AppendDone done) {
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
  // So is the claim on the entries' sequences: a retry waits for the records' outcome.
  writer_->Append(std::move(items), deadline,
                  [this, bytes, handed, held = std::move(held), claim = std::move(claim),
                   done = std::move(done)](absl::StatusOr<std::vector<uint64_t>> ids) {
                    stages_.Record(AppendStage::kKafka, Clock::now() - handed);
                    --metrics_->appends_in_flight;
                    if (ids.ok()) {
                      metrics_->append_bytes += bytes;
                      metrics_->append_entries += ids->size();
                      claim->Written(*ids);
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
    WriteOnce(arrived, deadline, std::move(request), std::move(items), std::move(done));
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
    WriteOnce(arrived, deadline, request, std::move(items), std::move(done));
  });
}

void WalServiceImpl::WriteOnce(Clock::time_point arrived, Clock::time_point deadline,
                               std::shared_ptr<const v1::AppendRequest> request,
                               std::vector<AppendItem> items, AppendDone done) {
  if (Clock::now() >= deadline) {
    // Nobody waits for its answer any more, and its appender may have retried already: a retry
    // that found no copy would then be followed by this one's.
    Refuse(arrived, done,
           absl::DeadlineExceededError(
               "the append reached the writer after its deadline; nothing was written"));
    return;
  }
  const bool stamped = std::any_of(items.begin(), items.end(), IsStamped);
  if (request->first_attempt_age_ms() == 0 || !stamped) {
    if (std::shared_ptr<RetriedEntries::Claim> claim = retried_->ClaimFirstAttempt(items)) {
      StartAppend(arrived, deadline, std::move(items), std::move(claim), std::move(done));
      return;
    }
    // Its entries are claimed already: a retry that does not say so, or an entry twice.
  }
  if (HasRepeatedEntry(items)) {
    Refuse(arrived, done,
           absl::InvalidArgumentError(
               "the append carries an entry (namespace, sequence) twice; nothing was written"));
    return;
  }
  ++metrics_->append_retries_looked_up;
  // When the first attempt was sent, by this walserver's clock: its age counts from the arrival.
  int64_t first_attempt_ms = 0;
  if (request->first_attempt_age_ms() > 0) {
    const auto since_arrival =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - arrived).count();
    first_attempt_ms =
        UnixNowMs() - since_arrival - static_cast<int64_t>(request->first_attempt_age_ms());
  }
  std::vector<AppendItem> looked_up = items;  // views into `request`, which the lambda keeps
  retried_->Look(std::move(looked_up), first_attempt_ms, deadline,
                 [this, request, arrived, deadline, done = std::move(done)](
                     absl::StatusOr<RetriedEntries::Found> found,
                     std::shared_ptr<RetriedEntries::Claim> claim) mutable {
                   WriteNotFound(arrived, deadline, *request, std::move(found), std::move(claim),
                                 std::move(done));
                 });
}

void WalServiceImpl::WriteNotFound(Clock::time_point arrived, Clock::time_point deadline,
                                   const v1::AppendRequest& request,
                                   absl::StatusOr<RetriedEntries::Found> found,
                                   std::shared_ptr<RetriedEntries::Claim> claim, AppendDone done) {
  if (!found.ok()) {
    Refuse(arrived, done, found.status());
    return;
  }
  // The lookup took time: the append may have run out of it, or its namespace been acquired by
  // another writer meanwhile (whose fence the rest would land behind).
  if (Clock::now() >= deadline) {
    Refuse(arrived, done,
           absl::DeadlineExceededError(
               "the retry's deadline passed while it looked for its first copies; nothing was "
               "written"));
    return;
  }
  std::vector<AppendItem> items;
  bool epoch_ahead = false;
  if (absl::Status s = PrepareAppend(request, &items, &epoch_ahead); !s.ok()) {
    Refuse(arrived, done, std::move(s));
    return;
  }
  std::vector<AppendItem> rest;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!(*found)[i]) rest.push_back(items[i]);
  }
  metrics_->append_retried_entries_found += items.size() - rest.size();
  // Every id: the found ones, and the written ones in their places.
  auto merge = [found = *std::move(found)](std::vector<uint64_t> written) {
    std::vector<uint64_t> ids;
    ids.reserve(found.size());
    size_t next = 0;
    for (const std::optional<uint64_t>& id : found) ids.push_back(id ? *id : written[next++]);
    return ids;
  };
  if (rest.empty()) {
    stages_.Record(AppendStage::kStart, Clock::now() - arrived);
    done(merge({}));
    return;
  }
  StartAppend(arrived, deadline, std::move(rest), std::move(claim),
              [merge = std::move(merge),
               done = std::move(done)](absl::StatusOr<std::vector<uint64_t>> ids) {
                if (!ids.ok()) {
                  done(ids.status());
                  return;
                }
                done(merge(*std::move(ids)));
              });
}

grpc::ServerUnaryReactor* WalServiceImpl::Append(grpc::CallbackServerContext* ctx,
                                                 const v1::AppendRequest* request,
                                                 v1::AppendResponse* response) {
  if (absl::Status s = auth_.Check(*ctx); !s.ok()) return FinishNow(ctx, s);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // gRPC keeps the request until the call finishes, which is after `done` ran.
  std::shared_ptr<const v1::AppendRequest> unowned(request, [](const v1::AppendRequest*) {});
  const Clock::time_point deadline = SteadyDeadline(*ctx);
  DoAppend(std::move(unowned), deadline, AdminDeadline(deadline),
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

grpc::ServerWriteReactor<grpc::ByteBuffer>* WalServiceImpl::Read(grpc::CallbackServerContext* ctx,
                                                                 const grpc::ByteBuffer* raw) {
  auto* reactor = new ReadStreamReactor();
  absl::Status status = auth_.Check(*ctx);
  v1::ReadRequest request;
  if (status.ok()) status = ParseRequest(raw, &request);
  if (status.ok()) {
    absl::StatusOr<ReadParams> params =
        ReadParamsFrom(request, request.follow(), SteadyDeadline(*ctx));
    status = params.ok() ? reader_->Start(*params, reactor->sink()) : params.status();
  }
  if (!status.ok()) reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerBidiReactor<v1::AppendStreamRequest, v1::AppendStreamResponse>*
WalServiceImpl::AppendStream(grpc::CallbackServerContext* ctx) {
  if (absl::Status s = auth_.Check(*ctx); !s.ok()) return new RefusedStream(s);
  std::lock_guard<std::mutex> lock(streams_mu_);
  if (streams_stopped_) {
    return new RefusedStream(absl::UnavailableError("walserver is shutting down"));
  }
  auto* stream = new AppendStreamReactor(
      [this](std::shared_ptr<const v1::AppendRequest> request, Clock::time_point deadline,
             AppendDone done) {
        DoAppend(std::move(request), deadline, AdminDeadline(deadline), std::move(done));
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

grpc::ServerWriteReactor<grpc::ByteBuffer>* WalServiceImpl::ReadMany(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw) {
  auto* reactor = new ReadStreamReactor();
  absl::Status status = auth_.Check(*ctx);
  v1::ReadManyRequest parsed;
  if (status.ok()) status = ParseRequest(raw, &parsed);
  const v1::ReadManyRequest* request = &parsed;
  if (status.ok() && request->has_slot()) {
    const Slot slot{request->slot().topic(), request->slot().partition()};
    absl::StatusOr<ReadParams> params = SlotReadParamsFrom(*request, SteadyDeadline(*ctx));
    status = params.ok() ? meta_->CheckOurSlot(slot) : params.status();
    if (status.ok()) status = reader_->StartSlot(slot, *params, reactor->sink());
    if (!status.ok()) reactor->Finish(ToGrpcStatus(status));
    return reactor;
  }
  if (status.ok() && request->reads_size() > kMaxReadManyNamespaces) {
    status =
        absl::InvalidArgumentError(absl::StrCat("a ReadMany names at most ", kMaxReadManyNamespaces,
                                                " namespaces, not ", request->reads_size()));
  }
  std::vector<ReadParams> reads;
  std::set<uint64_t> seen;
  for (int i = 0; status.ok() && i < request->reads_size(); ++i) {
    const v1::ReadRequest& read = request->reads(i);
    absl::StatusOr<ReadParams> params = ReadParamsFrom(
        read, request->follow(), SteadyDeadline(*ctx), absl::StrCat("reads[", i, "]."));
    if (!params.ok()) {
      status = params.status();
    } else if (!seen.insert(read.namespace_id()).second) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "reads[", i, "]: namespace ", read.namespace_id(), " is named twice in one ReadMany"));
    } else {
      reads.push_back(*std::move(params));
    }
  }
  if (status.ok()) status = reader_->StartMany(std::move(reads), reactor->sink());
  if (!status.ok()) reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace wal
