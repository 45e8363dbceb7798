#include "server/rpc/bearer_token.h"

namespace wal {

absl::Status BearerToken::Check(const grpc::CallbackServerContext& ctx) const {
  if (expected_.empty()) return absl::OkStatus();
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        "this walserver requires a bearer token: send metadata 'authorization: Bearer <token>'");
  }
  const grpc::string_ref& got = it->second;
  // Compare in constant time, so that the answer's timing does not reveal the token.
  unsigned char diff = got.size() != expected_.size();
  for (size_t i = 0; i < expected_.size(); ++i) {
    diff |= static_cast<unsigned char>(expected_[i] ^ (i < got.size() ? got.data()[i] : 0));
  }
  if (diff != 0) return absl::UnauthenticatedError("the bearer token is not valid");
  return absl::OkStatus();
}

}  // namespace wal
