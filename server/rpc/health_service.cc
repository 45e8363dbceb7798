#include "server/rpc/health_service.h"

namespace wal {

using grpc::health::v1::HealthCheckResponse;

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* ctx,
                                               const grpc::health::v1::HealthCheckRequest* request,
                                               HealthCheckResponse* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (!request->service().empty() && request->service() != "wal.v1.WalService") {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service '" + request->service() + "'"));
    return reactor;
  }
  response->set_status(health_().ok() ? HealthCheckResponse::SERVING
                                      : HealthCheckResponse::NOT_SERVING);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace wal
