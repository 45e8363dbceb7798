// walclient against an in-process walserver on the mock cluster: retries, the asynchronous
// append, the read stream, and the unix socket transport.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <future>
#include <optional>
#include <thread>

#include "client/wal_client.h"
#include "grpcpp/server_builder.h"
#include "server/common/crc32c.h"
#include "tests/support/tcp_proxy.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

std::unique_ptr<WalServer> StartMock(const std::string& listen = "127.0.0.1:0") {
  ServerOptions options = MockServerOptions();
  options.listen = listen;
  options.topic_prefix = UniqueName("client");
  auto server = WalServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

TEST(Client, RetriesSafeCallsUntilTheServerIsUp) {
  const std::string address = "127.0.0.1:" + std::to_string(FreePort());
  ClientOptions options;
  options.target = address;
  options.timeout = seconds(20);
  options.max_retries = 30;
  options.retry_backoff = milliseconds(100);
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());

  std::unique_ptr<WalServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(milliseconds(800));
    server = StartMock(address);
  });
  const auto t0 = Clock::now();
  auto created = (*client)->CreateNamespace(1);
  starter.join();
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_GE(Clock::now() - t0, milliseconds(800)) << "it must have waited for the server";
}

TEST(Client, WithoutRetriesUnavailableComesBackAtOnce) {
  ClientOptions options;
  options.target = "127.0.0.1:" + std::to_string(FreePort());
  options.timeout = seconds(20);
  options.max_retries = 0;
  auto client = Client::Connect(options);
  const auto t0 = Clock::now();
  EXPECT_EQ((*client)->GetNamespace(1).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(Clock::now() - t0, seconds(5));
  // Nor is Append: with max_retries 0 it is not retried either.
  EXPECT_EQ((*client)->Append(1, {"x"}).status().code(), absl::StatusCode::kUnavailable);
}

TEST(Client, AppendAsyncCallsBackWithIds) {
  auto server = StartMock();
  auto client = Connect(server->address());
  ASSERT_TRUE(client->CreateNamespace(3).ok());
  std::vector<uint64_t> ids;
  for (int i = 0; i < 5; ++i) {
    v1::AppendRequest request;
    auto* e = request.add_entries();
    e->set_namespace_id(3);
    e->set_data("async " + std::to_string(i));
    std::promise<absl::StatusOr<std::vector<uint64_t>>> done;
    client->AppendAsync(std::move(request), [&](absl::StatusOr<std::vector<uint64_t>> r) {
      done.set_value(std::move(r));
    });
    auto result = done.get_future().get();
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->size(), 1u);
    ids.push_back(result->front());
  }
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  // Errors arrive through the callback too.
  v1::AppendRequest bad;
  std::promise<absl::Status> failed;
  client->AppendAsync(
      bad, [&](absl::StatusOr<std::vector<uint64_t>> r) { failed.set_value(r.status()); });
  EXPECT_EQ(failed.get_future().get().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Client, ReadStreamIteratesAndCancels) {
  auto server = StartMock();
  auto client = Connect(server->address());
  ASSERT_TRUE(client->CreateNamespace(4).ok());
  auto ids = client->Append(4, {"a", "b", "c"});
  ASSERT_TRUE(ids.ok());

  ReadOptions read;
  read.namespace_id = 4;
  auto stream = client->OpenRead(read);
  v1::Entry entry;
  std::vector<std::string> got;
  while (stream->Next(&entry)) got.push_back(entry.data());
  EXPECT_TRUE(stream->status().ok()) << stream->status();
  EXPECT_EQ(got, (std::vector<std::string>{"a", "b", "c"}));

  // A follow stream ends when cancelled from another thread.
  read.follow = true;
  auto follow = client->OpenRead(read);
  ASSERT_TRUE(follow->Next(&entry));
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(300));
    follow->Cancel();
  });
  while (follow->Next(&entry)) {
  }
  canceller.join();
  EXPECT_EQ(follow->status().code(), absl::StatusCode::kCancelled);

  // Errors surface from the stream.
  read.follow = false;
  read.namespace_id = 999;
  auto missing = client->OpenRead(read);
  EXPECT_FALSE(missing->Next(&entry));
  EXPECT_EQ(missing->status().code(), absl::StatusCode::kNotFound);
}

