#include "server/kafka/stale_leaders.h"

#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace wal {

namespace {

struct MetadataDeleter {
  void operator()(const rd_kafka_metadata_t* md) const { rd_kafka_metadata_destroy(md); }
};
struct TopicDeleter {
  void operator()(rd_kafka_topic_t* t) const { rd_kafka_topic_destroy(t); }
};

}  // namespace

std::vector<int32_t> StaleLeaders(const std::map<int32_t, int32_t>& named, size_t brokers) {
  std::vector<int32_t> stale;
  for (const auto& [broker, leader] : named) {
    if (leader != broker) continue;
    size_t others = 0;  // other brokers that name a leader, not this one
    for (const auto& [other, their_leader] : named) {
      if (other != broker && their_leader >= 0 && their_leader != broker) ++others;
    }
    // A majority of the others: a broker that learned of a new leader a moment before the rest
    // does not make the old one stale. Two brokers have no majority either way.
    if (brokers >= 3 && 2 * others > brokers - 1) stale.push_back(broker);
  }
  return stale;
}

std::set<int32_t> ConfirmedStale(const StaleVerdicts& before, const StaleVerdicts& now) {
  std::set<int32_t> confirmed;
  for (const auto& verdict : now) {
    if (before.count(verdict) > 0) confirmed.insert(verdict.second);
  }
  return confirmed;
}

StaleLeaderWatch::StaleLeaderWatch(StaleLeaderWatchOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { Loop(); });
}

StaleLeaderWatch::~StaleLeaderWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

bool StaleLeaderWatch::Stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_;
}

uint64_t StaleLeaderWatch::drops() const {
  std::lock_guard<std::mutex> lock(mu_);
  return drops_;
}

bool StaleLeaderWatch::AwaitingConfirmation() {
  std::lock_guard<std::mutex> check(check_mu_);
  return unconfirmed_;
}

void StaleLeaderWatch::Loop() {
  std::chrono::milliseconds wait = options_.interval;
  std::unique_lock<std::mutex> lock(mu_);
  while (!wake_.wait_for(lock, wait, [this] { return stop_; })) {
    lock.unlock();
    CheckNow();
    wait = AwaitingConfirmation() ? options_.confirm_after : options_.interval;
    lock.lock();
  }
}

std::optional<int32_t> StaleLeaderWatch::Ask(const std::string& address,
                                             const std::vector<Slot>& slots,
                                             std::map<Slot, int32_t>* leaders,
                                             std::map<int32_t, Broker>* brokers) const {
  KafkaProperties properties = options_.kafka;
  properties["bootstrap.servers"] = address;
  // Quiet: while Kafka is down these fail every round, and Ask's caller counts the answers.
  properties["log_level"] = "0";
  auto client = NewKafkaClient(RD_KAFKA_PRODUCER, properties);
  if (!client.ok()) return std::nullopt;
  // One request for every topic the client has a handle for.
  std::set<std::string> topics;
  for (const Slot& slot : slots) topics.insert(slot.topic);
  std::vector<std::unique_ptr<rd_kafka_topic_t, TopicDeleter>> handles;
  for (const std::string& topic : topics) {
    handles.emplace_back(rd_kafka_topic_new(client->get(), topic.c_str(), nullptr));
    if (handles.back() == nullptr) return std::nullopt;
  }
  const rd_kafka_metadata_t* raw = nullptr;
  if (rd_kafka_metadata(client->get(), 0, nullptr, &raw,
                        static_cast<int>(options_.query_timeout.count())) !=
      RD_KAFKA_RESP_ERR_NO_ERROR) {
    return std::nullopt;
  }
  const std::unique_ptr<const rd_kafka_metadata_t, MetadataDeleter> md(raw);
  for (int b = 0; b < md->broker_cnt; ++b) {
    (*brokers)[md->brokers[b].id] =
        Broker{absl::StrCat(md->brokers[b].host, ":", md->brokers[b].port)};
  }
  for (int t = 0; t < md->topic_cnt; ++t) {
    for (int p = 0; p < md->topics[t].partition_cnt; ++p) {
      const Slot slot{md->topics[t].topic, md->topics[t].partitions[p].id};
      (*leaders)[slot] = md->topics[t].partitions[p].leader;
    }
  }
  // Usually the broker at `address`, but not always: once the client knows the cluster it may
  // ask a leader it connected to. A bootstrap broker has no id: its name is
  // [protocol://]host:port/bootstrap.
  if (md->orig_broker_id >= 0) return md->orig_broker_id;
  std::string_view name = md->orig_broker_name != nullptr ? md->orig_broker_name : "";
  if (const size_t scheme = name.find("://"); scheme != std::string_view::npos) {
    name.remove_prefix(scheme + 3);
  }
  name = name.substr(0, name.rfind('/'));
  for (int b = 0; b < md->broker_cnt; ++b) {
    if (name == absl::StrCat(md->brokers[b].host, ":", md->brokers[b].port)) {
      return md->brokers[b].id;
    }
  }
  return std::nullopt;
}

