// The slot index on the real Kafka broker that ./scripts/test.sh starts: reads through a
// walserver that skips what its index says holds none of their records get exactly what reads
// through a walserver that scans every record (--read_index=false) get, and what the writers
// were told was written. The writers are two sidecars appending at once (split entries, fences
// of new epochs), one of them killed in the middle of its appends (torn entries, retried
// copies); truncations prune the slot under the index; the indexed walserver is restarted,
// and takes the index it saved in Kafka.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/kafka/admin.h"
#include "server/kafka/client.h"
#include "tests/support/kafka_process_fixture.h"
#include "tests/support/test_util.h"

namespace wal::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

// Entries over 16 KiB are split into records, so that split entries interleave with others'.
constexpr int kMaxRecordBytes = 16 << 10;
constexpr uint64_t kNamespaces = 24;  // small ones; even ids written through the indexed server
constexpr uint64_t kBulk = 100;       // 2 MiB per append: the stretches a read skips
constexpr int kRounds = 3;

// What a read returned: its code and its entries as (id, data).
struct ReadResult {
  absl::StatusCode code = absl::StatusCode::kOk;
  std::vector<std::pair<uint64_t, std::string>> entries;
  bool operator==(const ReadResult& o) const { return code == o.code && entries == o.entries; }
};

// One read to compare: a namespace from an entry id, or from a time.
struct ReadCase {
  uint64_t ns = 0;
  uint64_t start_entry_id = 0;
  uint64_t start_time_ms = 0;
};

std::string Describe(const ReadCase& c) {
  return absl::StrCat("namespace ", c.ns, " from entry ", c.start_entry_id, " time ",
                      c.start_time_ms);
}

std::string Describe(const ReadResult& r) {
  std::string out =
      absl::StrCat("code ", static_cast<int>(r.code), ", ", r.entries.size(), " entries:");
  for (const auto& [id, data] : r.entries) absl::StrAppend(&out, " ", id, "/", data.size());
  return out;
}

void PrintTo(const ReadResult& r, std::ostream* os) { *os << Describe(r); }

ReadResult ReadThrough(Client& client, const ReadCase& c) {
  ReadOptions options;
  options.namespace_id = c.ns;
  options.start_entry_id = c.start_entry_id;
  options.start_time_ms = c.start_time_ms;
  ReadResult result;
  result.code = client
                    .Read(options,
                          [&](v1::Entry& e) {
                            result.entries.emplace_back(e.entry_id(), e.data());
                            return true;
                          })
                    .code();
  return result;
}

class SlotIndexTest : public KafkaProcessFixture {
 protected:
  // The model of one namespace, as its writer saw it.
  struct Model {
    std::map<uint64_t, std::string> acked;  // entry id -> data
    uint64_t truncated_before = 0;
  };

  void SetUp() override {
    KafkaProcessFixture::SetUp();
    ASSERT_FALSE(brokers_.empty());
    seed_ = std::random_device{}();
    std::cerr << "seed " << seed_ << "\n";
    rng_.seed(seed_);
    indexed_listen_ = absl::StrCat("127.0.0.1:", FreePort());
    ASSERT_NO_FATAL_FAILURE(StartIndexed());
    // One slot, so that every namespace's records lie between every other's.
    const std::vector<std::string> one_slot = {
        "--topic_count=1", "--partitions_per_topic=1", "--prune_interval_ms=300",
        absl::StrCat("--max_record_bytes=", kMaxRecordBytes)};
    std::vector<std::string> writer_args = one_slot, reference_args = one_slot;
    writer_args.push_back("--name=writer");
    reference_args.insert(reference_args.end(), {"--name=reference", "--read_index=false"});
    writer_ = StartServer(writer_args);
    reference_ = StartServer(reference_args);
    ASSERT_NE(writer_, nullptr);
    ASSERT_NE(reference_, nullptr);
    clients_[0] = Connect(indexed_->address());
    // Its calls retry for longer than the writer's restart takes, also in the sanitizer builds
    // (appends retry until their deadline anyway).
    ClientOptions writer_client;
    writer_client.target = writer_->address();
    writer_client.max_retries = 100;
    auto client = Client::Connect(writer_client);
    ASSERT_TRUE(client.ok()) << client.status();
    clients_[1] = std::move(*client);
    auto admin = NewKafkaClient(RD_KAFKA_PRODUCER, {{"bootstrap.servers", brokers_}});
    ASSERT_TRUE(admin.ok()) << admin.status();
    admin_ = std::move(*admin);
  }

