#include "server/rpc/callback_threads_awake.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "absl/strings/match.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/common/metrics.h"
#include "server/rpc/health_service.h"

namespace wal {
namespace {

// A server with walserver's health service (counting its checks) and metrics interceptor.
class AwakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    health_ = std::make_unique<HealthService>([this] {
      ++checks_;
      return absl::OkStatus();
    });
    grpc::ServerBuilder builder;
    builder.RegisterService(health_.get());
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
    f.push_back(std::make_unique<MetricsInterceptorFactory>(&metrics_));
    builder.experimental().SetInterceptorCreators(std::move(f));
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override { server_->Shutdown(); }

  // Waits (bounded) until the health service has answered `n` checks.
  bool WaitForChecks(int n) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (checks_.load() < n) {
      if (std::chrono::steady_clock::now() > give_up) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }

  Metrics metrics_;
  std::atomic<int> checks_{0};
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(AwakeTest, CallsTheServerOverAndOverUntilDestroyedAndIsNotCounted) {
  auto awake = std::make_unique<CallbackThreadsAwake>(server_.get());
  ASSERT_TRUE(WaitForChecks(3)) << "only " << checks_.load() << " calls";
  awake.reset();  // returns only once its thread is joined: no call starts after this
  EXPECT_FALSE(absl::StrContains(metrics_.Render(), "method=\"Check\"")) << metrics_.Render();

  // A caller's own check is counted, even one that names the key without this process's token,
  // so the line above would have seen a counted call.
  auto stub =
      grpc::health::v1::Health::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  grpc::ClientContext ctx;
  ctx.AddMetadata(kInternalCallKey, "a guess");
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(stub->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &response).ok());
  EXPECT_TRUE(absl::StrContains(metrics_.Render(),
                                "walserver_rpc_calls_total{method=\"Check\",code=\"OK\"} 1\n"))
      << metrics_.Render();
}

}  // namespace
}  // namespace wal
