// The namespace calls of WalServiceImpl (wal_service.h): creating, looking up, listing,
// truncating, deleting and acquiring namespaces, and looking up a slot. Each is checked here,
// then runs on the admin pool (Defer) with the call's deadline, bounded by --admin_timeout_ms.
// The append and read calls are in wal_service.cc.
#include <map>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/kafka/admin.h"
#include "server/log/fencing.h"
#include "server/rpc/grpc_status.h"
#include "server/rpc/request_checks.h"
#include "server/rpc/wal_service.h"
#include "spdlog/spdlog.h"

namespace wal {

grpc::ServerUnaryReactor* WalServiceImpl::Defer(
    grpc::CallbackServerContext* ctx, std::function<absl::Status(Clock::time_point)> work) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const Clock::time_point deadline = AdminDeadline(SteadyDeadline(*ctx));
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
  if (absl::Status s = auth_.Check(*ctx); !s.ok()) return FinishNow(ctx, s);
  if (absl::Status s = CheckId(request->namespace_id()); !s.ok()) return FinishNow(ctx, s);
  std::optional<Slot> wanted;
  if (!request->topic().empty()) {
    wanted = Slot{request->topic(), request->partition()};
  } else if (request->partition() != 0) {
    return FinishNow(ctx, absl::InvalidArgumentError(
                              "CreateNamespace: a partition was given without its topic"));
  }
  return Defer(ctx, [this, request, response, wanted](Clock::time_point deadline) -> absl::Status {
    auto result = meta_->Create(
        request->namespace_id(), wanted, [&](const Slot& slot) { return SlotEnd(slot, deadline); },
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

grpc::ServerUnaryReactor* WalServiceImpl::Truncate(grpc::CallbackServerContext* ctx,
                                                   const v1::TruncateRequest* request,
                                                   v1::TruncateResponse* response) {
  if (absl::Status s = auth_.Check(*ctx); !s.ok()) return FinishNow(ctx, s);
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
    // Truncating to 0, or to the first entry id or below it, changes nothing: no record is
    // written (a datanode obsoletes each region it opens, new ones too).
    if (static_cast<int64_t>(entry_id) > state->first_entry_id()) {
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
  if (absl::Status s = auth_.Check(*ctx); !s.ok()) return FinishNow(ctx, s);
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
  if (absl::Status s = auth_.Check(*ctx); !s.ok()) return FinishNow(ctx, s);
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
  if (absl::Status s = auth_.Check(*ctx); !s.ok()) return FinishNow(ctx, s);
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
  if (absl::Status s = auth_.Check(*ctx); !s.ok()) return FinishNow(ctx, s);
  if (absl::Status s = CheckId(request->namespace_id()); !s.ok()) return FinishNow(ctx, s);
  return Defer(ctx, [this, request, response](Clock::time_point deadline) -> absl::Status {
    const uint64_t ns_id = request->namespace_id();
    if (auto known = Lookup(ns_id, deadline); !known.ok()) return known.status();
    absl::StatusOr<Acquired> acquired = AcquireAndFence(*meta_, *writer_, ns_id, deadline);
    if (!acquired.ok()) return acquired.status();
    const uint64_t epoch = acquired->epoch;
    const NamespaceState& state = acquired->state;
    auto end = SlotEnd(state.slot, deadline);
    if (!end.ok()) {
      return absl::DeadlineExceededError(
          absl::StrCat("namespace ", ns_id, " was acquired with epoch ", epoch,
                       ", but its end was not read (", end.status().ToString(), ")"));
    }
    Fill(state, *end, response->mutable_namespace_());
    response->set_epoch(epoch);
    spdlog::info("namespace {} acquired with epoch {}, fence at offset {}", ns_id, epoch,
                 acquired->fence_offset);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WalServiceImpl::GetSlot(grpc::CallbackServerContext* ctx,
                                                  const v1::GetSlotRequest* request,
                                                  v1::GetSlotResponse* response) {
  if (absl::Status s = auth_.Check(*ctx); !s.ok()) return FinishNow(ctx, s);
  const Slot slot{request->topic(), request->partition()};
  if (absl::Status s = meta_->CheckOurSlot(slot); !s.ok()) return FinishNow(ctx, s);
  return Defer(ctx, [this, slot, response](Clock::time_point deadline) -> absl::Status {
    absl::StatusOr<Watermarks> marks = QueryWatermarks(meta_->watermarks_client(), slot, deadline);
    if (!marks.ok()) return marks.status();
    response->set_topic(slot.topic);
    response->set_partition(slot.partition);
    response->set_low_offset(static_cast<uint64_t>(marks->low));
    response->set_next_entry_id(static_cast<uint64_t>(marks->high));
    response->set_namespace_count(static_cast<uint32_t>(meta_->InSlot(slot).size()));
    return absl::OkStatus();
  });
}

}  // namespace wal
