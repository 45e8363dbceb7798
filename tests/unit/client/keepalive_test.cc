// Dead connections: a proxy between walclient and an in-process walserver turns the open
// connection into a black hole (no bytes either way, no FIN, no RST) while new connections work.
// Keepalive pings must find it: the client's calls move to a new connection, and walserver frees
// what the cut-off client held.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "client/wal_client.h"
#include "tests/support/tcp_proxy.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

std::unique_ptr<WalServer> StartServerOnMock(ServerOptions options = MockServerOptions()) {
  options.topic_prefix = UniqueName("keepalive");
  auto server = WalServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// With the client's default keepalive, appends (5 s deadline each, as a datanode's) and a
// follow read recover from a black-holed connection within 30 s.
TEST(Keepalive, ClientWithDefaultsLeavesABlackHoledConnectionWithin30Seconds) {
  auto server = StartServerOnMock();
  ASSERT_NE(server, nullptr);
  auto proxy = TcpProxy::Start(server->address());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  ClientOptions options;
  options.target = (*proxy)->address();
  options.timeout = seconds(5);
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->CreateNamespace(1).ok());
  ASSERT_TRUE((*client)->Append(1, {"before"}).ok());

  ReadOptions read;
  read.namespace_id = 1;
  read.follow = true;
  auto follower = (*client)->OpenRead(read);
  v1::Entry entry;
  ASSERT_TRUE(follower->Next(&entry));
  EXPECT_EQ(entry.data(), "before");

  (*proxy)->BlackHoleExisting();
  const auto cut = Clock::now();
  // The follow read ends UNAVAILABLE once the client drops the connection.
  auto follow_end = std::async(std::launch::async, [&] {
    v1::Entry e;
    while (follower->Next(&e)) {
    }
    return std::make_pair(follower->status(), SecondsSince(cut));
  });
  absl::Status appended = absl::UnavailableError("not tried");
  int failed_appends = 0;
  while (!appended.ok() && SecondsSince(cut) < 60) {
    appended = (*client)->Append(1, {"after"}).status();
    if (!appended.ok()) ++failed_appends;
  }
  const double recovered = SecondsSince(cut);
  std::cerr << "RESULT appends failed for " << recovered << " s (" << failed_appends
            << " calls) after the black hole\n";
  EXPECT_TRUE(appended.ok()) << appended;
  EXPECT_LT(recovered, 30);
  const bool follow_ended = follow_end.wait_for(seconds(30)) == std::future_status::ready;
  if (!follow_ended) follower->Cancel();  // else the test would wait for it for ever
  ASSERT_TRUE(follow_ended) << "the follow read still waits on the dead connection";
  const auto [status, ended_after] = follow_end.get();
  std::cerr << "RESULT the follow read ended after " << ended_after << " s: " << status << "\n";
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_LT(ended_after, 30);
  EXPECT_GE((*proxy)->connections(), 2);

  // A follow read from where it ended gets the entry appended since, on the new connection.
  read.start_entry_id = entry.entry_id() + 1;
  follower = (*client)->OpenRead(read);
  ASSERT_TRUE(follower->Next(&entry)) << follower->status();
  EXPECT_EQ(entry.data(), "after");
  follower->Cancel();
}

// A connection that never comes up (the address black-holes every new connection) must not hold
// the client's append stream: appends fail by their deadlines, and closing the client does not
// wait for gRPC's 20 s connect timeout.
TEST(Keepalive, AStreamThatCannotConnectHoldsNeitherAppendsNorTheClientsClose) {
  auto server = StartServerOnMock();
  ASSERT_NE(server, nullptr);
  auto proxy = TcpProxy::Start(server->address());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  (*proxy)->BlackHoleAll();
  ClientOptions options;
  options.target = (*proxy)->address();
  options.timeout = seconds(1);
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  auto t0 = Clock::now();
  const absl::Status first = (*client)->Append(1, {"x"}).status();
  EXPECT_FALSE(first.ok());
  EXPECT_LT(SecondsSince(t0), 2) << first;
  const absl::Status second = (*client)->Append(1, {"y"}).status();
  EXPECT_FALSE(second.ok());
  EXPECT_LT(SecondsSince(t0), 3.5) << second;
  t0 = Clock::now();
  client->reset();
  const double closed_in = SecondsSince(t0);
  std::cerr << "RESULT the client closed in " << closed_in << " s\n";
  EXPECT_LT(closed_in, 3);
  EXPECT_GE((*proxy)->connections(), 1) << "the client never tried to connect";
}

