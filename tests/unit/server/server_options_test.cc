// Server options that cannot work are refused at start with INVALID_ARGUMENT naming the option.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

void ExpectRefused(ServerOptions options, const std::string& naming) {
  options.topic_prefix = UniqueName("options");
  auto server = WalServer::Start(options);
  ASSERT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << naming;
  EXPECT_NE(server.status().message().find(naming), std::string::npos) << server.status();
}

TEST(ServerOptions, TimeoutsAndNamesThatCannotWorkAreRefused) {
  ServerOptions options = MockServerOptions();
  options.kafka_rto_max = std::chrono::milliseconds(999);
  ExpectRefused(options, "kafka_rto_max_ms");
  options = MockServerOptions();
  options.keepalive_timeout = std::chrono::milliseconds(0);
  ExpectRefused(options, "keepalive_timeout_ms");
  options = MockServerOptions();
  options.keepalive_time = std::chrono::milliseconds(-1);
  ExpectRefused(options, "keepalive_time_ms");
  // "server/" + one character is 8 bytes, the length of a namespace's key in the meta topic.
  options = MockServerOptions();
  options.name = "a";
  ExpectRefused(options, "--name");
}

ServerOptions OnUnixSocket(const std::string& path) {
  ServerOptions options = MockServerOptions();
  options.topic_prefix = UniqueName("options");
  options.listen = "unix://" + path;
  return options;
}

// Removes the socket and its lock file that a test's servers left.
void RemoveSocket(const std::string& path) {
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".lock");
}

struct stat StatOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st;
}

// A datanode running as another user of the socket's group must be able to connect: the socket
// is not left to the process umask (which made it srwxr-xr-x, and connecting needs write).
TEST(ServerOptions, TheUnixSocketGetsTheModeAndGroupAsked) {
  const std::string path = absl::StrCat(std::filesystem::temp_directory_path().string(), "/",
                                        UniqueName("mode"), ".sock");
  {
    auto server = WalServer::Start(OnUnixSocket(path));
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_EQ(StatOf(path).st_mode & 07777, 0660u) << "the default mode";
  }
  {
    ServerOptions options = OnUnixSocket(path);
    options.unix_socket_mode = "0600";
    // By number, a group the socket would not get anyway: root may give any; another user one
    // of its supplementary groups (else only the process's own, which shows less).
    gid_t other = getegid();
    if (geteuid() == 0) {
      other = getegid() + 1;
    } else {
      std::vector<gid_t> groups(static_cast<size_t>(std::max(getgroups(0, nullptr), 0)));
      groups.resize(static_cast<size_t>(
          std::max(getgroups(static_cast<int>(groups.size()), groups.data()), 0)));
      for (gid_t g : groups) {
        if (g != getegid()) other = g;
      }
    }
    options.unix_socket_group = std::to_string(other);
    auto server = WalServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    const struct stat st = StatOf(path);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    EXPECT_EQ(st.st_gid, other);
  }
  if (const group* g = getgrgid(getegid()); g != nullptr) {
    ServerOptions options = OnUnixSocket(path);
    options.unix_socket_group = g->gr_name;  // by name
    auto server = WalServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_EQ(StatOf(path).st_gid, getegid());
  }
  RemoveSocket(path);
}

// Another walserver starting on the same socket holds its lock from before its check for a live
// listener until it stops: this one is refused, whether or not the other is listening yet.
TEST(ServerOptions, AUnixSocketAnotherServerIsStartingOnIsRefused) {
  const std::string path = "/tmp/" + UniqueName("locked") + ".sock";
  const int held = open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(held, 0);
  ASSERT_EQ(flock(held, LOCK_EX | LOCK_NB), 0);
  auto refused = WalServer::Start(OnUnixSocket(path));
  EXPECT_TRUE(absl::IsUnavailable(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("is starting on it"), std::string::npos)
      << refused.status();
  close(held);
  auto started = WalServer::Start(OnUnixSocket(path));
  EXPECT_TRUE(started.ok()) << started.status();
  started = absl::UnknownError("stopped");
  RemoveSocket(path);
}

// Of two servers starting on one socket at the same moment, exactly one serves it.
TEST(ServerOptions, OfTwoServersStartingOnOneUnixSocketOneServes) {
  for (int round = 0; round < 5; ++round) {
    const std::string path = "/tmp/" + UniqueName("race") + ".sock";
    std::vector<absl::StatusOr<std::unique_ptr<WalServer>>> servers(2);
    std::vector<std::thread> starts;
    for (auto& server : servers) {
      starts.emplace_back([&server, &path] { server = WalServer::Start(OnUnixSocket(path)); });
    }
    for (std::thread& t : starts) t.join();
    EXPECT_NE(servers[0].ok(), servers[1].ok())
        << servers[0].status() << " / " << servers[1].status();
    servers.clear();
    RemoveSocket(path);
  }
}

TEST(ServerOptions, UnixSocketModesAndGroupsThatCannotWorkAreRefused) {
  const std::string path = "/tmp/" + UniqueName("refused") + ".sock";
  for (const char* mode : {"", "660x", "0999", "10660", "rw-rw----"}) {
    ServerOptions options = OnUnixSocket(path);
    options.unix_socket_mode = mode;
    ExpectRefused(options, "--unix_socket_mode");
  }
  ServerOptions options = OnUnixSocket(path);
  options.unix_socket_group = "no-such-group-here";
  ExpectRefused(options, "--unix_socket_group");
  EXPECT_FALSE(std::filesystem::exists(path)) << "refused options must be refused before binding";
}

}  // namespace
}  // namespace wal::testing
