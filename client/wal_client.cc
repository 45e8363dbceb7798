#include "client/wal_client.h"

#include "grpcpp/create_channel.h"

namespace wal {

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

void Client::SetDeadline(grpc::ClientContext& ctx, std::chrono::milliseconds timeout) const {
  if (timeout.count() == 0) timeout = options_.timeout;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
}

absl::StatusOr<CreateNamespaceResult> Client::CreateNamespace(uint64_t namespace_id) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, options_.timeout);
  v1::CreateNamespaceRequest request;
  request.set_namespace_id(namespace_id);
  v1::CreateNamespaceResponse response;
  if (auto s = FromGrpcStatus(stub_->CreateNamespace(&ctx, request, &response)); !s.ok()) return s;
  return CreateNamespaceResult{response.namespace_(), response.created()};
}

absl::StatusOr<std::vector<uint64_t>> Client::Append(const v1::AppendRequest& request) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, options_.timeout);
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

absl::Status Client::Read(const ReadOptions& options,
                          const std::function<bool(v1::Entry& entry)>& on_entry) {
  grpc::ClientContext ctx;
  if (options.timeout.count() != 0 || !options.follow) SetDeadline(ctx, options.timeout);
  v1::ReadRequest request;
  request.set_namespace_id(options.namespace_id);
  request.set_start_entry_id(options.start_entry_id);
  request.set_limit(options.limit);
  request.set_follow(options.follow);
  std::unique_ptr<grpc::ClientReader<v1::ReadResponse>> reader = stub_->Read(&ctx, request);
  v1::ReadResponse response;
  while (reader->Read(&response)) {
    for (v1::Entry& entry : *response.mutable_entries()) {
      if (!on_entry(entry)) {
        ctx.TryCancel();
        reader->Finish();  // drains and reports CANCELLED, which we asked for
        return absl::OkStatus();
      }
    }
  }
  return FromGrpcStatus(reader->Finish());
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
  grpc::ClientContext ctx;
  SetDeadline(ctx, options_.timeout);
  v1::TruncateRequest request;
  request.set_namespace_id(namespace_id);
  request.set_entry_id(entry_id);
  v1::TruncateResponse response;
  if (auto s = FromGrpcStatus(stub_->Truncate(&ctx, request, &response)); !s.ok()) return s;
  return response.namespace_();
}

absl::StatusOr<v1::Namespace> Client::GetNamespace(uint64_t namespace_id) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, options_.timeout);
  v1::GetNamespaceRequest request;
  request.set_namespace_id(namespace_id);
  v1::GetNamespaceResponse response;
  if (auto s = FromGrpcStatus(stub_->GetNamespace(&ctx, request, &response)); !s.ok()) return s;
  return response.namespace_();
}

absl::StatusOr<std::vector<v1::Namespace>> Client::ListNamespaces() {
  std::vector<v1::Namespace> all;
  v1::ListNamespacesRequest request;
  do {
    grpc::ClientContext ctx;
    SetDeadline(ctx, options_.timeout);
    v1::ListNamespacesResponse response;
    if (auto s = FromGrpcStatus(stub_->ListNamespaces(&ctx, request, &response)); !s.ok()) {
      return s;
    }
    for (v1::Namespace& ns : *response.mutable_namespaces()) all.push_back(std::move(ns));
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty());
  return all;
}

absl::Status Client::DeleteNamespace(uint64_t namespace_id) {
  grpc::ClientContext ctx;
  SetDeadline(ctx, options_.timeout);
  v1::DeleteNamespaceRequest request;
  request.set_namespace_id(namespace_id);
  v1::DeleteNamespaceResponse response;
  return FromGrpcStatus(stub_->DeleteNamespace(&ctx, request, &response));
}

}  // namespace wal
