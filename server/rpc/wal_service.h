// The gRPC face of walserver (callback API): validates requests, then hands them to the
// namespace table (MetaStore), the EntryWriter or the EntryReader. All errors leave through
// ToGrpcStatus. The appends and reads are defined in wal_service.cc, the namespace calls in
// namespace_calls.cc.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/common/deadline.h"
#include "server/common/metrics.h"
#include "server/common/work_queue.h"
#include "server/kafka/slot_ends.h"
#include "server/log/entry_reader.h"
#include "server/log/entry_writer.h"
#include "server/log/retried_entries.h"
#include "server/meta/meta_store.h"
#include "server/meta/shared_catch_up.h"
#include "server/rpc/append_stages.h"
#include "server/rpc/append_stream.h"
#include "server/rpc/bearer_token.h"
#include "wal/v1/wal.grpc.pb.h"

namespace wal {

struct ServiceOptions {
  uint64_t max_entry_bytes = 64 << 20;
  uint64_t max_inflight_append_bytes = 256 << 20;
  // Upper bound on Kafka round trips of admin calls without a (shorter) deadline.
  std::chrono::milliseconds admin_timeout{10000};
  // Each admin call holds a thread while it waits on Kafka (~9 ms for a CreateNamespace): 4
  // threads kept 256 creations at once to ~500/s, 64 reach ~6,000/s.
  int admin_threads = 64;
  // When set, every call must carry "authorization: Bearer <auth_token>" (else UNAUTHENTICATED).
  std::string auth_token;
  // An append stage that takes longer is logged (AppendStages); zero logs none.
  std::chrono::milliseconds slow_append{100};
};

// Read and ReadMany are raw methods: their responses leave as the read path serialised them
// (log/read_batch.h), and their requests are parsed here (ParseRequest).
using WalServiceBase = v1::WalService::WithRawCallbackMethod_Read<
    v1::WalService::WithRawCallbackMethod_ReadMany<v1::WalService::CallbackService>>;

class WalServiceImpl final : public WalServiceBase {
 public:
  using AppendDone = std::function<void(absl::StatusOr<std::vector<uint64_t>>)>;

  // `kafka` is any client handle, used for watermark queries.
  WalServiceImpl(ServiceOptions options, MetaStore* meta, EntryWriter* writer,
                 RetriedEntries* retried, EntryReader* reader, rd_kafka_t* kafka, Metrics* metrics);

  grpc::ServerUnaryReactor* CreateNamespace(grpc::CallbackServerContext* ctx,
                                            const v1::CreateNamespaceRequest* request,
                                            v1::CreateNamespaceResponse* response) override;
  grpc::ServerUnaryReactor* Append(grpc::CallbackServerContext* ctx,
                                   const v1::AppendRequest* request,
                                   v1::AppendResponse* response) override;
  // A ReadRequest in, ReadResponses out.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Read(grpc::CallbackServerContext* ctx,
                                                   const grpc::ByteBuffer* request) override;
  grpc::ServerBidiReactor<v1::AppendStreamRequest, v1::AppendStreamResponse>* AppendStream(
      grpc::CallbackServerContext* ctx) override;
  // A ReadManyRequest in, ReadResponses out.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* ReadMany(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* raw) override;
  grpc::ServerUnaryReactor* Truncate(grpc::CallbackServerContext* ctx,
                                     const v1::TruncateRequest* request,
                                     v1::TruncateResponse* response) override;
  grpc::ServerUnaryReactor* GetNamespace(grpc::CallbackServerContext* ctx,
                                         const v1::GetNamespaceRequest* request,
                                         v1::GetNamespaceResponse* response) override;
  grpc::ServerUnaryReactor* ListNamespaces(grpc::CallbackServerContext* ctx,
                                           const v1::ListNamespacesRequest* request,
                                           v1::ListNamespacesResponse* response) override;
  grpc::ServerUnaryReactor* DeleteNamespace(grpc::CallbackServerContext* ctx,
                                            const v1::DeleteNamespaceRequest* request,
                                            v1::DeleteNamespaceResponse* response) override;
  grpc::ServerUnaryReactor* AcquireNamespace(grpc::CallbackServerContext* ctx,
                                             const v1::AcquireNamespaceRequest* request,
                                             v1::AcquireNamespaceResponse* response) override;
  grpc::ServerUnaryReactor* GetSlot(grpc::CallbackServerContext* ctx,
                                    const v1::GetSlotRequest* request,
                                    v1::GetSlotResponse* response) override;

  // For shutdown: every open AppendStream answers what it started, then ends UNAVAILABLE, so
  // that long-lived streams do not hold the grace period.
  void StopStreams();
  // For shutdown, once the grace is over: appends waiting for a catch-up of the namespace table
  // (an unknown namespace) fail UNAVAILABLE now, like those waiting on Kafka.
  void FailCatchUps() { catch_up_.Stop(); }