// Appends entry `data` of namespace 1 with the given writer and sequence, as a client's first
// attempt or its retry would; returns its id.
uint64_t AppendStamped(Client& client, uint64_t writer_id, uint64_t sequence,
                       const std::string& data) {
  v1::AppendRequest request;
  request.set_writer_id(writer_id);
  v1::Entry* entry = request.add_entries();
  entry->set_namespace_id(1);
  entry->set_sequence(sequence);
  entry->set_data(data);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
  v1::AppendResponse response;
  const grpc::Status status = client.stub().Append(&ctx, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return status.ok() ? response.entry_ids(0) : 0;
}

// A read with `resume` whose connection dropped opens again past what it delivered, as one
// read: an entry whose writer retried it after the read got it, its copy lying past where the
// read resumed, is not delivered a second time.
TEST(Client, AResumedReadDeliversAnEntryRetriedPastItsResumptionOnce) {
  auto server = StartMock();
  auto writer = Connect(server->address());
  ASSERT_TRUE(writer->CreateNamespace(1).ok());
  auto proxy = TcpProxy::Start(server->address());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  ClientOptions options;
  options.target = (*proxy)->address();
  options.retry_backoff = milliseconds(20);
  auto reader = Client::Connect(options);
  ASSERT_TRUE(reader.ok()) << reader.status();

  const uint64_t first = AppendStamped(*writer, 77, 1, "e");
  ReadOptions read;
  read.namespace_id = 1;
  read.follow = true;
  read.resume = true;
  auto stream = (*reader)->OpenRead(read);
  v1::Entry entry;
  ASSERT_TRUE(stream->Next(&entry));
  EXPECT_EQ(entry.data(), "e");
  EXPECT_EQ(entry.writer_id(), 77u);

  // The read's connection drops; meanwhile the writer, which never heard its answer, retries
  // "e", then appends "f".
  (*proxy)->CutExisting();
  const uint64_t copy = AppendStamped(*writer, 77, 1, "e");
  EXPECT_GT(copy, first);
  const uint64_t last = AppendStamped(*writer, 77, 2, "f");

  ASSERT_TRUE(stream->Next(&entry)) << stream->status();
  EXPECT_EQ(entry.data(), "f") << "entry " << entry.entry_id() << " (the copy is " << copy << ")";
  EXPECT_EQ(stream->resumed_copies(), 1u);
  EXPECT_GE((*proxy)->connections(), 2) << "the read never opened again";
  stream->Cancel();
  EXPECT_FALSE(stream->Next(&entry));
  EXPECT_EQ(stream->status().code(), absl::StatusCode::kCancelled);

  // Without resume, the same cut ends the read with UNAVAILABLE.
  read.resume = false;
  read.start_entry_id = last;
  auto plain = (*reader)->OpenRead(read);
  ASSERT_TRUE(plain->Next(&entry));
  (*proxy)->CutExisting();
  EXPECT_FALSE(plain->Next(&entry));
  EXPECT_EQ(plain->status().code(), absl::StatusCode::kUnavailable) << plain->status();
}

TEST(Client, UnixSocket) {
  const std::string path =
      (std::filesystem::temp_directory_path() / (UniqueName("wal") + ".sock")).string();
  auto server = StartMock("unix://" + path + ",127.0.0.1:0");
  ASSERT_NE(server, nullptr);
  ASSERT_EQ(server->addresses().size(), 2u);
  EXPECT_EQ(server->address(), "unix://" + path);
  auto over_unix = Connect("unix://" + path);
  auto over_tcp = Connect(server->addresses()[1]);
  ASSERT_TRUE(over_unix->CreateNamespace(5).ok());
  ASSERT_TRUE(over_unix->Append(5, {"via unix"}).ok());
  auto read = over_tcp->ReadAll(5);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 1u);
  EXPECT_EQ(read->front().data(), "via unix");
  server.reset();
  std::filesystem::remove(path);
}

// A server that answers reads with what it is told to, checksums included: stands for a
// corruption between Kafka and the client (in walserver's memory, on the wire), which a real
// walserver cannot be made to produce.
class ScriptedReads final : public v1::WalService::Service {
 public:
  explicit ScriptedReads(std::vector<v1::Entry> entries) : entries_(std::move(entries)) {}
  grpc::Status Read(grpc::ServerContext*, const v1::ReadRequest*,
                    grpc::ServerWriter<v1::ReadResponse>* writer) override {
    return Send(writer);
  }
  grpc::Status ReadMany(grpc::ServerContext*, const v1::ReadManyRequest*,
                        grpc::ServerWriter<v1::ReadResponse>* writer) override {
    return Send(writer);
  }

 private:
  grpc::Status Send(grpc::ServerWriter<v1::ReadResponse>* writer) {
    for (const v1::Entry& e : entries_) {  // one message each
      v1::ReadResponse response;
      *response.add_entries() = e;
      writer->Write(response);
    }
    return grpc::Status::OK;
  }
  std::vector<v1::Entry> entries_;
};

v1::Entry ScriptedEntry(uint64_t id, const std::string& data, std::optional<uint32_t> crc) {
  v1::Entry e;
  e.set_namespace_id(7);
  e.set_entry_id(id);
  e.set_data(data);
  if (crc) e.set_crc32c(*crc);
  return e;
}

TEST(Client, AnEntryThatDoesNotMatchItsChecksumEndsTheReadWithDataLoss) {
  // Good, without a checksum (an older walserver), then corrupted, then good again.
  ScriptedReads service(
      {ScriptedEntry(1, "one", Crc32c("one")), ScriptedEntry(2, "two", std::nullopt),
       ScriptedEntry(3, "thr33", Crc32c("three")), ScriptedEntry(4, "four", Crc32c("four"))});
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto client = Connect(address);

  ReadOptions read;
  read.namespace_id = 7;
  std::vector<std::string> got;
  absl::Status status = client->Read(read, [&](v1::Entry& e) {
    got.push_back(e.data());
    return true;
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find("entry 3 of namespace 7"), absl::string_view::npos) << status;
  EXPECT_EQ(got, (std::vector<std::string>{"one", "two"}));

  auto stream = client->OpenRead(read);
  v1::Entry entry;
  got.clear();
  while (stream->Next(&entry)) got.push_back(entry.data());
  EXPECT_EQ(stream->status().code(), absl::StatusCode::kDataLoss) << stream->status();
  EXPECT_EQ(got, (std::vector<std::string>{"one", "two"}));

  ReadManyOptions many;
  many.namespaces = {{7, 0, 0}};
  got.clear();
  status = client->ReadMany(
      many,
      [&](v1::Entry& e) {
        got.push_back(e.data());
        return true;
      },
      [](const v1::ReadEnd&) { return true; });
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_EQ(got, (std::vector<std::string>{"one", "two"}));

  // With checksums off, the client passes everything on as it came.
  ClientOptions unchecked;
  unchecked.target = address;
  unchecked.checksums = false;
  auto trusting = Client::Connect(unchecked);
  ASSERT_TRUE(trusting.ok());
  auto all = (*trusting)->ReadAll(7);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 4u);
  server->Shutdown();
}

}  // namespace
}  // namespace wal::testing