  // The indexed walserver, in this process so that its metrics can be read; on the same
  // address after every restart.
  // Pruning every 300 ms by default: the tests prune under the index.
  void StartIndexed(milliseconds prune_interval = milliseconds(300)) {
    ServerOptions options = InProcessOneSlotOptions();
    options.listen = indexed_listen_;
    options.prune_interval = prune_interval;
    options.max_record_bytes = kMaxRecordBytes;
    options.name = "indexed";
    auto server = WalServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    indexed_ = std::move(*server);
  }
  void MakeTheTopicAgainAndRead(bool restart);
  void RestartIndexed(milliseconds prune_interval = milliseconds(300)) {
    skips_before_restarts_ += indexed_->metrics().read_index_skips.load();
    packed_before_restarts_ += indexed_->writer().packed_records();
    indexed_.reset();
    ASSERT_NO_FATAL_FAILURE(StartIndexed(prune_interval));
  }
  uint64_t Skips() const {
    return skips_before_restarts_ + indexed_->metrics().read_index_skips.load();
  }
  uint64_t PackedRecords() const {
    return packed_before_restarts_ + indexed_->writer().packed_records();
  }

  // Creates the namespaces, each through the sidecar that writes it.
  void CreateNamespaces() {
    for (uint64_t ns = 1; ns <= kNamespaces; ++ns) {
      ASSERT_TRUE(clients_[ns % 2]->CreateNamespace(ns).ok());
      model_[ns];
    }
    ASSERT_TRUE(clients_[0]->CreateNamespace(kBulk).ok());
    model_[kBulk];
  }

