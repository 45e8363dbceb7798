#include "server/rpc/callback_threads_awake.h"

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "server/common/metrics.h"

namespace wal {

CallbackThreadsAwake::CallbackThreadsAwake(grpc::Server* server) {
  std::shared_ptr<grpc::Channel> channel = server->InProcessChannel(grpc::ChannelArguments());
  thread_ = std::thread([this, channel] {
    auto stub = grpc::health::v1::Health::NewStub(channel);
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, kInterval, [this] { return stop_; })) {
      lock.unlock();
      grpc::ClientContext ctx;
      ctx.AddMetadata(kInternalCallKey, InternalCallToken());
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
      grpc::health::v1::HealthCheckRequest request;
      grpc::health::v1::HealthCheckResponse response;
      (void)stub->Check(&ctx, request, &response);  // only its work on the server matters
      lock.lock();
    }
  });
}

CallbackThreadsAwake::~CallbackThreadsAwake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

}  // namespace wal
