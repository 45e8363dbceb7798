#include "client/wal_client.h"

#include <random>
#include <thread>

#include "grpcpp/create_channel.h"

namespace wal {

using std::chrono::system_clock;

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode share their numbering.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  if (options.target.empty()) return absl::InvalidArgumentError("no walserver address given");
  grpc::ChannelArguments args;
  // Entries up to the server's limit (64 MiB by default) travel whole; the server enforces it.
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  auto channel =
      grpc::CreateCustomChannel(options.target, grpc::InsecureChannelCredentials(), args);
  return std::unique_ptr<Client>(new Client(options, v1::WalService::NewStub(channel)));
}

system_clock::time_point Client::Deadline(std::chrono::milliseconds timeout) const {
  return system_clock::now() + (timeout.count() == 0 ? options_.timeout : timeout);
}

absl::Status Client::WithRetries(system_clock::time_point deadline,
                                 const std::function<grpc::Status(grpc::ClientContext&)>& attempt) {
  thread_local std::mt19937 rng(std::random_device{}());
  auto backoff = options_.retry_backoff;
  for (int retry = 0;; ++retry) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    const grpc::Status status = attempt(ctx);
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE || retry >= options_.max_retries) {
      return FromGrpcStatus(status);
    }
    // Full jitter, so that many clients do not retry in step.
    const auto sleep = std::chrono::milliseconds(
        std::uniform_int_distribution<int64_t>(backoff.count() / 2, backoff.count())(rng));
    if (system_clock::now() + sleep >= deadline) return FromGrpcStatus(status);
    std::this_thread::sleep_for(sleep);
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(2));
  }
}

absl::StatusOr<CreateNamespaceResult> Client::CreateNamespace(uint64_t namespace_id) {
  v1::CreateNamespaceRequest request;
  request.set_namespace_id(namespace_id);
  v1::CreateNamespaceResponse response;
  absl::Status s = WithRetries(Deadline(options_.timeout), [&](grpc::ClientContext& ctx) {
    return stub_->CreateNamespace(&ctx, request, &response);
  });
  if (!s.ok()) return s;
  return CreateNamespaceResult{response.namespace_(), response.created()};
}

absl::StatusOr<std::vector<uint64_t>> Client::Append(const v1::AppendRequest& request) {
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(options_.timeout));
  v1::AppendResponse response;
  if (auto s = FromGrpcStatus(stub_->Append(&ctx, request, &response)); !s.ok()) return s;
  return std::vector<uint64_t>(response.entry_ids().begin(), response.entry_ids().end());
}

absl::StatusOr<std::vector<uint64_t>> Client::Append(uint64_t namespace_id,
                                                     const std::vector<std::string>& entries) {
  v1::AppendRequest request;
  for (const std::string& data : entries) {
    v1::Entry* e = request.add_entries();
    e->set_namespace_id(namespace_id);
    e->set_data(data);
  }
  return Append(request);
}

void Client::AppendAsync(v1::AppendRequest request,
                         std::function<void(absl::StatusOr<std::vector<uint64_t>>)> done) {
  // Everything the call needs lives until its callback has run.
  struct Call {
    grpc::ClientContext ctx;
    v1::AppendRequest request;
    v1::AppendResponse response;
    std::function<void(absl::StatusOr<std::vector<uint64_t>>)> done;
  };
  auto* call = new Call;
  call->ctx.set_deadline(Deadline(options_.timeout));
  call->request = std::move(request);
  call->done = std::move(done);
  stub_->async()->Append(&call->ctx, &call->request, &call->response, [call](grpc::Status status) {
    if (status.ok()) {
      call->done(std::vector<uint64_t>(call->response.entry_ids().begin(),
                                       call->response.entry_ids().end()));
    } else {
      call->done(FromGrpcStatus(status));
    }
    delete call;
  });
}

ReadStream::~ReadStream() {
  if (!done_) {
    Cancel();
    reader_->Finish();
  }
}

bool ReadStream::Next(v1::Entry* entry) {
  while (next_in_batch_ >= batch_.entries_size()) {
    if (done_) return false;
    batch_.Clear();
    next_in_batch_ = 0;
    if (!reader_->Read(&batch_)) {
      done_ = true;
      status_ = FromGrpcStatus(reader_->Finish());
      return false;
    }
  }
  entry->Swap(batch_.mutable_entries(next_in_batch_++));
  return true;
}

