// RetriedEntries (log/retried_entries.h) on its own: claims, retries that wait for them, what a
// claim settled without ids leaves to the next retry, overlapping retries, and shutdown.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/core/core_fixture.h"

namespace wal::testing {
namespace {

struct LookResult {
  absl::StatusOr<RetriedEntries::Found> found;
  std::shared_ptr<RetriedEntries::Claim> claim;
};

class RetriedEntriesTest : public Core {
 protected:
  RetriedEntries& retried() { return core_->retried(); }

  AppendItem Item(uint64_t ns, uint64_t sequence) {
    return AppendItem{slots()[0], ns, data_, EntryStamp{0, kWriter, sequence}};
  }

  // Starts a lookup of `items` as a retry; its result arrives through the future.
  std::future<LookResult> Look(std::vector<AppendItem> items) {
    auto promise = std::make_shared<std::promise<LookResult>>();
    std::future<LookResult> result = promise->get_future();
    retried().Look(std::move(items), /*first_attempt_ms=*/0, Clock::now() + seconds(20),
                   [promise](absl::StatusOr<RetriedEntries::Found> found,
                             std::shared_ptr<RetriedEntries::Claim> claim) {
                     promise->set_value(LookResult{std::move(found), std::move(claim)});
                   });
    return result;
  }

  // Polls the state the event changes: `n` retries wait for a first copy.
  bool WaitingBecomes(int n) {
    const auto give_up = Clock::now() + seconds(10);
    while (retried().waiting() != n && Clock::now() < give_up) {
      std::this_thread::sleep_for(milliseconds(1));
    }
    return retried().waiting() == n;
  }

  static constexpr uint64_t kWriter = 71;
  const std::string data_ = "entry";
};

TEST_F(RetriedEntriesTest, ARetryWaitsForAClaimAndTakesTheIdsItWasWrittenWith) {
  std::shared_ptr<RetriedEntries::Claim> first = retried().ClaimFirstAttempt({Item(1, 1)});
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(retried().ClaimFirstAttempt({Item(1, 1)}), nullptr) << "claimed twice";
  std::future<LookResult> retry = Look({Item(1, 1)});
  ASSERT_TRUE(WaitingBecomes(1));
  EXPECT_EQ(retry.wait_for(milliseconds(200)), std::future_status::timeout)
      << "the retry did not wait for the first copy";
  first->Written({42});
  LookResult result = retry.get();
  ASSERT_TRUE(result.found.ok()) << result.found.status();
  ASSERT_EQ(result.found->size(), 1u);
  EXPECT_EQ((*result.found)[0], std::optional<uint64_t>(42));
}

// A claim released without ids (the call had ended; its records reported later) leaves the entry
// to the retry: it looks in the log, finds nothing there, and claims the entry for its own write,
// which the next retry then waits for.
TEST_F(RetriedEntriesTest, ARetryTakesOverAClaimSettledWithoutIds) {
  std::shared_ptr<RetriedEntries::Claim> first = retried().ClaimFirstAttempt({Item(2, 1)});
  std::future<LookResult> retry = Look({Item(2, 1)});
  ASSERT_TRUE(WaitingBecomes(1));
  first.reset();
  LookResult result = retry.get();
  ASSERT_TRUE(result.found.ok()) << result.found.status();
  EXPECT_EQ((*result.found)[0], std::nullopt);
  ASSERT_NE(result.claim, nullptr);
  EXPECT_EQ(retried().ClaimFirstAttempt({Item(2, 1)}), nullptr) << "the retry holds it now";
  std::future<LookResult> next = Look({Item(2, 1)});
  ASSERT_TRUE(WaitingBecomes(1));
  result.claim->Written({7});
  LookResult taken = next.get();
  ASSERT_TRUE(taken.found.ok()) << taken.found.status();
  EXPECT_EQ((*taken.found)[0], std::optional<uint64_t>(7));
}

// Two retries of the same two entries while another write holds one of them: neither holds one
// half while it waits for the other, so both end well before their deadlines.
TEST_F(RetriedEntriesTest, OverlappingRetriesDoNotWaitOnEachOther) {
  std::shared_ptr<RetriedEntries::Claim> holder = retried().ClaimFirstAttempt({Item(3, 2)});
  std::future<LookResult> x = Look({Item(3, 1), Item(3, 2)});
  ASSERT_TRUE(WaitingBecomes(1));
  std::future<LookResult> y = Look({Item(3, 1), Item(3, 2)});
  ASSERT_TRUE(WaitingBecomes(2));
  holder.reset();
  // One of them claims both and writes; its write is reported with ids.
  std::future<LookResult>* winner = nullptr;
  const auto give_up = Clock::now() + seconds(10);
  while (winner == nullptr && Clock::now() < give_up) {
    if (x.wait_for(milliseconds(1)) == std::future_status::ready) winner = &x;
    if (y.wait_for(milliseconds(1)) == std::future_status::ready) winner = &y;
  }
  ASSERT_NE(winner, nullptr) << "both retries still wait";
  LookResult first = winner->get();
  ASSERT_TRUE(first.found.ok()) << first.found.status();
  ASSERT_NE(first.claim, nullptr);
  first.claim->Written({10, 11});
  LookResult second = (winner == &x ? y : x).get();
  ASSERT_TRUE(second.found.ok()) << second.found.status();
  EXPECT_EQ((*second.found)[0], std::optional<uint64_t>(10));
  EXPECT_EQ((*second.found)[1], std::optional<uint64_t>(11));
}

TEST_F(RetriedEntriesTest, StopEndsARetryThatWaits) {
  std::shared_ptr<RetriedEntries::Claim> first = retried().ClaimFirstAttempt({Item(4, 1)});
  std::future<LookResult> retry = Look({Item(4, 1)});
  ASSERT_TRUE(WaitingBecomes(1));
  retried().Stop();
  LookResult result = retry.get();
  EXPECT_EQ(result.found.status().code(), absl::StatusCode::kUnavailable) << result.found.status();
}

TEST(RepeatedEntries, AreThoseOfOneWriterNamespaceAndSequence) {
  const Slot slot{"t", 0};
  const auto item = [&](uint64_t ns, uint64_t writer, uint64_t seq) {
    return AppendItem{slot, ns, "", EntryStamp{0, writer, seq}};
  };
  EXPECT_FALSE(HasRepeatedEntry({item(1, 5, 1), item(1, 5, 2), item(2, 5, 1), item(1, 6, 1)}));
  EXPECT_TRUE(HasRepeatedEntry({item(1, 5, 1), item(2, 5, 1), item(1, 5, 1)}));
  EXPECT_FALSE(HasRepeatedEntry({item(1, 0, 1), item(1, 0, 1)})) << "unstamped: no entry named";
}

}  // namespace
}  // namespace wal::testing
