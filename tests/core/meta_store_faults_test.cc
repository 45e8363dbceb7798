// The meta store (meta/meta_store.h) under faults the mock cluster injects (unit_core_test only).
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <future>
#include <vector>

#include "tests/core/core_fixture.h"

namespace wal::testing {
namespace {

// A change waits until the tail has read its record back. While the tail cannot fetch, that
// wait ends at once when shutdown calls FailPending, not at the call's deadline.
TEST_F(Core, FailPendingEndsAChangeWaitingForTheTail) {
  ASSERT_TRUE(Create(1).ok());
  rd_kafka_mock_cluster_t* cluster = core_->mock_cluster()->cluster();
  constexpr int16_t kFetchApiKey = 1;
  // Every fetch fails from now on (far more errors than the test lasts); producing works.
  std::vector<rd_kafka_resp_err_t> errors(100000, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION);
  rd_kafka_mock_push_request_errors_array(cluster, kFetchApiKey, errors.size(), errors.data());
  auto waiting = std::async(std::launch::async, [&] { return Create(2); });
  ASSERT_EQ(waiting.wait_for(seconds(2)), std::future_status::timeout)
      << "the change did not wait for the tail: " << waiting.get().status();
  meta_->FailPending();
  ASSERT_EQ(waiting.wait_for(seconds(2)), std::future_status::ready)
      << "FailPending left the change waiting";
  const auto created = waiting.get();
  EXPECT_TRUE(absl::IsDeadlineExceeded(created.status())) << created.status();
  rd_kafka_mock_clear_request_errors(cluster, kFetchApiKey);
}

}  // namespace
}  // namespace wal::testing
