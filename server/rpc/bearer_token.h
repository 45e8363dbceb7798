// walserver's authentication: with a token configured, every call must carry the metadata
// "authorization: Bearer <token>"; every RPC asks Check() before it does anything else.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "grpcpp/server_context.h"

namespace wal {

class BearerToken {
 public:
  // An empty token admits every call.
  explicit BearerToken(std::string token) : expected_(token.empty() ? "" : "Bearer " + token) {}

  // OK, or UNAUTHENTICATED saying what is missing or wrong.
  absl::Status Check(const grpc::CallbackServerContext& ctx) const;

 private:
  const std::string expected_;  // the whole metadata value; empty for no token
};

}  // namespace wal