  // Entry bytes of appends waiting for Kafka, and the most there may be (--max_inflight_append_
  // bytes): for /metrics.
  uint64_t inflight_append_bytes() const { return inflight_append_bytes_->load(); }
  uint64_t max_inflight_append_bytes() const { return options_.max_inflight_append_bytes; }

  // Most namespaces one ReadMany may name.
  static constexpr int kMaxReadManyNamespaces = 1000;
  // For shutdown, after the writer failed what it held: waits until every AppendStream reactor
  // is gone (their appends' completions use this service). False if some are left at
  // `deadline`: the service must then not be destroyed.
  bool WaitForStreams(Clock::time_point deadline);

 private:
  // Checks one append and starts it; `done` runs exactly once, with the ids or why not. Shared
  // by Append and AppendStream.
  void DoAppend(std::shared_ptr<const v1::AppendRequest> request, Clock::time_point deadline,
                Clock::time_point admin_deadline, AppendDone done);
  // Checks every entry of an append and builds its items: a bad request writes nothing.
  // `epoch_ahead` is set when an entry carries an epoch above the one this server knows (an
  // acquisition through another server that the table has not caught up with yet).
  absl::Status PrepareAppend(const v1::AppendRequest& request, std::vector<AppendItem>* items,
                             bool* epoch_ahead);
  // Answers an append that will not reach the writer with `status`, ending its start stage.
  void Refuse(Clock::time_point arrived, const AppendDone& done, absl::Status status);
  // Hands prepared items to the writer (after the in-flight cap); `done` runs exactly once.
  // `arrived`: when the server read the append, for its start stage.
  // `claim` holds the stamped items' sequences until their records are reported.
  void StartAppend(Clock::time_point arrived, Clock::time_point deadline,
                   std::vector<AppendItem> items, std::shared_ptr<RetriedEntries::Claim> claim,
                   AppendDone done);
  // Writes a first attempt; a retry (or an append whose entries are in flight here already)
  // first looks for the copies written before, and writes only the others.
  void WriteOnce(Clock::time_point arrived, Clock::time_point deadline,
                 std::shared_ptr<const v1::AppendRequest> request, std::vector<AppendItem> items,
                 AppendDone done);
  // The rest of a retry once its lookup ended: the items not found are checked again (the
  // namespace may have been acquired away meanwhile) and written under `claim`.
  void WriteNotFound(Clock::time_point arrived, Clock::time_point deadline,
                     const v1::AppendRequest& request, absl::StatusOr<RetriedEntries::Found> found,
                     std::shared_ptr<RetriedEntries::Claim> claim, AppendDone done);
  // Runs `work` on the admin pool and finishes the call with its status.
  grpc::ServerUnaryReactor* Defer(grpc::CallbackServerContext* ctx,
                                  std::function<absl::Status(Clock::time_point)> work);
  // How long an admin call (or an append's catch-up with the metadata topic) may wait on Kafka
  // for a caller whose deadline is `caller`.
  Clock::time_point AdminDeadline(Clock::time_point caller) const;
  // The namespace; when this server does not know it, after catching up with the metadata topic
  // (it may have been created through another server a moment ago). NOT_FOUND if still unknown.
  absl::StatusOr<NamespaceState> Lookup(uint64_t namespace_id, Clock::time_point deadline) const;
  // The slot's end offset (next_entry_id of every namespace in it).
  absl::StatusOr<int64_t> SlotEnd(const Slot& slot, Clock::time_point deadline) const;
  void Fill(const NamespaceState& state, int64_t slot_end, v1::Namespace* out) const;

  const ServiceOptions options_;
  const BearerToken auth_{options_.auth_token};
  MetaStore* const meta_;
  EntryWriter* const writer_;
  RetriedEntries* const retried_;
  EntryReader* const reader_;
  mutable SlotEnds slot_ends_;  // on `kafka`
  Metrics* const metrics_;
  AppendStages stages_;
  // Shared with the appends holding bytes, which may outlive the service.
  const std::shared_ptr<std::atomic<uint64_t>> inflight_append_bytes_ =
      std::make_shared<std::atomic<uint64_t>>(0);
  std::mutex streams_mu_;
  std::set<AppendStreamReactor*> streams_ ABSL_GUARDED_BY(streams_mu_);
  bool streams_stopped_ ABSL_GUARDED_BY(streams_mu_) = false;
  std::condition_variable streams_cv_;
  WorkQueue admin_pool_;
  // For appends naming a namespace or epoch this server has not seen. Last, so that it is
  // stopped first: its answers use the members above.
  SharedCatchUp catch_up_{[this](Clock::time_point deadline) { return meta_->CatchUp(deadline); }};
};

// The caller's deadline on the steady clock (time_point::max() when there is none).
Clock::time_point SteadyDeadline(const grpc::CallbackServerContext& ctx);

}  // namespace wal
