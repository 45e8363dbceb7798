// libFuzzer target for request handling: the input, read as an AppendRequest and as a
// ReadRequest, goes through a real gRPC channel to an in-process walserver on the mock cluster.
// Whatever the bytes, the answer must be one of the codes the contract allows for bad input,
// never INTERNAL or UNKNOWN, and the server must not crash.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "grpcpp/create_channel.h"
#include "server/wal_server.h"
#include "spdlog/spdlog.h"
#include "wal/v1/wal.grpc.pb.h"

namespace {

struct Fixture {
  std::unique_ptr<wal::WalServer> server;
  std::unique_ptr<wal::v1::WalService::Stub> stub;
};

Fixture& Get() {
  static Fixture* fixture = [] {
    spdlog::set_level(spdlog::level::err);
    wal::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.http_listen = "";
    options.topic_count = 1;
    options.partitions_per_topic = 2;
    options.max_entry_bytes = 64 * 1024;
    auto server = wal::WalServer::Start(options);
    if (!server.ok()) {
      std::fprintf(stderr, "walserver: %s\n", server.status().ToString().c_str());
      std::abort();
    }
    auto* f = new Fixture;
    f->server = std::move(*server);
    f->stub = wal::v1::WalService::NewStub(
        grpc::CreateChannel(f->server->address(), grpc::InsecureChannelCredentials()));
    for (uint64_t ns : {1, 2, 3}) {
      grpc::ClientContext ctx;
      wal::v1::CreateNamespaceRequest request;
      request.set_namespace_id(ns);
      wal::v1::CreateNamespaceResponse response;
      if (!f->stub->CreateNamespace(&ctx, request, &response).ok()) std::abort();
    }
    return f;
  }();
  return *fixture;
}

void Expect(const grpc::Status& status, std::initializer_list<grpc::StatusCode> allowed,
            const char* rpc) {
  for (grpc::StatusCode code : allowed) {
    if (status.error_code() == code) return;
  }
  std::fprintf(stderr, "%s answered %d: %s\n", rpc, status.error_code(),
               status.error_message().c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = Get();
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(2);
  wal::v1::AppendRequest append;
  if (append.ParseFromArray(data, static_cast<int>(size))) {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    wal::v1::AppendResponse response;
    const grpc::Status status = f.stub->Append(&ctx, append, &response);
    Expect(status,
           {grpc::StatusCode::OK, grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::NOT_FOUND,
            grpc::StatusCode::FAILED_PRECONDITION, grpc::StatusCode::RESOURCE_EXHAUSTED,
            grpc::StatusCode::UNAVAILABLE},
           "Append");
    if (status.ok() && response.entry_ids_size() != append.entries_size()) std::abort();
  }
  wal::v1::ReadRequest read;
  if (read.ParseFromArray(data, static_cast<int>(size))) {
    read.set_follow(false);  // a following read would wait for its deadline
    if (read.limit() == 0 || read.limit() > 16) read.set_limit(16);
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    auto reader = f.stub->Read(&ctx, read);
    wal::v1::ReadResponse batch;
    while (reader->Read(&batch)) {
    }
    Expect(reader->Finish(),
           {grpc::StatusCode::OK, grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::NOT_FOUND,
            grpc::StatusCode::OUT_OF_RANGE, grpc::StatusCode::RESOURCE_EXHAUSTED,
            grpc::StatusCode::DEADLINE_EXCEEDED},
           "Read");
  }
  return 0;
}