  void Acked(uint64_t ns, const std::vector<std::string>& batch,
             const absl::StatusOr<std::vector<uint64_t>>& ids) {
    ASSERT_TRUE(ids.ok()) << "namespace " << ns << ": " << ids.status();
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t k = 0; k < batch.size(); ++k) model_[ns].acked[(*ids)[k]] = batch[k];
  }

  // One writer's operations for `ops` steps: appends of 1-5 small entries (now and then one of
  // 40 KiB, split in three records), acquisitions (a fence), truncations, and through the
  // indexed server 2 MiB appends of the bulk namespace. `side` 0 writes the even namespaces
  // through the indexed server, 1 the odd ones through the writer.
  void Write(int side, int ops, uint32_t seed) {
    std::mt19937_64 rng(seed);
    Client& client = *clients_[side];
    for (int i = 0; i < ops && !::testing::Test::HasFatalFailure(); ++i) {
      const uint64_t ns = 2 * (rng() % (kNamespaces / 2)) + (side == 0 ? 2 : 1);
      const int op = rng() % 100;
      std::vector<std::string> batch;
      if (side == 0 && op < 4) {
        for (int k = 0; k < 32; ++k) batch.push_back(RandomData(rng, 64 << 10));
        Acked(kBulk, batch, client.Append(kBulk, batch));
      } else if (op < 30) {
        // A datanode's write batch: one small entry for each of several namespaces in one
        // call, which the server packs into shared records of the slot.
        v1::AppendRequest request;
        std::vector<uint64_t> namespaces;
        for (int k = 0, n = 2 + rng() % 5; k < n; ++k) {
          const uint64_t other = 2 * (rng() % (kNamespaces / 2)) + (side == 0 ? 2 : 1);
          if (std::find(namespaces.begin(), namespaces.end(), other) != namespaces.end()) continue;
          namespaces.push_back(other);
          v1::Entry* entry = request.add_entries();
          entry->set_namespace_id(other);
          entry->set_data(absl::StrCat("ns ", other, " seed ", seed, " op ", i, " batch"));
        }
        const absl::StatusOr<std::vector<uint64_t>> ids = client.Append(request);
        for (int k = 0; k < request.entries_size(); ++k) {
          const v1::Entry& entry = request.entries(k);
          Acked(entry.namespace_id(), {entry.data()},
                ids.ok() ? absl::StatusOr<std::vector<uint64_t>>(std::vector<uint64_t>{(*ids)[k]})
                         : ids.status());
        }
      } else if (op < 85) {
        for (int k = 0, n = 1 + rng() % 5; k < n; ++k) {
          batch.push_back(rng() % 20 == 0
                              ? RandomData(rng, 40 << 10)
                              : absl::StrCat("ns ", ns, " seed ", seed, " op ", i, " entry ", k));
        }
        Acked(ns, batch, client.Append(ns, batch));
      } else if (op < 90) {
        ASSERT_TRUE(client.AcquireNamespace(ns).ok()) << "namespace " << ns;
      } else {
        Truncate(client, ns, rng);
      }
      if (i % 25 == 0) {
        std::lock_guard<std::mutex> lock(mu_);
        times_ms_.push_back(std::chrono::duration_cast<milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
      }
    }
  }

  void Truncate(Client& client, uint64_t ns, std::mt19937_64& rng) {
    uint64_t to = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const Model& m = model_[ns];
      if (m.acked.empty()) return;
      auto it = m.acked.begin();
      std::advance(it, rng() % m.acked.size());
      to = rng() % 4 == 0 ? m.acked.rbegin()->first + 1 : it->first;
    }
    auto truncated = client.Truncate(ns, to);
    ASSERT_TRUE(truncated.ok()) << "namespace " << ns << ": " << truncated.status();
    std::lock_guard<std::mutex> lock(mu_);
    model_[ns].truncated_before = std::max(model_[ns].truncated_before, to);
  }

  // Both writers at once; the writer sidecar is killed (kill -9) and restarted while they
  // run, so its client retries the appends it was in the middle of.
  void WritePhase(int round) {
    std::thread even([&] { Write(0, 120, seed_ + 2 * round); });
    std::thread odd([&] { Write(1, 240, seed_ + 2 * round + 1); });
    std::this_thread::sleep_for(milliseconds(200 + rng_() % 400));
    const absl::Status restarted = writer_->Restart();
    even.join();
    odd.join();
    ASSERT_FALSE(HasFatalFailure()) << "a writer failed: the model may miss an append";
    ASSERT_TRUE(restarted.ok()) << restarted;
  }

  // Everything written so far is flushed: every namespace truncated to its end, so the pruner
  // deletes the slot's records under the index.
  void TruncateEverything() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [ns, m] : model_) {
      if (m.acked.empty()) continue;
      const uint64_t end = m.acked.rbegin()->first + 1;
      auto truncated = clients_[ns == kBulk ? 0 : ns % 2]->Truncate(ns, end);
      ASSERT_TRUE(truncated.ok()) << "namespace " << ns << ": " << truncated.status();
      m.truncated_before = end;
    }
  }

  // Until the pruners deleted the records below the truncation points (the lowest of them).
  void WaitForPruning() {
    uint64_t lowest = UINT64_MAX;
    for (const auto& [ns, m] : model_) {
      if (!m.acked.empty()) lowest = std::min(lowest, m.truncated_before);
    }
    const auto deadline = Clock::now() + seconds(60);
    int64_t low = 0;
    while (Clock::now() < deadline) {
      auto marks = QueryWatermarks(admin_.get(), Slot{prefix_ + "_0", 0}, deadline);
      ASSERT_TRUE(marks.ok()) << marks.status();
      low = marks->low;
      if (static_cast<uint64_t>(low) >= lowest) return;
      std::this_thread::sleep_for(milliseconds(100));
    }
    FAIL() << "the slot was not pruned to " << lowest << " (low watermark " << low << ")";
  }

  // Reads of every namespace from random starts, and of a few that were never created.
  std::vector<ReadCase> ReadCases() {
    std::vector<ReadCase> cases;
    for (int i = 0; i < 40; ++i) {
      ReadCase c;
      c.ns = 1 + rng_() % (kNamespaces + 2);  // the last two were never created
      const Model& m = model_[c.ns];
      const int how = rng_() % 6;
      if (how == 0 && !times_ms_.empty()) {
        c.start_time_ms = times_ms_[rng_() % times_ms_.size()];
      } else if (how <= 2 && !m.acked.empty()) {
        auto it = m.acked.begin();
        std::advance(it, rng_() % m.acked.size());
        c.start_entry_id = it->first;
      }  // else from the namespace's first entry
      cases.push_back(c);
    }
    return cases;
  }

  // Checks a read from an entry id against what the writers were told. An entry's id in a
  // read is the id of its first copy at or after the read's start, which is not the id its
  // writer was answered with when the writer retried it (CONTRACT.md, Append): so the model
  // checks the entries' data, which is unique. A start below the namespace's first entry is
  // OUT_OF_RANGE.
  void CheckAgainstModel(const ReadCase& c, const ReadResult& got) {
    absl::StatusCode want = absl::StatusCode::kOk;
    const Model& m = model_[c.ns];
    if (c.ns > kNamespaces && c.ns != kBulk) {
      want = absl::StatusCode::kNotFound;
    } else if (c.start_entry_id != 0 && c.start_entry_id < m.truncated_before) {
      want = absl::StatusCode::kOutOfRange;
    }
    ASSERT_EQ(got.code, want) << Describe(c);
    if (want != absl::StatusCode::kOk) return;
    std::set<std::string> written, read;
    for (const auto& [id, data] : m.acked) written.insert(data);
    const uint64_t first = std::max(c.start_entry_id, m.truncated_before);
    std::optional<uint64_t> last;  // an entry's id may be 0 (the slot's first record)
    for (const auto& [id, data] : got.entries) {
      EXPECT_GE(id, first) << Describe(c) << ": entry " << id << " below the read's start";
      if (last) {
        EXPECT_GT(id, *last) << Describe(c) << ": entry " << id << " out of order";
      }
      last = id;
      EXPECT_TRUE(read.insert(data).second) << Describe(c) << ": entry " << id << " twice";
      EXPECT_TRUE(written.count(data)) << Describe(c) << ": entry " << id << " never written";
    }
    for (auto it = m.acked.lower_bound(std::max(c.start_entry_id, m.truncated_before));
         it != m.acked.end(); ++it) {
      EXPECT_TRUE(read.count(it->second))
          << Describe(c) << ": entry acked as " << it->first << " missing";
    }
  }

  // The cases read through the indexed server by 4 threads at once (so that reads share its
  // scans and join them while they skip), then one by one through the reference server.
  void CompareReads(const std::vector<ReadCase>& cases) {
    std::vector<ReadResult> indexed(cases.size());
    std::atomic<size_t> next{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 4; ++t) {
      readers.emplace_back([&] {
        auto client = Connect(indexed_listen_);
        for (size_t i = next++; i < cases.size(); i = next++) {
          indexed[i] = ReadThrough(*client, cases[i]);
        }
      });
    }
    for (auto& r : readers) r.join();
    auto reference = Connect(reference_->address());
    for (size_t i = 0; i < cases.size(); ++i) {
      const ReadResult full = ReadThrough(*reference, cases[i]);
      EXPECT_EQ(indexed[i], full) << Describe(cases[i]) << "\nindexed: " << Describe(indexed[i])
                                  << "\nfull scan: " << Describe(full);
      if (cases[i].start_time_ms == 0) {
        CheckAgainstModel(cases[i], full);
      }
      ++compared_;
    }
  }

  // Every namespace but the bulk one (so that the scan can skip) in one ReadMany through the
  // indexed server, each from a random start, against one Read each through the reference
  // server.
  void CompareReadMany() {
    ReadManyOptions options;
    std::vector<ReadCase> cases;
    std::map<uint64_t, ReadResult> got;
    for (const auto& [ns, m] : model_) {
      if (ns == kBulk) continue;
      ReadCase c{ns, 0, 0};
      if (!m.acked.empty() && rng_() % 2 == 0) {
        auto it = m.acked.begin();
        std::advance(it, rng_() % m.acked.size());
        c.start_entry_id = it->first;
      }
      options.namespaces.push_back({ns, c.start_entry_id, 0, 0, false});
      cases.push_back(c);
    }
    const absl::Status status = clients_[0]->ReadMany(
        options,
        [&](v1::Entry& e) {
          got[e.namespace_id()].entries.emplace_back(e.entry_id(), e.data());
          return true;
        },
        [&](const v1::ReadEnd& end) {
          got[end.namespace_id()].code = static_cast<absl::StatusCode>(end.code());
          return true;
        });
    ASSERT_TRUE(status.ok()) << status;
    auto reference = Connect(reference_->address());
    for (const ReadCase& c : cases) {
      EXPECT_EQ(got[c.ns], ReadThrough(*reference, c)) << "ReadMany: " << Describe(c);
      ++compared_;
    }
  }

  uint32_t seed_ = 0;
  std::mt19937_64 rng_;
  std::string indexed_listen_;
  std::unique_ptr<WalServer> indexed_;
  std::unique_ptr<ServerProcess> writer_, reference_;
  std::unique_ptr<Client> clients_[2];  // to the indexed server, to the writer
  KafkaHandle admin_;
  std::mutex mu_;  // guards model_ and times_ms_ while the writers run
  std::map<uint64_t, Model> model_;
  std::vector<int64_t> times_ms_;
  uint64_t skips_before_restarts_ = 0;
  uint64_t packed_before_restarts_ = 0;
  int compared_ = 0;
};

