// Which brokers are stale leaders (one naming itself leader of a slot while most of the others
// name another), and dropping this process's connections to a broker. The whole path, with a
// leader really cut off from the other brokers, is PartitionTest.SlotLeaderCutOffFromTheOtherNodes.
#include "server/kafka/stale_leaders.h"

#include <gtest/gtest.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "server/kafka/mock_cluster.h"

namespace wal {
namespace {

using Named = std::map<int32_t, int32_t>;

TEST(StaleLeaders, ABrokerNamingItselfAgainstTheOthersIsStale) {
  EXPECT_EQ(StaleLeaders(Named{{1, 1}, {2, 2}, {3, 2}}, 3), std::vector<int32_t>{1});
  // One look misjudges when broker 3 has not yet heard of the new leader 2: the watch drops
  // only a verdict that two looks in a row reach.
  EXPECT_EQ(StaleLeaders(Named{{1, 1}, {2, 2}, {3, 1}}, 3), std::vector<int32_t>{2});
}

TEST(StaleLeaders, NoneWhileTheBrokersAgreeOrTooFewAnswer) {
  EXPECT_TRUE(StaleLeaders(Named{{1, 1}, {2, 1}, {3, 1}}, 3).empty());
  // One other broker of two is no majority: it may be the one behind.
  EXPECT_TRUE(StaleLeaders(Named{{1, 1}, {2, 2}}, 3).empty());
  EXPECT_TRUE(StaleLeaders(Named{{1, 1}, {2, 2}, {3, 1}, {4, 2}, {5, -1}}, 5).empty());
  EXPECT_EQ(StaleLeaders(Named{{1, 1}, {2, 2}, {3, 1}, {4, 1}, {5, 2}}, 5),
            std::vector<int32_t>{2});
  // Brokers that name no leader (an election under way) say nothing against one.
  EXPECT_TRUE(StaleLeaders(Named{{1, 1}, {2, -1}, {3, -1}}, 3).empty());
  EXPECT_TRUE(StaleLeaders(Named{{1, 1}}, 1).empty());
  // Two brokers that disagree: neither is a majority.
  EXPECT_TRUE(StaleLeaders(Named{{1, 1}, {2, 2}}, 2).empty());
}

TEST(ConfirmedStale, OnlyAVerdictTheCheckBeforeReachedToo) {
  const Slot a{"t", 0}, b{"t", 1};
  // Seen once: kept for the next check, nothing dropped.
  EXPECT_TRUE(ConfirmedStale({}, {{a, 2}}).empty());
  // Seen twice for the same slot: dropped.
  EXPECT_EQ(ConfirmedStale({{a, 2}}, {{a, 2}, {b, 3}}), std::set<int32_t>{2});
  // The verdict changed (the broker behind caught up and the other one is stale now, or it
  // concerned another slot): nothing confirmed.
  EXPECT_TRUE(ConfirmedStale({{a, 2}}, {{a, 1}}).empty());
  EXPECT_TRUE(ConfirmedStale({{a, 2}}, {{b, 2}}).empty());
  EXPECT_TRUE(ConfirmedStale({{a, 2}}, {}).empty());
}

// The addresses the cluster's brokers advertise, from a metadata request of `client`.
std::vector<std::string> BrokerAddresses(rd_kafka_t* client) {
  const rd_kafka_metadata_t* md = nullptr;
  std::vector<std::string> addresses;
  if (rd_kafka_metadata(client, 1, nullptr, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return addresses;
  }
  for (int b = 0; b < md->broker_cnt; ++b) {
    addresses.push_back(absl::StrCat(md->brokers[b].host, ":", md->brokers[b].port));
  }
  rd_kafka_metadata_destroy(md);
  return addresses;
}

// Produces one record to `topic` [0] and waits for its report: true if it was written.
bool Delivered(rd_kafka_t* producer, const std::string& topic) {
  if (rd_kafka_producev(producer, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(0),
                        RD_KAFKA_V_VALUE(const_cast<char*>("x"), 1),
                        RD_KAFKA_V_END) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return false;
  }
  return rd_kafka_flush(producer, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR;
}

TEST(DropConnectionsTo, ShutsTheConnectionsToABrokerAndTheClientConnectsAgain) {
  auto cluster = MockCluster::Create(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE((*cluster)->CreateTopic("dropped", 1).ok());
  auto producer =
      NewKafkaClient(RD_KAFKA_PRODUCER, {{"bootstrap.servers", (*cluster)->bootstrap_servers()}});
  ASSERT_TRUE(producer.ok()) << producer.status();
  ASSERT_TRUE(Delivered(producer->get(), "dropped"));  // connected to the partition's leader
  EXPECT_EQ(DropConnectionsTo("192.0.2.1:9092"), 0) << "nothing connects there";

  int dropped = 0;
  for (const std::string& broker : BrokerAddresses(producer->get())) {
    dropped += DropConnectionsTo(broker);
  }
  EXPECT_GE(dropped, 1) << "the producer holds a connection to the partition's leader";
  EXPECT_TRUE(Delivered(producer->get(), "dropped")) << "the producer must connect again";
}

TEST(StaleLeaderWatch, DropsNothingWhileEveryBrokerNamesTheSameLeader) {
  auto cluster = MockCluster::Create(3);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_TRUE((*cluster)->CreateTopic("watched", 2).ok());
  StaleLeaderWatchOptions options;
  options.kafka = {{"bootstrap.servers", (*cluster)->bootstrap_servers()}};
  int asked = 0;
  options.stalled_slots = [&asked] {
    ++asked;
    return std::vector<Slot>{{"watched", 0}, {"watched", 1}};
  };
  options.interval = std::chrono::hours(1);  // only CheckNow
  // A new client's connect and first answer, under a sanitizer on a busy host.
  options.query_timeout = std::chrono::seconds(5);
  StaleLeaderWatch watch(std::move(options));
  const auto named = watch.AskEachBroker({{"watched", 0}, {"watched", 1}});
  ASSERT_EQ(named.size(), 2u);
  for (const auto& [slot, leaders] : named) {
    // Asked again while another answered for it.
    EXPECT_EQ(leaders.size(), 3u) << "each broker answers";
    for (const auto& [broker, leader] : leaders) {
      EXPECT_TRUE(broker >= 1 && broker <= 3) << broker;
      EXPECT_EQ(leader, leaders.begin()->second) << "broker " << broker;
      EXPECT_GE(leader, 1);
    }
  }
  // Twice: a verdict counts only when the check before reached it too.
  EXPECT_TRUE(watch.CheckNow().empty());
  EXPECT_TRUE(watch.CheckNow().empty());
  EXPECT_EQ(watch.drops(), 0u);
  EXPECT_EQ(asked, 2);
}

}  // namespace
}  // namespace wal
