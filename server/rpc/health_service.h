// grpc.health.v1.Health for walserver: SERVING while the namespace table is being kept up to
// date from Kafka, NOT_SERVING otherwise. Check is served; Watch answers UNIMPLEMENTED, which
// gRPC clients take to mean "poll Check instead".
#pragma once

#include <functional>

#include "absl/status/status.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace wal {

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  explicit HealthService(std::function<absl::Status()> health) : health_(std::move(health)) {}

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;

 private:
  std::function<absl::Status()> health_;
};

}  // namespace wal