// A client that does not ping (keepalive_time 0) is cut off while it follows a namespace:
// walserver's own pings find the dead connection and free the read's place under
// --max_concurrent_reads.
TEST(Keepalive, WalserverFreesTheReadOfAClientCutOff) {
  ServerOptions server_options = MockServerOptions();
  server_options.max_concurrent_reads = 1;
  server_options.keepalive_time = seconds(1);
  server_options.keepalive_timeout = seconds(2);
  auto server = StartServerOnMock(server_options);
  ASSERT_NE(server, nullptr);
  auto proxy = TcpProxy::Start(server->address());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  ClientOptions options;
  options.target = (*proxy)->address();
  options.keepalive_time = milliseconds(0);
  auto cut_off = Client::Connect(options);
  ASSERT_TRUE(cut_off.ok()) << cut_off.status();
  ASSERT_TRUE((*cut_off)->CreateNamespace(1).ok());
  ASSERT_TRUE((*cut_off)->Append(1, {"x"}).ok());
  ReadOptions read;
  read.namespace_id = 1;
  read.follow = true;
  auto follower = (*cut_off)->OpenRead(read);
  v1::Entry entry;
  ASSERT_TRUE(follower->Next(&entry));  // the read holds the only place

  auto direct = Connect(server->address());
  ReadOptions plain;
  plain.namespace_id = 1;
  auto refused = direct->OpenRead(plain);
  EXPECT_FALSE(refused->Next(&entry));
  EXPECT_TRUE(absl::IsResourceExhausted(refused->status())) << refused->status();

  (*proxy)->BlackHoleExisting();
  const auto cut = Clock::now();
  absl::Status status = absl::ResourceExhaustedError("not tried");
  while (absl::IsResourceExhausted(status) && SecondsSince(cut) < 30) {
    auto attempt = direct->OpenRead(plain);
    while (attempt->Next(&entry)) {
    }
    status = attempt->status();
  }
  std::cerr << "RESULT the cut-off read's place was free after " << SecondsSince(cut) << " s\n";
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_LT(SecondsSince(cut), 10);
  // The cut-off client never pings: closing the proxy's sockets ends its read, which it would
  // otherwise wait on when the test tears it down.
  proxy->reset();
  follower->Cancel();
}

// Pings at the fastest rate both sides allow keep a quiet connection up: walserver does not
// answer a client's pings with GOAWAY, and neither side drops a healthy connection while a
// follow read waits or nothing is called at all.
TEST(Keepalive, QuietConnectionsWithFastPingsStayUp) {
  // The default timeouts (10 s), with room for the backup poller and a busy machine: the pings
  // are what is tested. walserver runs in a process of its own (on its in-process mock cluster), so
  // that nothing but the client's own threads reads its connection here.
  auto server = ServerProcess::Start({"--keepalive_time_ms=1000"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto proxy = TcpProxy::Start((*server)->address());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  ClientOptions options;
  options.target = (*proxy)->address();
  options.keepalive_time = kMinClientPingInterval;
  // Unary appends: no AppendStream stays open, so that below no call is open at all.
  options.append_stream = false;
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->CreateNamespace(1).ok());
  ASSERT_TRUE((*client)->Append(1, {"first"}).ok());
  ReadOptions read;
  read.namespace_id = 1;
  read.follow = true;
  auto follower = (*client)->OpenRead(read);
  v1::Entry entry;
  ASSERT_TRUE(follower->Next(&entry));
  // Eight pings each way while the read waits and the caller pulls nothing.
  std::this_thread::sleep_for(seconds(8));
  ASSERT_TRUE((*client)->Append(1, {"second"}).ok());
  ASSERT_TRUE(follower->Next(&entry)) << follower->status();
  EXPECT_EQ(entry.data(), "second");
  follower->Cancel();
  // And with no call open at all.
  std::this_thread::sleep_for(seconds(5));
  ASSERT_TRUE((*client)->Append(1, {"third"}).ok());
  EXPECT_EQ((*proxy)->connections(), 1) << "a healthy connection was dropped";
}

TEST(Keepalive, PingsFasterThanWalserverAcceptsAreRefused) {
  ClientOptions options;
  options.keepalive_time = milliseconds(500);
  auto client = Client::Connect(options);
  EXPECT_TRUE(absl::IsInvalidArgument(client.status())) << client.status();
  options.keepalive_time = milliseconds(0);  // no pings
  EXPECT_TRUE(Client::Connect(options).ok());
}

}  // namespace
}  // namespace wal::testing
