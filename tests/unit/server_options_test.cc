// Server options that cannot work are refused at start with INVALID_ARGUMENT naming the option.
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

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

TEST(ServerOptions, KeepaliveAndNamesThatCannotWorkAreRefused) {
  ServerOptions options = MockServerOptions();
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
    // Named by number: a group this process is in, so that the change is allowed without root.
    options.unix_socket_group = std::to_string(getegid());
    auto server = WalServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    const struct stat st = StatOf(path);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    EXPECT_EQ(st.st_gid, getegid());
  }
  if (const group* g = getgrgid(getegid()); g != nullptr) {
    ServerOptions options = OnUnixSocket(path);
    options.unix_socket_group = g->gr_name;  // by name
    auto server = WalServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_EQ(StatOf(path).st_gid, getegid());
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