TEST_F(SlotIndexTest, IndexedReadsGetWhatFullScansGetAcrossSidecarsKillsAndTruncations) {
  ASSERT_NO_FATAL_FAILURE(CreateNamespaces());
  for (int round = 0; round < kRounds; ++round) {
    ASSERT_NO_FATAL_FAILURE(WritePhase(round));
    if (round == 1) {
      // Reads through an index that covers records pruned since, then through the one the
      // restarted walserver took from Kafka.
      ASSERT_NO_FATAL_FAILURE(TruncateEverything());
      ASSERT_NO_FATAL_FAILURE(WaitForPruning());
      ASSERT_NO_FATAL_FAILURE(WritePhase(round + kRounds));
      ASSERT_NO_FATAL_FAILURE(CompareReads(ReadCases()));
      ASSERT_NO_FATAL_FAILURE(RestartIndexed());
      ASSERT_EQ(indexed_->metrics().read_index_restores.load(), 1u)
          << "the restarted walserver took no index from Kafka";
    }
    // Twice: the first reads fill the index, the second skip.
    ASSERT_NO_FATAL_FAILURE(CompareReads(ReadCases()));
    ASSERT_NO_FATAL_FAILURE(CompareReads(ReadCases()));
    ASSERT_NO_FATAL_FAILURE(CompareReadMany());
  }
  auto marks = QueryWatermarks(admin_.get(), Slot{prefix_ + "_0", 0}, Clock::now() + seconds(10));
  ASSERT_TRUE(marks.ok()) << marks.status();
  std::cerr << "RESULT slot index: " << compared_ << " reads compared, " << Skips()
            << " skips by the index, " << PackedRecords() << " packed records; slot " << marks->low
            << ".." << marks->high << "\n";
  EXPECT_GT(Skips(), 0u) << "the index never skipped: the test proves nothing";
  EXPECT_GT(PackedRecords(), 0u) << "no packed record in the slot: the test proves nothing of them";
  EXPECT_GT(marks->low, 0) << "nothing was pruned under the index";
}

