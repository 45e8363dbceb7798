#include "server/common/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"

// Flags of this test only: LoadSettings sets whatever flags the program defines.
ABSL_FLAG(int, config_test_count, 1, "a number");
ABSL_FLAG(std::string, config_test_text, "default", "a string");

namespace wal {
namespace {

class LoadSettingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::SetFlag(&FLAGS_config_test_count, 1);
    absl::SetFlag(&FLAGS_config_test_text, "default");
  }
  absl::StatusOr<LoadedSettings> Load(std::vector<std::string> args,
                                      std::vector<std::string> env = {}) {
    args.insert(args.begin(), "walserver");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    return LoadSettings(static_cast<int>(argv.size()), argv.data(), envp.data());
  }
  // One file per test: ctest runs the tests of this suite in parallel processes that share
  // TempDir(), and a shared name let one test read the other's file.
  std::string WriteFile(const std::string& text) {
    const std::string path = ::testing::TempDir() + "/" +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                             ".conf";
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(LoadSettingsTest, FileThenEnvironmentThenCommandLine) {
  const std::string file = WriteFile(
      "# a comment\n"
      "\n"
      "config_test_count = 5\n"
      "--config_test_text = \"from file\"\n"
      "kafka.client.rack = rack-a\n");
  auto s = Load({"--config=" + file});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(absl::GetFlag(FLAGS_config_test_count), 5);
  EXPECT_EQ(absl::GetFlag(FLAGS_config_test_text), "from file");
  EXPECT_EQ(s->kafka_properties.at("client.rack"), "rack-a");

  s = Load({"--config=" + file}, {"WALSERVER_CONFIG_TEST_COUNT=6", "OTHER_VARIABLE=1"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(absl::GetFlag(FLAGS_config_test_count), 6);

  s = Load({"--config=" + file, "--config_test_count", "7", "--kafka.client.rack=rack-b"},
           {"WALSERVER_CONFIG_TEST_COUNT=6"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(absl::GetFlag(FLAGS_config_test_count), 7);
  EXPECT_EQ(s->kafka_properties.at("client.rack"), "rack-b");
}

TEST_F(LoadSettingsTest, TheConfigFileMayComeFromTheEnvironment) {
  const std::string file = WriteFile("config_test_text = via env\n");
  auto s = Load({}, {"WALSERVER_CONFIG=" + file});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(absl::GetFlag(FLAGS_config_test_text), "via env");
}

TEST_F(LoadSettingsTest, BadInputNamesItsSource) {
  const auto error = [&](std::vector<std::string> args, std::vector<std::string> env = {}) {
    auto s = Load(std::move(args), std::move(env));
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(s.status().message());
  };
  EXPECT_TRUE(absl::StrContains(error({"--no_such=1"}), "unknown setting 'no_such'"));
  EXPECT_TRUE(absl::StrContains(error({"--config_test_count=many"}), "config_test_count"));
  EXPECT_TRUE(absl::StrContains(error({"--config_test_count"}), "needs a value"));
  EXPECT_TRUE(absl::StrContains(error({"stray"}), "unexpected argument 'stray'"));
  EXPECT_TRUE(absl::StrContains(error({"--config=/no/such/file"}), "cannot read config file"));
  const std::string bad = WriteFile("config_test_count = 2\nno equals sign here\n");
  EXPECT_TRUE(absl::StrContains(error({"--config=" + bad}), "BadInputNamesItsSource.conf:2"));
  const std::string no_name = WriteFile(" = 3\n");
  EXPECT_TRUE(absl::StrContains(error({"--config=" + no_name}), "no name before '='"));
  EXPECT_TRUE(absl::StrContains(error({}, {"WALSERVER_CONFIG_TEST_COUNTT=3"}),
                                "environment variable WALSERVER_CONFIG_TEST_COUNTT"));
  // Nothing was applied from the failed loads.
  EXPECT_EQ(absl::GetFlag(FLAGS_config_test_count), 1);
}

TEST_F(LoadSettingsTest, HelpIsReportedNotApplied) {
  auto s = Load({"--config_test_count=9", "--help"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->help);
}

}  // namespace
}  // namespace wal
