// The read modes: replay (against a raw scan of the slot) and follow (against a consumer).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/walbench/bench.h"
#include "grpcpp/grpcpp.h"
#include "server/common/crc32c.h"
#include "server/common/namespace_key.h"
#include "server/kafka/admin.h"
#include "server/kafka/client.h"
#include "server/kafka/consumer.h"
#include "server/log/record_format.h"

namespace walbench {
namespace {

// The floor of any replay through gRPC on this host: a server in this process that streams
// prebuilt responses (the entries of a replay, with the fields walserver fills, in batches of
// walserver's 1 MiB) to the same client, and does nothing else: no Kafka, no copies of its own.
class PrebuiltReads final : public wal::v1::WalService::Service {
 public:
  PrebuiltReads(const std::string& payload, uint64_t bytes) {
    const uint32_t crc = wal::Crc32c(payload);
    wal::v1::ReadResponse batch;
    size_t batch_bytes = 0;
    for (uint64_t id = 0; id * payload.size() < bytes; ++id) {
      wal::v1::Entry* e = batch.add_entries();
      e->set_namespace_id(1);
      e->set_entry_id(id);
      e->set_sequence(id + 1);
      // Epoch 0 (left out) and a writer id of ten varint bytes, as walserver sends walbench's.
      e->set_writer_id(0x9e3779b97f4a7c15u);
      e->set_crc32c(crc);
      e->set_data(payload);
      if ((batch_bytes += payload.size()) >= (1 << 20)) {
        batches_.push_back(std::move(batch));
        batch.Clear();
        batch_bytes = 0;
      }
    }
    if (batch.entries_size() > 0) batches_.push_back(std::move(batch));
  }

  grpc::Status Read(grpc::ServerContext*, const wal::v1::ReadRequest*,
                    grpc::ServerWriter<wal::v1::ReadResponse>* writer) override {
    for (const wal::v1::ReadResponse& batch : batches_) {
      if (!writer->Write(batch)) break;
    }
    return grpc::Status::OK;
  }

