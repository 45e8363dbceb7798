// The test harness's own port choice: a server restarted on its port must find it free.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

TEST(FreePort, IsAFreePortBelowTheKernelsEphemeralPorts) {
  // An ephemeral port can be taken by any outgoing connection while its server is down (this
  // failed a restart in FencingTest.RandomSchedules: "cannot listen ... another process holds
  // the address").
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int first_ephemeral = 0;
  ASSERT_TRUE(range >> first_ephemeral);
  EXPECT_EQ(EphemeralPortsStart(), first_ephemeral);
  for (int i = 0; i < 20; ++i) {
    const int port = FreePort();
    EXPECT_GT(port, 1024);
    EXPECT_LT(port, first_ephemeral);
    EXPECT_TRUE(PortIsFree(port)) << port;
  }
}

}  // namespace
}  // namespace wal::testing
