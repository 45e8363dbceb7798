// Bad input to every call: the right code, and nothing written.
// Runs on the mock cluster and on real Kafka (contract_fixture.h).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>

#include "server/common/crc32c.h"
#include "tests/contract/contract_fixture.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Read and ReadMany parse their requests themselves (raw methods, rpc/wal_service.h): bytes that
// are no request are refused with INVALID_ARGUMENT, as a request that is is checked.
TEST_F(ContractTest, UndecodableReadRequestsAreRefused) {
  auto channel = grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials());
  const std::string garbage("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
                            11);  // an 11-byte varint
  for (const char* method : {"/wal.v1.WalService/Read", "/wal.v1.WalService/ReadMany"}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
    grpc::Slice slice(garbage);
    const grpc::ByteBuffer request(&slice, 1);
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
            channel.get(),
            grpc::internal::RpcMethod(method, grpc::internal::RpcMethod::SERVER_STREAMING), &ctx,
            request));
    grpc::ByteBuffer response;
    EXPECT_FALSE(reader->Read(&response)) << method;
    const grpc::Status status = reader->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_NE(status.error_message().find("is not a wal.v1.Read"), std::string::npos)
        << method << ": " << status.error_message();
  }
}

// Bad input over every RPC: the right code, a message that names the problem, nothing written.
// Over 80 lines on purpose: a table of cases, a few lines each, one RPC after another.
TEST_F(ContractTest, BadInputGetsTheRightCodeAndWritesNothing) {
  constexpr uint64_t kMax = UINT64_MAX;
  Create(1);
  ASSERT_FALSE(Append(1, {"a", "b"}).empty());
  const uint64_t end = client_->GetNamespace(1)->next_entry_id();
  const auto append = [&](std::vector<std::pair<uint64_t, std::string>> entries) {
    v1::AppendRequest r;
    for (auto& [ns, data] : entries) {
      auto* e = r.add_entries();
      e->set_namespace_id(ns);
      e->set_data(std::move(data));
    }
    return client_->Append(r).status();
  };
  const auto wrong_checksum = [&] {
    v1::AppendRequest r;
    for (const char* data : {"fine", "flipped"}) {
      auto* e = r.add_entries();
      e->set_namespace_id(1);
      e->set_data(data);
    }
    r.mutable_entries(1)->set_crc32c(Crc32c("flipped") ^ 0x100);
    return client_->Append(r).status();
  };
  struct Case {
    std::string what;
    absl::Status status;
    absl::StatusCode want;
    std::string mentions;  // the message must contain this
  };
  ClientOptions once;
  once.target = server_->address();
  once.max_retries = 0;
  auto raw = Client::Connect(once);
  ASSERT_TRUE(raw.ok());
  std::vector<Case> cases = {
      {"Create id 0", client_->CreateNamespace(0).status(), absl::StatusCode::kInvalidArgument,
       "namespace_id 0"},
      {"Get id 0", client_->GetNamespace(0).status(), absl::StatusCode::kInvalidArgument, "0"},
      {"Get unknown max id", client_->GetNamespace(kMax).status(), absl::StatusCode::kNotFound,
       "18446744073709551615"},
      {"Append no entries", append({}), absl::StatusCode::kInvalidArgument, "no entries"},
      {"Append id 0", append({{1, "x"}, {0, "y"}}), absl::StatusCode::kInvalidArgument,
       "entries[1].namespace_id"},
      {"Append unknown max id", append({{1, "x"}, {kMax, "y"}}), absl::StatusCode::kNotFound,
       "18446744073709551615"},
      {"Append with a checksum its data does not match", wrong_checksum(),
       absl::StatusCode::kInvalidArgument, "entries[1]: crc32c"},
      {"Append over max_entry_bytes", append({{1, std::string((1 << 20) + 1, 'x')}}),
       absl::StatusCode::kInvalidArgument, "max_entry_bytes"},
      {"Append over the gRPC message limit",
       (*raw)->Append(1, {std::string(server_->max_entry_bytes() + (5 << 20), 'x')}).status(),
       absl::StatusCode::kResourceExhausted, "larger than max"},
      {"Read id 0", client_->ReadAll(0).status(), absl::StatusCode::kInvalidArgument, "0"},
      {"Read unknown", client_->ReadAll(kMax).status(), absl::StatusCode::kNotFound, "not found"},
      {"Read far past the end", client_->ReadAll(1, kMax).status(), absl::StatusCode::kOutOfRange,
       "past the end"},
      {"Read just past the end", client_->ReadAll(1, end + 1).status(),
       absl::StatusCode::kOutOfRange, "past the end"},
      {"Truncate id 0", client_->Truncate(0, 1).status(), absl::StatusCode::kInvalidArgument, "0"},
      {"Truncate far past the end", client_->Truncate(1, kMax).status(),
       absl::StatusCode::kOutOfRange, "past its end"},
      {"Truncate unknown", client_->Truncate(kMax, 1).status(), absl::StatusCode::kNotFound,
       "not found"},
      {"Delete id 0", client_->DeleteNamespace(0), absl::StatusCode::kInvalidArgument, "0"},
      {"Delete unknown", client_->DeleteNamespace(kMax), absl::StatusCode::kNotFound, "not found"},
      {"Acquire id 0", client_->AcquireNamespace(0).status(), absl::StatusCode::kInvalidArgument,
       "0"},
      {"Acquire unknown", client_->AcquireNamespace(kMax).status(), absl::StatusCode::kNotFound,
       "not found"},
  };
  {
    grpc::ClientContext ctx;
    v1::ListNamespacesRequest request;
    request.set_page_token("garbage");
    v1::ListNamespacesResponse response;
    cases.push_back({"List with a bad page token",
                     FromGrpcStatus(client_->stub().ListNamespaces(&ctx, request, &response)),
                     absl::StatusCode::kInvalidArgument, "page_token"});
  }
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), c.want) << c.what << ": " << c.status;
    EXPECT_NE(c.status.message().find(c.mentions), absl::string_view::npos)
        << c.what << ": the message should mention '" << c.mentions << "': " << c.status;
  }
  EXPECT_EQ(client_->GetNamespace(1)->next_entry_id(), end) << "a bad request wrote something";
  EXPECT_EQ(ReadData(1), (std::vector<std::string>{"a", "b"}));

  // The largest id is a valid namespace id.
  Create(kMax);
  ASSERT_FALSE(Append(kMax, {"at the top"}).empty());
  EXPECT_EQ(ReadData(kMax), (std::vector<std::string>{"at the top"}));

  // A cancelled stream frees its read.
  auto stream = client_->OpenRead({1, 0, 0, /*follow=*/true, {}});
  v1::Entry entry;
  ASSERT_TRUE(stream->Next(&entry));
  stream->Cancel();
  while (stream->Next(&entry)) {
  }
  EXPECT_EQ(stream->status().code(), absl::StatusCode::kCancelled);
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (server_->metrics().reads_in_progress.load() != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(server_->metrics().reads_in_progress.load(), 0);
}

}  // namespace
}  // namespace wal::testing
