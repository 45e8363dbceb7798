// Finds a broker that goes on naming itself leader of a slot after the other brokers chose
// another, and drops this process's connections to it (DropConnectionsTo).
//
// A leader cut off from the other brokers (walserver still reaching it) keeps the records sent
// to it unanswered until their produce timeout (30 s). Kafka serves one request at a time per
// connection, so a metadata request librdkafka sends it waits as long; and librdkafka sends its
// metadata requests to the broker it sent to last, which becomes that one. So the writer learns
// of the new leader only when the records time out. With the connections dropped, librdkafka's
// requests in flight fail (the records go again, with the same sequence numbers, so at most
// once), it asks a broker that is up, learns the new leader and moves the slot's records there
// (docs/RELIABILITY.md, "A slot's leader cut off from the other nodes").
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "server/common/slot.h"
#include "server/kafka/client.h"

namespace wal {

// The brokers that name themselves leader while most of the other brokers name another:
// `named[b]` is the leader broker b names (-1: none), for every broker that answered;
// `brokers` is how many the cluster has (at least 3: two have no majority). One look can
// misjudge: of three brokers, one that has not yet heard of a new leader makes the new one look
// stale, so StaleLeaderWatch acts only on a verdict that two looks in a row reach.
std::vector<int32_t> StaleLeaders(const std::map<int32_t, int32_t>& named, size_t brokers);

// One check's verdicts: each (slot, broker) that StaleLeaders found.
using StaleVerdicts = std::set<std::pair<Slot, int32_t>>;
// The brokers to drop: those of `now`'s verdicts that the check `before` it reached too.
std::set<int32_t> ConfirmedStale(const StaleVerdicts& before, const StaleVerdicts& now);

struct StaleLeaderWatchOptions {
  // For the clients that ask one broker each: bootstrap.servers and the security settings.
  KafkaProperties kafka;
  // The slots to check: those whose records have waited long without an answer.
  std::function<std::vector<Slot>()> stalled_slots;
  std::chrono::milliseconds interval{500};
  // After a check with a verdict the one before did not reach, the next check (which must reach
  // it again before the broker's connections are dropped) comes this much after it ended.
  std::chrono::milliseconds confirm_after{200};
  // How long one broker may take to answer (a metadata request takes milliseconds).
  std::chrono::milliseconds query_timeout{500};
  std::function<void()> on_drop;  // for metrics; may be empty
  std::string name;
};

class StaleLeaderWatch {
 public:
  explicit StaleLeaderWatch(StaleLeaderWatchOptions options);  // starts checking
  ~StaleLeaderWatch();

  // Checks the stalled slots once (the thread does, `interval` or `confirm_after` after the last
  // check ended): the stale leaders that the check before found too, each dropped.
  std::vector<int32_t> CheckNow();
  // Times a stale leader's connections were dropped (it had some).
  uint64_t drops() const;
  // The leader each broker, asked alone, names for each of `slots`: slot -> broker -> leader.
  // Brokers that do not answer in time are left out.
  std::map<Slot, std::map<int32_t, int32_t>> AskEachBroker(const std::vector<Slot>& slots);

 private:
  struct Broker {
    std::string address;  // as it advertises itself, host:port
  };
  // Asks a new client bootstrapped on `address` for the leaders of `slots` and the brokers:
  // the id of the broker that answered, or nothing if none did in time.
  std::optional<int32_t> Ask(const std::string& address, const std::vector<Slot>& slots,
                             std::map<Slot, int32_t>* leaders,
                             std::map<int32_t, Broker>* brokers) const;
  void Loop();
  bool Stopping() const;
  bool AwaitingConfirmation();

  const StaleLeaderWatchOptions options_;
  std::mutex check_mu_;  // one check at a time
  std::map<int32_t, Broker> brokers_ ABSL_GUARDED_BY(check_mu_);
  StaleVerdicts suspects_ ABSL_GUARDED_BY(check_mu_);    // the last check's
  bool unconfirmed_ ABSL_GUARDED_BY(check_mu_) = false;  // it reached a verdict new to it
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t drops_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace wal
