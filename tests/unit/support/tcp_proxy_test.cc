// The test proxy's own behaviour: the faults a test asks of it must be the only ones it adds.
#include "tests/support/tcp_proxy.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "absl/strings/numbers.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;

bool SendAll(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// How many bytes arrive until the other side's end, or until nothing has come for 10 s (then
// the test fails on the count instead of hanging).
size_t ReceiveToTheEnd(int fd) {
  const timeval quiet{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &quiet, sizeof(quiet));
  size_t received = 0;
  char buffer[4096];
  ssize_t n;
  while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) received += static_cast<size_t>(n);
  return received;
}

TEST(TcpProxy, ASlowLinkDeliversEveryByteSentBeforeEachSidesEnd) {
  // TCP delivers a side's end (FIN) after the bytes sent before it, and the other side may still
  // answer (a half-close). The proxy dropped the bytes it was still holding for a slow link and
  // closed both ways at once when either side ended, so a slow link lost a last request.
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  auto proxy = TcpProxy::Start("127.0.0.1:" + std::to_string(ntohs(address.sin_port)));
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  (*proxy)->Slow(milliseconds(200), 0);

  uint32_t proxy_port = 0;
  const std::string& proxy_address = (*proxy)->address();
  ASSERT_TRUE(absl::SimpleAtoi(proxy_address.substr(proxy_address.rfind(':') + 1), &proxy_port));
  sockaddr_in to_proxy{};
  to_proxy.sin_family = AF_INET;
  to_proxy.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to_proxy.sin_port = htons(static_cast<uint16_t>(proxy_port));
  const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&to_proxy), sizeof(to_proxy)), 0);

  // No ASSERT from here on while the server's thread runs.
  const std::string request(100000, 'q');
  const std::string answer(70000, 'a');
  size_t server_received = 0;
  bool answered = false;
  std::thread server([&] {
    const int fd = accept(listener, nullptr, nullptr);
    server_received = ReceiveToTheEnd(fd);  // until the client's end
    answered = SendAll(fd, answer);
    close(fd);
  });
  EXPECT_TRUE(SendAll(client, request));
  EXPECT_EQ(shutdown(client, SHUT_WR), 0);  // the request's end; the answer may still come
  const size_t client_received = ReceiveToTheEnd(client);
  server.join();
  close(client);
  close(listener);

  EXPECT_EQ(server_received, request.size()) << "bytes sent before the client's end were lost";
  EXPECT_TRUE(answered);
  EXPECT_EQ(client_received, answer.size()) << "bytes sent before the server's end were lost";
}

}  // namespace
}  // namespace wal::testing
