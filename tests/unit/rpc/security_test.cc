// Bearer tokens and TLS on the gRPC listener, with an in-process walserver on the mock cluster.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::seconds;

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / UniqueName("security")).string();
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::unique_ptr<WalServer> Start(ServerOptions options) {
    options.topic_prefix = UniqueName("security");
    auto server = WalServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(*server) : nullptr;
  }
  std::unique_ptr<Client> Make(ClientOptions options) {
    options.timeout = seconds(5);
    auto client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? std::move(*client) : nullptr;
  }
  // A CA, and a server and a client certificate it signed, made with openssl.
  void MakeCertificates() {
    const std::string script = absl::StrCat(
        "cd ", dir_,
        " && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 "
        "-subj /CN=test-ca"
        " && openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr "
        "-subj /CN=localhost"
        " && printf 'subjectAltName=IP:127.0.0.1,DNS:localhost' > server.ext"
        " && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out server.pem -days 1 -extfile server.ext"
        " && openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr "
        "-subj /CN=datanode"
        " && openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out client.pem -days 1) >/dev/null 2>&1");
    ASSERT_EQ(std::system(("(" + script).c_str()), 0) << "openssl failed";
  }
  std::string dir_;
};

// Every RPC of the contract, answered with its status code.
std::vector<std::pair<std::string, absl::StatusCode>> CallEverything(Client& c) {
  std::vector<std::pair<std::string, absl::StatusCode>> codes;
  codes.emplace_back("CreateNamespace", c.CreateNamespace(1).status().code());
  codes.emplace_back("Append", c.Append(1, {"x"}).status().code());
  codes.emplace_back("Read", c.ReadAll(1).status().code());
  codes.emplace_back("Truncate", c.Truncate(1, 0).status().code());
  codes.emplace_back("GetNamespace", c.GetNamespace(1).status().code());
  codes.emplace_back("ListNamespaces", c.ListNamespaces().status().code());
  codes.emplace_back("AcquireNamespace", c.AcquireNamespace(1).status().code());
  codes.emplace_back("DeleteNamespace", c.DeleteNamespace(1).code());
  return codes;
}

TEST_F(SecurityTest, BearerTokenIsCheckedOnEveryCall) {
  ServerOptions options = MockServerOptions();
  options.auth_token_file = Write("token", "s3cret-token\n");
  auto server = Start(options);
  ASSERT_NE(server, nullptr);

  ClientOptions none;
  none.target = server->address();
  ClientOptions wrong = none;
  wrong.auth_token = "s3cret-tokem";
  for (ClientOptions* o : {&none, &wrong}) {
    auto client = Make(*o);
    for (const auto& [rpc, code] : CallEverything(*client)) {
      EXPECT_EQ(code, absl::StatusCode::kUnauthenticated)
          << rpc << " with token '" << o->auth_token << "'";
    }
  }
  ClientOptions right = none;
  right.auth_token = "s3cret-token";
  auto client = Make(right);
  for (const auto& [rpc, code] : CallEverything(*client)) {
    EXPECT_EQ(code, absl::StatusCode::kOk) << rpc;
  }
  // Health stays open, for probes.
  auto channel = grpc::CreateChannel(server->address(), grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  EXPECT_TRUE(health->Check(&ctx, request, &response).ok());
}

TEST_F(SecurityTest, EmptyTokenFileIsAStartupError) {
  ServerOptions options = MockServerOptions();
  options.topic_prefix = UniqueName("security");
  options.auth_token_file = Write("empty", "\n");
  auto server = WalServer::Start(options);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << server.status();
}

TEST_F(SecurityTest, TlsListenerWithAndWithoutClientCertificates) {
  MakeCertificates();
  ServerOptions options = MockServerOptions();
  options.tls_cert_file = dir_ + "/server.pem";
  options.tls_key_file = dir_ + "/server.key";
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  ClientOptions tls;
  tls.target = server->address();
  tls.tls_ca_file = dir_ + "/ca.pem";
  auto client = Make(tls);
  ASSERT_TRUE(client->CreateNamespace(1).ok());
  auto ids = client->Append(1, {"over TLS"});
  ASSERT_TRUE(ids.ok()) << ids.status();
  // A plaintext client cannot talk to it.
  ClientOptions plain;
  plain.target = server->address();
  plain.max_retries = 0;
  EXPECT_EQ(Make(plain)->GetNamespace(1).status().code(), absl::StatusCode::kUnavailable);
  server.reset();

  // Client certificates required.
  options.tls_client_ca_file = dir_ + "/ca.pem";
  server = Start(options);
  ASSERT_NE(server, nullptr);
  tls.target = server->address();
  tls.max_retries = 0;
  EXPECT_EQ(Make(tls)->CreateNamespace(2).status().code(), absl::StatusCode::kUnavailable)
      << "a client without a certificate must be refused";
  ClientOptions mutual = tls;
  mutual.tls_cert_file = dir_ + "/client.pem";
  mutual.tls_key_file = dir_ + "/client.key";
  auto trusted = Make(mutual);
  ASSERT_TRUE(trusted->CreateNamespace(2).ok());
  EXPECT_TRUE(trusted->Append(2, {"mutual TLS"}).ok());
}

}  // namespace
}  // namespace wal::testing