 private:
  std::vector<wal::v1::ReadResponse> batches_;
};

// Sends a marker (entry number -1) every 100 ms until the follower got one: from then on it
// is at the slot's end and fetching. Entries timed before that would count the read's opening
// (a consumer, its first fetch), and a consumer that starts at the end would miss them.
void UntilFollowing(const std::atomic<bool>& following, const std::function<void()>& send_marker) {
  const auto give_up = Clock::now() + std::chrono::seconds(30);
  while (!following) {
    if (Clock::now() > give_up) {
      Must(absl::DeadlineExceededError("the follower got no marker in 30 s"), "follow");
    }
    send_marker();
    for (int ms = 0; ms < 100 && !following; ++ms) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

}  // namespace

// How late a follower sees an entry: one entry every 20 ms, each carrying its number, from
// one client; a follow read through the same walserver on another client notes when each
// arrives. Direct: a librdkafka consumer following the same partition while a producer writes
// a record every 20 ms. Latency counts from the call (or produce) to the follower's receipt.
Row Bench::FollowService(const wal::v1::Namespace& ns, int count,
                         const std::string& follower_address, const std::string& system) {
  auto appender = Connect(server.address());
  auto follower_client = Connect(follower_address);
  wal::ReadOptions read;
  read.namespace_id = ns.namespace_id();
  read.start_entry_id =
      static_cast<uint64_t>(client->GetNamespace(ns.namespace_id())->next_entry_id());
  read.follow = true;
  std::unique_ptr<wal::ReadStream> follower = follower_client->OpenRead(read);
  std::vector<Clock::time_point> sent(count);
  std::vector<std::atomic<bool>> was_sent(count);
  std::atomic<bool> following{false};
  Latencies latencies;
  std::thread reader([&] {
    wal::v1::Entry e;
    for (int got = 0; got < count && follower->Next(&e);) {
      const auto now = Clock::now();
      const int i = std::stoi(e.data().substr(0, e.data().find(' ')));
      if (i == -1) following = true;
      if (i < 0 || i >= count || !was_sent[i].load()) continue;
      latencies.Add(duration<double, std::milli>(now - sent[i]).count());
      ++got;
    }
  });
  UntilFollowing(following, [&] {
    Must(appender->Append(ns.namespace_id(), {"-1 "}).status(), "follow marker");
  });
  const auto t0 = Clock::now() + std::chrono::milliseconds(20);
  for (int i = 0; i < count; ++i) {
    std::this_thread::sleep_until(t0 + i * std::chrono::milliseconds(20));
    std::string data = absl::StrCat(i, " ");
    data.resize(payload.size(), 'x');
    sent[i] = Clock::now();
    was_sent[i] = true;
    Must(appender->Append(ns.namespace_id(), {data}).status(), "follow append");
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  follower->Cancel();
  reader.join();
  return FollowRow(system, latencies, count);
}

Row Bench::FollowDirect(const wal::v1::Namespace& ns, int count) {
  wal::KafkaProperties props{{"bootstrap.servers", absl::GetFlag(FLAGS_brokers)},
                             {"socket.nagle.disable", "true"}};
  auto consumer = std::move(*wal::Consumer::Create(props, "walbench-follow"));
  // From the slot's end as asked here: the consumer's position is known before any marker.
  auto end = wal::QueryWatermarks(consumer->handle(), wal::Slot{ns.topic(), ns.partition()},
                                  Clock::now() + std::chrono::seconds(10));
  Must(end.status(), "the slot's end");
  Must(consumer->Assign(ns.topic(), ns.partition(), end->high), "assigning the follower");
  const std::string key = wal::EncodeKey(1u << 30);  // no namespace's: walserver skips nothing
  std::vector<Clock::time_point> sent(count);
  std::vector<std::atomic<bool>> was_sent(count);
  std::atomic<bool> stop{false};
  std::atomic<bool> following{false};
  Latencies latencies;
  std::thread reader([&] {
    for (int got = 0; got < count && !stop;) {
      wal::Message m = consumer->Poll(100);
      if (m && m->err && m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        std::fprintf(stderr, "walbench: follow: the consumer: %s\n",
                     rd_kafka_message_errstr(m.get()));
      }
      if (!m || m->err) continue;
      const auto now = Clock::now();
      auto record =
          wal::DecodeRecord(std::string_view(static_cast<const char*>(m->payload), m->len));
      if (!record.ok()) continue;
      const std::string data(record->payload);
      const int i = std::stoi(data.substr(0, data.find(' ')));
      if (i == -1) following = true;
      if (i < 0 || i >= count || !was_sent[i].load()) continue;
      latencies.Add(duration<double, std::milli>(now - sent[i]).count());
      ++got;
    }
  });
  BatchWait wait;
  UntilFollowing(following, [&] {
    // Kept until its delivery: the producer does not copy it.
    const std::string marker = wal::EncodeEntry("-1 ", 0, 1000000).front();
    wait.Expect(1);
    Must(direct.get().Produce(ns.topic(), ns.partition(), key, marker, &wait), "produce a marker");
    if (wait.Wait() != 0) Must(absl::UnavailableError("a marker failed"), "produce");
  });
  const auto t0 = Clock::now() + std::chrono::milliseconds(20);
  for (int i = 0; i < count; ++i) {
    std::this_thread::sleep_until(t0 + i * std::chrono::milliseconds(20));
    std::string data = absl::StrCat(i, " ");
    data.resize(payload.size(), 'x');
    const std::string record = wal::EncodeEntry(data, i + 1, 1000000).front();
    wait.Expect(1);
    sent[i] = Clock::now();
    was_sent[i] = true;
    Must(direct.get().Produce(ns.topic(), ns.partition(), key, record, &wait), "produce");
    if (wait.Wait() != 0) Must(absl::UnavailableError("a record failed"), "produce");
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  stop = true;
  reader.join();
  return FollowRow("direct consumer", latencies, count);
}

Row Bench::FollowRow(const std::string& system, Latencies& latencies, int count) {
  Row r{"follow", system, "1 entry / 20 ms"};
  r.entries_per_s = static_cast<double>(latencies.ms.size());  // entries seen of `count`
  r.p50_ms = latencies.Percentile(0.5);
  r.p99_ms = latencies.Percentile(0.99);
  r.p999_ms = latencies.Percentile(1.0);
  r.value = count;
  return r;
}

void Bench::Follow() {
  const int count = absl::GetFlag(FLAGS_smoke) ? 25 : 250;
  // A second walserver on the same topics: a follower of a region served by another sidecar.
  Walserver other(server.prefix());
  other.Start();
  std::vector<Row> same, another, direct_rows;
  for (int run = 0; run < runs; ++run) {
    same.push_back(FollowService(namespaces[0], count, server.address(), "service same server"));
    Emit(same.back());
    another.push_back(FollowService(namespaces[0], count, other.address(), "service other server"));
    Emit(another.back());
    direct_rows.push_back(FollowDirect(namespaces[0], count));
    Emit(direct_rows.back());
  }
  other.Stop();
  const Row d = MedianByP99(direct_rows);
  // value: the ratio of the p99s; the p99 column: their difference.
  for (const Row& s : {MedianByP99(same), MedianByP99(another)}) {
    Row ratio{"follow", "ratio p99 " + s.system.substr(8) + "/direct", s.parameter};
    ratio.value = s.p99_ms / std::max(1e-9, d.p99_ms);
    ratio.p99_ms = s.p99_ms - d.p99_ms;
    Emit(ratio);
  }
}

// Over 80 lines on purpose: one experiment (set up a slot, then three measured phases whose
// figures are compared in one table) reads best top to bottom.
void Bench::Replay() {
  // A slot of its own: a fresh server with one topic of one partition, and room for all the
  // namespaces' reads at once.
  Walserver replay(
      absl::StrCat("replay", getpid()),
      {"--topic_count=1", "--partitions_per_topic=1",
       absl::StrCat("--max_concurrent_reads=", 2 * absl::GetFlag(FLAGS_replay_namespaces))});
  replay.Start();
  auto c = Connect(replay.address());
  const int count = absl::GetFlag(FLAGS_replay_namespaces);
  for (int n = 1; n <= count; ++n) Must(c->CreateNamespace(n).status(), "create");
  const auto ns = c->GetNamespace(1);
  const int64_t start = ns->next_entry_id();
  const uint64_t total = static_cast<uint64_t>(absl::GetFlag(FLAGS_replay_mib)) << 20;
  const int batch = 64;
  uint64_t written = 0;
  std::vector<uint64_t> written_of(count + 1, 0);  // entry bytes of each namespace
  for (int round = 0; written < total; ++round) {
    wal::v1::AppendRequest request;
    for (int i = 0; i < batch; ++i) {
      auto* e = request.add_entries();
      e->set_namespace_id(1 + (round * batch + i) % count);
      e->set_data(payload);
      written += payload.size();
      written_of[e->namespace_id()] += payload.size();
    }
    Must(c->Append(request).status(), "append");
  }
  const int64_t end = c->GetNamespace(1)->next_entry_id();
  const double mb = written / 1e6;

  std::vector<double> one, all, raw, many;
  for (int run = 0; run < runs; ++run) {
    auto t0 = Clock::now();
    const uint64_t got_first = ReadWhole(*c, 1);
    one.push_back(duration<double>(Clock::now() - t0).count());
    MustDeliver(got_first, written_of[1], "read of namespace 1");
    uint64_t bytes = 0;
    raw.push_back(RawScan(ns->topic(), ns->partition(), start, end, &bytes));
    t0 = Clock::now();
    std::vector<std::thread> readers;
    for (int r = 1; r <= count; ++r) {
      readers.emplace_back([&, r] {
        MustDeliver(ReadWhole(*c, r), written_of[r], "one of the reads of every namespace at once");
      });
    }
    for (auto& t : readers) t.join();
    all.push_back(duration<double>(Clock::now() - t0).count());
    // The same namespaces on one ReadMany stream, as a datanode opens its regions.
    t0 = Clock::now();
    wal::ReadManyOptions read_many;
    for (int r = 1; r <= count; ++r) read_many.namespaces.push_back({uint64_t(r), 0, 0});
    int ended = 0;
    std::vector<uint64_t> got_of(count + 1, 0);
    Must(c->ReadMany(
             read_many,
             [&](wal::v1::Entry& e) {
               got_of.at(e.namespace_id()) += e.data().size();
               return true;
             },
             [&](const wal::v1::ReadEnd& end) {
               if (end.code() != 0) Must(absl::InternalError(end.message()), "ReadMany");
               ++ended;
               return true;
             }),
         "ReadMany");
    if (ended != count) Must(absl::InternalError("not every namespace ended"), "ReadMany");
    many.push_back(duration<double>(Clock::now() - t0).count());
    for (int r = 1; r <= count; ++r) MustDeliver(got_of[r], written_of[r], "ReadMany, a namespace");
  }
  // What delivering the slot's bytes costs without any sharing: the same bytes written to the
  // only namespace of a slot of their own, read back by one stream. Replaying all namespaces
  // at once moves this many bytes to the client too, so it cannot take less.
  // Beside it, empty namespaces of the same slot created before it was written, so that
  // their reads span its bytes: a datanode opening one large region among many empty ones
  // with one ReadMany.
  const int empty = absl::GetFlag(FLAGS_smoke) ? 99 : 999;
  Walserver whole(absl::StrCat("replaywhole", getpid()),
                  {"--topic_count=1", "--partitions_per_topic=1",
                   absl::StrCat("--max_concurrent_reads=", 2 * (empty + 1))});
  whole.Start();
  auto w = Connect(whole.address());
  for (int n = 1; n <= empty + 1; ++n) Must(w->CreateNamespace(n).status(), "create");
  for (uint64_t put = 0; put < written;) {
    wal::v1::AppendRequest request;
    for (int i = 0; i < batch; ++i, put += payload.size()) {
      auto* e = request.add_entries();
      e->set_namespace_id(1);
      e->set_data(payload);
    }
    Must(w->Append(request).status(), "append");
  }
  PrebuiltReads prebuilt(payload, written);
  int stub_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &stub_port);
  builder.RegisterService(&prebuilt);
  std::unique_ptr<grpc::Server> stub = builder.BuildAndStart();
  auto stub_client = Connect(absl::StrCat("127.0.0.1:", stub_port));
  MustDeliver(ReadWhole(*stub_client, 1), written, "the stub's first stream (connects, untimed)");
  std::vector<double> whole_times, stub_times, among_empty;
  for (int run = 0; run < runs; ++run) {
    auto t0 = Clock::now();
    const uint64_t got_whole = ReadWhole(*w, 1);
    whole_times.push_back(duration<double>(Clock::now() - t0).count());
    MustDeliver(got_whole, written, "one stream");
    t0 = Clock::now();
    const uint64_t got_stub = ReadWhole(*stub_client, 1);
    stub_times.push_back(duration<double>(Clock::now() - t0).count());
    MustDeliver(got_stub, written, "one stream from prebuilt responses");
    t0 = Clock::now();
    wal::ReadManyOptions read_many;
    for (int r = 1; r <= empty + 1; ++r) read_many.namespaces.push_back({uint64_t(r), 0, 0});
    uint64_t got = 0;
    Must(w->ReadMany(
             read_many,
             [&](wal::v1::Entry& e) {
               got += e.data().size();
               return true;
             },
             [](const wal::v1::ReadEnd& end) {
               if (end.code() != 0) Must(absl::InternalError(end.message()), "ReadMany");
               return true;
             }),
         "ReadMany");
    MustDeliver(got, written, "ReadMany of one namespace among empty ones");
    among_empty.push_back(duration<double>(Clock::now() - t0).count());
  }
  whole.Stop();
  stub->Shutdown();

  Row r1{"replay", "service 1 namespace", absl::StrFormat("%.0f MB slot", mb)};
  r1.value = Median(one);
  r1.mb_per_s = mb / r1.value;  // slot bytes scanned per second
  Row r0{"replay", "direct raw scan", r1.parameter};
  r0.value = Median(raw);
  r0.mb_per_s = mb / r0.value;
  Row ra{"replay", absl::StrCat("service ", count, " at once"), r1.parameter};
  ra.value = Median(all);
  ra.mb_per_s = mb / ra.value;
  Emit(r1);
  Emit(r0);
  Emit(ra);
  Row rw{"replay", "service one stream", r1.parameter};
  rw.value = Median(whole_times);
  rw.mb_per_s = mb / rw.value;
  Emit(rw);
  Row rs{"replay", "gRPC floor: prebuilt stream", r1.parameter};
  rs.value = Median(stub_times);
  rs.mb_per_s = mb / rs.value;
  Emit(rs);
  // Speed ratio: >= 0.9 wanted.
  EmitRatio("replay", "ratio 1 ns scan/raw", r1.parameter, r0.value / r1.value);
  // Time ratio: <= 1.2 wanted.
  EmitRatio("replay", "ratio all/raw time", r1.parameter, ra.value / r0.value);
  EmitRatio("replay", "ratio all/one stream", r1.parameter, ra.value / rw.value);
  Row rm{"replay", "service ReadMany", r1.parameter};
  rm.value = Median(many);
  rm.mb_per_s = mb / rm.value;
  Emit(rm);
  EmitRatio("replay", "ratio ReadMany/raw time", r1.parameter, rm.value / r0.value);
  EmitRatio("replay", "ratio gRPC floor/raw time", r1.parameter, rs.value / r0.value);
  Row re{"replay", absl::StrCat("service ReadMany 1 + ", empty, " empty"), r1.parameter};
  re.value = Median(among_empty);
  re.mb_per_s = mb / re.value;
  Emit(re);
  // Time ratio: <= 1.2 wanted.
  EmitRatio("replay", "ratio ReadMany 1+empty/one stream", r1.parameter, re.value / rw.value);
}

}  // namespace walbench
