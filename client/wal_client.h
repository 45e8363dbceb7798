// walclient: the C++ client of walserver for datanodes.
//
// Every call blocks the calling thread until walserver answers or the call's deadline passes
// (ClientOptions::timeout unless said otherwise), and returns errors as absl::Status with the
// gRPC code of the server's answer:
//   INVALID_ARGUMENT  malformed request (namespace id 0, no entries, entry over the size limit)
//   NOT_FOUND         unknown or deleted namespace
//   OUT_OF_RANGE      start or truncation point past the end, or a start below first_entry_id
//   DATA_LOSS         records that were never truncated are gone from Kafka
//   UNAVAILABLE       Kafka or walserver unreachable; safe to retry
//   RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, INTERNAL
// A Client is thread-safe: calls from many threads share one channel.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "wal/v1/wal.grpc.pb.h"

namespace wal {

struct ClientOptions {
  // gRPC target of walserver, for example "127.0.0.1:50051".
  std::string target = "127.0.0.1:50051";
  // Deadline of each call unless the call says otherwise.
  std::chrono::milliseconds timeout{30000};
};

struct CreateNamespaceResult {
  v1::Namespace ns;
  bool created = false;  // false: it existed already, `ns` is its assignment
};

struct ReadOptions {
  uint64_t namespace_id = 0;
  uint64_t start_entry_id = 0;  // 0: from first_entry_id
  uint64_t limit = 0;           // 0: no limit
  bool follow = false;          // keep receiving new entries until on_entry returns false
  // Deadline of the whole read; 0 means ClientOptions::timeout, or none for a follow read.
  std::chrono::milliseconds timeout{0};
};

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  // Idempotent: an existing namespace comes back with created=false.
  absl::StatusOr<CreateNamespaceResult> CreateNamespace(uint64_t namespace_id);

  // Appends the request's entries (several namespaces may share it) and returns their ids in
  // request order, once Kafka acknowledged all of them. On error a prefix may be durable.
  absl::StatusOr<std::vector<uint64_t>> Append(const v1::AppendRequest& request);
  // Appends `entries` to one namespace.
  absl::StatusOr<std::vector<uint64_t>> Append(uint64_t namespace_id,
                                               const std::vector<std::string>& entries);

  // Streams entries in id order to `on_entry`, on the calling thread, until the end of the log as
  // seen when the read began (or until on_entry returns false, or forever with follow).
  absl::Status Read(const ReadOptions& options,
                    const std::function<bool(v1::Entry& entry)>& on_entry);
  // Reads into a vector (no follow).
  absl::StatusOr<std::vector<v1::Entry>> ReadAll(uint64_t namespace_id, uint64_t start_entry_id = 0,
                                                 uint64_t limit = 0);

  // Entries with id < entry_id become unreadable. A lower value than before is a no-op.
  absl::StatusOr<v1::Namespace> Truncate(uint64_t namespace_id, uint64_t entry_id);
  absl::StatusOr<v1::Namespace> GetNamespace(uint64_t namespace_id);
  // Every live namespace, fetching page after page.
  absl::StatusOr<std::vector<v1::Namespace>> ListNamespaces();
  absl::Status DeleteNamespace(uint64_t namespace_id);

  v1::WalService::Stub& stub() { return *stub_; }

 private:
  explicit Client(const ClientOptions& options, std::unique_ptr<v1::WalService::Stub> stub)
      : options_(options), stub_(std::move(stub)) {}
  void SetDeadline(grpc::ClientContext& ctx, std::chrono::milliseconds timeout) const;

  ClientOptions options_;
  std::unique_ptr<v1::WalService::Stub> stub_;
};

// gRPC status -> absl::Status, keeping code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace wal