// The data topic deleted and made again (by the writer sidecar's start), and written past
// where the indexed server's index ended before any read looked: the index was built from the
// old log and must not be trusted for the new one, whose end alone cannot tell them apart.
// With `restart`, the indexed server stops (saving the old log's index to Kafka) before the
// topic goes and starts (taking that index) after it was made again.
void SlotIndexTest::MakeTheTopicAgainAndRead(bool restart) {
  constexpr uint64_t kSmall = 1;
  Client& indexed = *clients_[0];
  ASSERT_TRUE(indexed.CreateNamespace(kSmall).ok());
  ASSERT_TRUE(indexed.CreateNamespace(kBulk).ok());
  // The old log: the small namespace's two entries with 2 MiB of the bulk one between them.
  std::mt19937_64 rng(seed_);
  std::vector<std::string> bulk;
  for (int k = 0; k < 32; ++k) bulk.push_back(RandomData(rng, 64 << 10));
  ASSERT_TRUE(indexed.Append(kSmall, {"old 0"}).ok());
  ASSERT_TRUE(indexed.Append(kBulk, bulk).ok());
  ASSERT_TRUE(indexed.Append(kSmall, {"old 1"}).ok());
  const ReadCase small{kSmall, 0, 0};
  ASSERT_EQ(ReadThrough(indexed, small).entries.size(), 2u);
  ASSERT_EQ(ReadThrough(indexed, small).entries.size(), 2u);
  ASSERT_GT(Skips(), 0u) << "the old log's index was never used: the test proves nothing";
  const std::string topic = prefix_ + "_0";
  auto old_marks = QueryWatermarks(admin_.get(), Slot{topic, 0}, Clock::now() + seconds(10));
  ASSERT_TRUE(old_marks.ok()) << old_marks.status();
  auto old_id = QueryTopicId(admin_.get(), topic, Clock::now() + seconds(10));
  ASSERT_TRUE(old_id.ok()) << old_id.status();
  ASSERT_NE(*old_id, TopicId{}) << "a Kafka with topic ids";

  // Counted from here: the indexed walserver's pruner reads the slot too (a read of each
  // namespace's first entry), and may be the read that finds the topic made again.
  const uint64_t drops_before = restart ? 0 : indexed_->metrics().read_index_drops.load();
  if (restart) indexed_.reset();  // saves the old log's index
  ASSERT_NO_FATAL_FAILURE(DeleteTopic(admin_.get(), topic));
  ASSERT_TRUE(writer_->Restart().ok()) << "the writer sidecar makes its topics again";
  // The new log, through the writer: the small namespace's entry where the old log held the
  // bulk namespace's records, and the log longer than the old one.
  Client& writer = *clients_[1];
  std::vector<std::string> filler(40, std::string(100, 'f'));
  ASSERT_TRUE(writer.Append(kBulk, filler).ok());
  auto placed = writer.Append(kSmall, {"new 0"});
  ASSERT_TRUE(placed.ok()) << placed.status();
  while (true) {
    auto marks = QueryWatermarks(admin_.get(), Slot{topic, 0}, Clock::now() + seconds(10));
    ASSERT_TRUE(marks.ok()) << marks.status();
    if (marks->high > old_marks->high) break;
    ASSERT_TRUE(writer.Append(kBulk, filler).ok());
  }
  ASSERT_LT((*placed)[0], static_cast<uint64_t>(old_marks->high));
  auto new_id = QueryTopicId(admin_.get(), topic, Clock::now() + seconds(10));
  ASSERT_TRUE(new_id.ok()) << new_id.status();
  ASSERT_NE(*new_id, *old_id);
  if (restart) {
    ASSERT_NO_FATAL_FAILURE(StartIndexed());
    ASSERT_EQ(indexed_->metrics().read_index_restores.load(), 1u) << "the old log's index";
  }

  const ReadResult got = ReadThrough(indexed, small);
  ASSERT_EQ(got.code, absl::StatusCode::kOk);
  ASSERT_EQ(got.entries.size(), 1u) << Describe(got);
  EXPECT_EQ(got.entries[0], std::make_pair((*placed)[0], std::string("new 0")));
  EXPECT_EQ(got, ReadThrough(*Connect(reference_->address()), small));
  // Dropped at least once. Not exactly once: a scan (the pruner's above all) that meets the
  // partition while it is being made again can find its end gone back again and again (96
  // times in one ThreadSanitizer run).
  EXPECT_GT(indexed_->metrics().read_index_drops.load(), drops_before);
}