void ReadStream::Cancel() { ctx_->TryCancel(); }

std::unique_ptr<ReadStream> Client::OpenRead(const ReadOptions& options) {
  std::unique_ptr<ReadStream> stream(new ReadStream());
  stream->ctx_ = std::make_unique<grpc::ClientContext>();
  if (options.timeout.count() != 0 || !options.follow) {
    stream->ctx_->set_deadline(Deadline(options.timeout));
  }
  v1::ReadRequest request;
  request.set_namespace_id(options.namespace_id);
  request.set_start_entry_id(options.start_entry_id);
  request.set_limit(options.limit);
  request.set_follow(options.follow);
  stream->reader_ = stub_->Read(stream->ctx_.get(), request);
  return stream;
}

absl::Status Client::Read(const ReadOptions& options,
                          const std::function<bool(v1::Entry& entry)>& on_entry) {
  const bool has_deadline = options.timeout.count() != 0 || !options.follow;
  const system_clock::time_point deadline = Deadline(options.timeout);
  auto backoff = options_.retry_backoff;
  for (int retry = 0;; ++retry) {
    ReadOptions attempt = options;
    if (has_deadline) {
      attempt.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::max(deadline - system_clock::now(), system_clock::duration(1)));
    }
    std::unique_ptr<ReadStream> stream = OpenRead(attempt);
    bool delivered = false;
    v1::Entry entry;
    while (stream->Next(&entry)) {
      delivered = true;
      if (!on_entry(entry)) return absl::OkStatus();  // the stream's destructor cancels it
    }
    const absl::Status status = stream->status();
    if (!absl::IsUnavailable(status) || delivered || retry >= options_.max_retries ||
        (has_deadline && system_clock::now() + backoff >= deadline)) {
      return status;
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min<std::chrono::milliseconds>(backoff * 2, std::chrono::seconds(2));
  }
}

absl::StatusOr<std::vector<v1::Entry>> Client::ReadAll(uint64_t namespace_id,
                                                       uint64_t start_entry_id, uint64_t limit) {
  std::vector<v1::Entry> entries;
  ReadOptions options;
  options.namespace_id = namespace_id;
  options.start_entry_id = start_entry_id;
  options.limit = limit;
  absl::Status status = Read(options, [&](v1::Entry& e) {
    entries.push_back(std::move(e));
    return true;
  });
  if (!status.ok()) return status;
  return entries;
}

absl::StatusOr<v1::Namespace> Client::Truncate(uint64_t namespace_id, uint64_t entry_id) {
  v1::TruncateRequest request;
  request.set_namespace_id(namespace_id);
  request.set_entry_id(entry_id);
  v1::TruncateResponse response;
  absl::Status s = WithRetries(Deadline(options_.timeout), [&](grpc::ClientContext& ctx) {
    return stub_->Truncate(&ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response.namespace_();
}

absl::StatusOr<v1::Namespace> Client::GetNamespace(uint64_t namespace_id) {
  v1::GetNamespaceRequest request;
  request.set_namespace_id(namespace_id);
  v1::GetNamespaceResponse response;
  absl::Status s = WithRetries(Deadline(options_.timeout), [&](grpc::ClientContext& ctx) {
    return stub_->GetNamespace(&ctx, request, &response);
  });
  if (!s.ok()) return s;
  return response.namespace_();
}

absl::StatusOr<std::vector<v1::Namespace>> Client::ListNamespaces() {
  std::vector<v1::Namespace> all;
  v1::ListNamespacesRequest request;
  const system_clock::time_point deadline = Deadline(options_.timeout);
  do {
    v1::ListNamespacesResponse response;
    absl::Status s = WithRetries(deadline, [&](grpc::ClientContext& ctx) {
      response.Clear();
      return stub_->ListNamespaces(&ctx, request, &response);
    });
    if (!s.ok()) return s;
    for (v1::Namespace& ns : *response.mutable_namespaces()) all.push_back(std::move(ns));
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  return all;
}

absl::Status Client::DeleteNamespace(uint64_t namespace_id) {
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(options_.timeout));
  v1::DeleteNamespaceRequest request;
  request.set_namespace_id(namespace_id);
  v1::DeleteNamespaceResponse response;
  return FromGrpcStatus(stub_->DeleteNamespace(&ctx, request, &response));
}

}  // namespace wal