std::map<Slot, std::map<int32_t, int32_t>> StaleLeaderWatch::AskEachBroker(
    const std::vector<Slot>& slots) {
  std::lock_guard<std::mutex> check(check_mu_);
  std::map<Slot, std::map<int32_t, int32_t>> named;
  if (brokers_.empty()) {
    // Learns the brokers from whichever bootstrap server answers.
    std::map<Slot, int32_t> ignored;
    auto bootstrap = options_.kafka.find("bootstrap.servers");
    if (bootstrap == options_.kafka.end() ||
        !Ask(bootstrap->second, slots, &ignored, &brokers_).has_value()) {
      return named;
    }
  }
  std::map<int32_t, Broker> known;
  std::set<int32_t> answered;
  for (const auto& [id, broker] : brokers_) {
    // Each answer under the broker that gave it: another may answer for this one (a client that
    // learned the cluster may ask any broker it is connected to; under a sanitizer, 3 tries of 3
    // brokers once all went elsewhere).
    for (int attempt = 0; attempt < 8 && answered.count(id) == 0 && !Stopping(); ++attempt) {
      std::map<Slot, int32_t> leaders;
      const std::optional<int32_t> answered_by = Ask(broker.address, slots, &leaders, &known);
      if (!answered_by) break;  // not in time: the next round asks again
      answered.insert(*answered_by);
      for (const Slot& slot : slots) {
        auto it = leaders.find(slot);
        if (it != leaders.end()) named[slot][*answered_by] = it->second;
      }
    }
  }
  // The brokers any of them named now: one fenced out is gone from the others' answers, but the
  // stale one still names it; one gone from the cluster is no longer asked or counted.
  if (!known.empty()) brokers_ = std::move(known);
  return named;
}

std::vector<int32_t> StaleLeaderWatch::CheckNow() {
  const std::vector<Slot> slots = options_.stalled_slots();
  const std::map<Slot, std::map<int32_t, int32_t>> named =
      slots.empty() ? std::map<Slot, std::map<int32_t, int32_t>>{} : AskEachBroker(slots);
  std::map<int32_t, std::string> addresses;
  size_t brokers = 0;
  StaleVerdicts now;
  std::set<int32_t> stale;
  {
    std::lock_guard<std::mutex> check(check_mu_);
    brokers = brokers_.size();
    for (const auto& [id, broker] : brokers_) addresses[id] = broker.address;
    for (const auto& [slot, leaders] : named) {
      for (int32_t broker : StaleLeaders(leaders, brokers)) now.emplace(slot, broker);
    }
    stale = ConfirmedStale(suspects_, now);
    unconfirmed_ = false;
    for (const auto& verdict : now) unconfirmed_ |= suspects_.count(verdict) == 0;
    suspects_ = now;
  }
  for (const auto& [slot, broker] : now) {
    if (stale.count(broker) == 0) {
      spdlog::debug(
          "{}: broker {} names itself leader of {}[{}] against the others; looking again before "
          "dropping it",
          options_.name, broker, slot.topic, slot.partition);
      continue;
    }
    std::vector<std::string> others;
    for (const auto& [other, leader] : named.at(slot)) {
      if (other != broker) others.push_back(absl::StrCat(other, " names ", leader));
    }
    const int dropped = DropConnectionsTo(addresses[broker]);
    if (dropped == 0) continue;  // nothing of ours waits on it (or the slot before took them)
    if (options_.on_drop) options_.on_drop();
    {
      std::lock_guard<std::mutex> count(mu_);
      ++drops_;
    }
    spdlog::warn(
        "{}: broker {} ({}) names itself leader of {}[{}], broker {}: dropped {} connections to "
        "it, so that librdkafka asks the others and moves the slot's records",
        options_.name, broker, addresses[broker], slot.topic, slot.partition,
        absl::StrJoin(others, ", broker "), dropped);
  }
  return {stale.begin(), stale.end()};
}

}  // namespace wal