TEST_F(SlotIndexTest, ATopicMadeAgainIsNotReadThroughTheOldTopicsIndex) {
  MakeTheTopicAgainAndRead(/*restart=*/false);
}

TEST_F(SlotIndexTest, ATopicMadeAgainIsNotReadThroughTheOldTopicsSavedIndex) {
  MakeTheTopicAgainAndRead(/*restart=*/true);
}

// The index kept in Kafka: the indexed walserver saves it when it stops, takes it when it
// starts again, and its first read of a small namespace skips the other one's records instead
// of reading the slot whole to build the index again.
TEST_F(SlotIndexTest, ARestartedWalserverSkipsFromItsFirstRead) {
  constexpr uint64_t kSmall = 1;
  Client& indexed = *clients_[0];
  ASSERT_TRUE(indexed.CreateNamespace(kSmall).ok());
  ASSERT_TRUE(indexed.CreateNamespace(kBulk).ok());
  std::mt19937_64 rng(seed_);
  for (int part = 0; part < 3; ++part) {
    ASSERT_TRUE(indexed.Append(kSmall, {absl::StrCat("small ", part)}).ok());
    std::vector<std::string> bulk;
    for (int k = 0; k < 32; ++k) bulk.push_back(RandomData(rng, 64 << 10));
    ASSERT_TRUE(indexed.Append(kBulk, bulk).ok());
  }
  const ReadCase small{kSmall, 0, 0};
  const ReadResult first = ReadThrough(indexed, small);  // builds the index
  ASSERT_EQ(first.code, absl::StatusCode::kOk);
  ASSERT_EQ(first.entries.size(), 3u) << Describe(first);
  ASSERT_EQ(ReadThrough(indexed, small), first);
  ASSERT_GT(Skips(), 0u) << "the index was never used before the restart: the test proves nothing";

  // Without pruning after the restart: the pruner's reads (about 66 KiB a round here) would
  // count in what the metric says the test's read fetched.
  ASSERT_NO_FATAL_FAILURE(RestartIndexed(std::chrono::hours(1)));
  const Metrics& metrics = indexed_->metrics();
  ASSERT_EQ(metrics.read_index_restores.load(), 1u)
      << "the restarted walserver took no index from Kafka";
  const uint64_t scanned_before = metrics.read_scanned_bytes.load();
  const ReadResult again = ReadThrough(indexed, small);
  const uint64_t scanned = metrics.read_scanned_bytes.load() - scanned_before;
  EXPECT_EQ(again, first);
  EXPECT_EQ(again, ReadThrough(*Connect(reference_->address()), small));
  EXPECT_GT(metrics.read_index_skips.load(), 0u)
      << "the first read after the restart read the slot whole";
  EXPECT_LT(scanned, 1u << 20) << "it fetched more than 1 MiB of the 6 MiB slot; skips "
                               << metrics.read_index_skips.load() << ", index drops "
                               << metrics.read_index_drops.load() << ", rewinds "
                               << metrics.read_scan_rewinds.load() << ", fetch size changes "
                               << metrics.read_fetch_size_changes.load();
}

