// A long, thin link between walclient and walserver: a proxy delays every byte by 100 ms each
// way and carries at most 1 MiB/s. Calls must still be answered by their deadlines, keepalive
// must not take the slow connection for a dead one, and a follow read must get every entry,
// whole and in order.
#include <gtest/gtest.h>

#include <future>

#include "client/wal_client.h"
#include "tests/support/tcp_proxy.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kOneWay{100};
constexpr int64_t kBytesPerSecond = 1 << 20;

milliseconds Since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

TEST(SlowLink, AppendsAndAFollowReadGoThroughALongThinLink) {
  ServerOptions options = MockServerOptions();
  options.topic_prefix = UniqueName("slowlink");
  auto server = WalServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto proxy = TcpProxy::Start((*server)->address());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  (*proxy)->Slow(kOneWay, kBytesPerSecond);
  ClientOptions client_options;
  client_options.target = (*proxy)->address();
  client_options.timeout = seconds(10);
  auto client = Client::Connect(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->CreateNamespace(1).ok());

  std::vector<std::string> written;
  for (int i = 0; i < 20; ++i) written.push_back("small-" + std::to_string(i));
  std::string big(2 << 20, '\0');  // 2 s on the link
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + (i * 7919) % 26);
  written.push_back(big);

  ReadOptions read;
  read.namespace_id = 1;
  read.follow = true;
  auto follower = (*client)->OpenRead(read);
  auto followed = std::async(std::launch::async, [&] {
    std::vector<std::string> got;
    v1::Entry entry;
    while (got.size() < written.size() && follower->Next(&entry)) got.push_back(entry.data());
    return got;
  });

  milliseconds fastest = seconds(60), slowest{0};
  for (size_t i = 0; i + 1 < written.size(); ++i) {
    const auto start = Clock::now();
    auto ids = (*client)->Append(1, {written[i]});
    ASSERT_TRUE(ids.ok()) << ids.status();
    fastest = std::min(fastest, Since(start));
    slowest = std::max(slowest, Since(start));
  }
  const auto big_start = Clock::now();
  auto big_ids = (*client)->Append(1, {big});
  const milliseconds big_took = Since(big_start);
  ASSERT_TRUE(big_ids.ok()) << big_ids.status();

  const bool all_followed = followed.wait_for(seconds(30)) == std::future_status::ready;
  if (!all_followed) follower->Cancel();  // else the test would wait for it for ever
  ASSERT_TRUE(all_followed) << "the follow read did not get every entry within 30 s";
  const std::vector<std::string> got = followed.get();
  std::cerr << "RESULT over " << kOneWay.count() << " ms each way at 1 MiB/s: small appends took "
            << fastest.count() << "-" << slowest.count() << " ms, a 2 MiB append "
            << big_took.count() << " ms; the follow read got " << got.size() << " of "
            << written.size() << " entries\n";
  // The link really was slow: an answer needs a round trip, 2 MiB needs 2 s.
  EXPECT_GE(fastest, 2 * kOneWay);
  EXPECT_GE(big_took, seconds(2));
  EXPECT_EQ(got.size(), written.size());
  EXPECT_TRUE(got == written) << "entries reordered or damaged on the way";
  EXPECT_EQ((*proxy)->connections(), 1) << "the slow connection was dropped and made again";
}

}  // namespace
}  // namespace wal::testing