// Saved while it runs, not only when it stops: a walserver that builds its index through its
// reads saves it within its save interval, and another one started on the same topics (a
// sidecar killed and started again, or moved) takes it.
TEST_F(SlotIndexTest, AnIndexSavedWhileItsWalserverRunsIsTakenByAnotherOne) {
  constexpr uint64_t kSmall = 1;
  ServerOptions options = InProcessOneSlotOptions();
  options.max_record_bytes = kMaxRecordBytes;
  options.read_index_save_interval = milliseconds(100);
  options.name = "saver";
  auto saver = WalServer::Start(options);
  ASSERT_TRUE(saver.ok()) << saver.status();
  auto client = Connect((*saver)->address());
  ASSERT_TRUE(client->CreateNamespace(kSmall).ok());
  ASSERT_TRUE(client->CreateNamespace(kBulk).ok());
  std::mt19937_64 rng(seed_);
  for (int part = 0; part < 3; ++part) {
    ASSERT_TRUE(client->Append(kSmall, {absl::StrCat("small ", part)}).ok());
    std::vector<std::string> bulk;
    for (int k = 0; k < 32; ++k) bulk.push_back(RandomData(rng, 64 << 10));
    ASSERT_TRUE(client->Append(kBulk, bulk).ok());
  }
  const ReadCase small{kSmall, 0, 0};
  const ReadResult first = ReadThrough(*client, small);  // builds the saver's index
  ASSERT_EQ(first.entries.size(), 3u) << Describe(first);
  // A save that ends after a read may have taken its snapshot before the read's scan told the
  // index what it read; one that begins after such a save ended cannot have. Saves run one
  // after the other, and each read changes the index, so that a save follows it: the second
  // save counted after a read's start began after the first read was recorded.
  for (int read = 0; read < 2; ++read) {
    const uint64_t saves = (*saver)->metrics().read_index_saves.load();
    ASSERT_EQ(ReadThrough(*client, small), first);
    const auto deadline = Clock::now() + seconds(30);
    while ((*saver)->metrics().read_index_saves.load() == saves && Clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(20));
    }
    ASSERT_GT((*saver)->metrics().read_index_saves.load(), saves)
        << "the running walserver saved nothing within 30 s of a read";
  }

  options.name = "taker";
  options.read_index_save_interval = ServerOptions().read_index_save_interval;
  auto taker = WalServer::Start(options);
  ASSERT_TRUE(taker.ok()) << taker.status();
  EXPECT_EQ((*taker)->metrics().read_index_restores.load(), 1u);
  const ReadResult taken = ReadThrough(*Connect((*taker)->address()), small);
  EXPECT_EQ(taken, first);
  EXPECT_GT((*taker)->metrics().read_index_skips.load(), 0u)
      << "the other walserver's first read read the slot whole";
}

}  // namespace
}  // namespace wal::testing
