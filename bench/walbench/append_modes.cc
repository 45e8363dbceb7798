// The append modes (regions, throughput, single, latency), each against the same work produced
// to Kafka.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/walbench/bench.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "server/common/namespace_key.h"
#include "server/log/record_format.h"

namespace walbench {

namespace {

// The regions mode's namespaces, above the sweep's (1,000,000 and up).
constexpr uint64_t kFirstRegion = 3000000;

// splitmix64's finalizer: the first region of each call, well mixed.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15u;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
  return x ^ (x >> 31);
}

}  // namespace

void Bench::Regions() {
  const int regions = absl::GetFlag(FLAGS_regions);
  const int per_call = std::min(absl::GetFlag(FLAGS_regions_per_call), regions);
  const int callers = absl::GetFlag(FLAGS_region_callers);
  std::vector<wal::v1::Namespace> region_ns;
  for (int r = 0; r < regions; ++r) {
    auto created = client->CreateNamespace(kFirstRegion + r);
    Must(created.status(), "create a region");
    region_ns.push_back(created->ns);
  }
  // Call k of caller t writes regions first, first + 1, ... (mod regions).
  auto first_region = [&](int t, uint64_t k) {
    return static_cast<int>(Mix(static_cast<uint64_t>(t) << 32 | k) % regions);
  };
  const std::string record = wal::EncodeEntry(payload, 1, 1000000).front();
  std::vector<std::unique_ptr<BatchWait>> waits;
  for (int t = 0; t < callers; ++t) waits.push_back(std::make_unique<BatchWait>());
  std::vector<uint64_t> calls(callers, 0);  // each caller's own count
  std::vector<Row> service, direct_rows;
  for (int run = 0; run < runs; ++run) {
    service.push_back(
        ClosedLoop("regions", "service", callers, server.pid(), payload.size(), [&](int t) {
          wal::v1::AppendRequest request;
          const int first = first_region(t, calls[t]++);
          for (int i = 0; i < per_call; ++i) {
            auto* e = request.add_entries();
            e->set_namespace_id(kFirstRegion + (first + i) % regions);
            e->set_data(payload);
          }
          return client->Append(std::move(request)).ok() ? static_cast<uint64_t>(per_call) : 0;
        }));
    // The same records produced to each region's slot, with its key: the call is done when
    // Kafka acknowledged them all.
    direct_rows.push_back(
        ClosedLoop("regions", "direct", callers, server.pid(), payload.size(), [&](int t) {
          const int first = first_region(t, calls[t]++);
          waits[t]->Expect(per_call);
          for (int i = 0; i < per_call; ++i) {
            const int r = (first + i) % regions;
            const wal::v1::Namespace& ns = region_ns[r];
            while (!direct.get()
                        .Produce(ns.topic(), ns.partition(), wal::EncodeKey(kFirstRegion + r),
                                 record, waits[t].get())
                        .ok()) {
              std::this_thread::sleep_for(std::chrono::microseconds(100));
            }
          }
          return waits[t]->Wait() == 0 ? static_cast<uint64_t>(per_call) : 0;
        }));
  }
  Row s = Median(service), d = Median(direct_rows);
  s.parameter = d.parameter = absl::StrCat(callers, "x", per_call, " of ", regions);
  Emit(s);
  Emit(d);
  EmitRatio("regions", "ratio service/direct", s.parameter, s.entries_per_s / d.entries_per_s);
  EmitRatio("regions", "ratio cpu/GB svc/direct", s.parameter, s.cpu_s_per_gb / d.cpu_s_per_gb);
}

Row Bench::ServiceBatches(int batch, wal::Client& c, const std::string& system) {
  std::vector<wal::v1::AppendRequest> requests(threads);
  for (int t = 0; t < threads; ++t) {
    for (int i = 0; i < batch; ++i) {
      auto* e = requests[t].add_entries();
      e->set_namespace_id(t + 1);
      e->set_data(payload);
    }
  }
  return ClosedLoop("throughput", system, threads, server.pid(), payload.size(), [&](int t) {
    auto ids = c.Append(requests[t]);
    return ids.ok() ? static_cast<uint64_t>(batch) : 0;
  });
}

Row Bench::DirectBatches(int batch) {
  std::vector<std::unique_ptr<BatchWait>> waits;
  for (int t = 0; t < threads; ++t) waits.push_back(std::make_unique<BatchWait>());
  // The same record format and key as walserver writes, so the bytes on the wire match.
  const std::string record = wal::EncodeEntry(payload, 1, 1000000).front();
  return ClosedLoop("throughput", "direct", threads, server.pid(), payload.size(), [&](int t) {
    const auto& ns = namespaces[t];
    const std::string key = wal::EncodeKey(t + 1);
    waits[t]->Expect(batch);
    for (int i = 0; i < batch; ++i) {
      while (!direct.get().Produce(ns.topic(), ns.partition(), key, record, waits[t].get()).ok()) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    return waits[t]->Wait() == 0 ? static_cast<uint64_t>(batch) : 0;
  });
}

void Bench::Throughput() {
  const int batch = absl::GetFlag(FLAGS_batch);
  std::vector<Row> service, unary_rows, direct_rows;
  for (int run = 0; run < runs; ++run) {
    service.push_back(ServiceBatches(batch, *client, "service"));
    unary_rows.push_back(ServiceBatches(batch, *unary, "service unary"));
    direct_rows.push_back(DirectBatches(batch));
  }
  Row s = Median(service), u = Median(unary_rows), d = Median(direct_rows);
  s.parameter = u.parameter = d.parameter = absl::StrCat(batch, "x", payload.size(), "B");
  Emit(s);
  Emit(u);
  Emit(d);
  EmitRatio("throughput", "ratio service/direct", s.parameter, s.entries_per_s / d.entries_per_s);
  EmitRatio("throughput", "ratio unary/direct", s.parameter, u.entries_per_s / d.entries_per_s);
  EmitRatio("throughput", "ratio cpu/GB svc/direct", s.parameter, s.cpu_s_per_gb / d.cpu_s_per_gb);
}

void Bench::Single() {
  auto channel = grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  const int callers = absl::GetFlag(FLAGS_single_threads);
  std::vector<wal::v1::AppendRequest> requests(callers);
  for (int t = 0; t < callers; ++t) {
    auto* e = requests[t].add_entries();
    e->set_namespace_id(t % threads + 1);
    e->set_data(payload);
  }
  // The same callers producing one record each straight to Kafka: what one entry costs the
  // broker and librdkafka on this machine, with no RPC at all.
  std::vector<std::unique_ptr<BatchWait>> waits;
  for (int t = 0; t < callers; ++t) waits.push_back(std::make_unique<BatchWait>());
  const std::string record = wal::EncodeEntry(payload, 1, 1000000).front();
  std::vector<Row> appends, unaries, empties, directs;
  for (int run = 0; run < runs; ++run) {
    appends.push_back(
        ClosedLoop("single", "service Append", callers, server.pid(), payload.size(),
                   [&](int t) { return client->Append(requests[t]).ok() ? 1u : 0u; }));
    unaries.push_back(ClosedLoop("single", "service unary Append", callers, server.pid(),
                                 payload.size(),
                                 [&](int t) { return unary->Append(requests[t]).ok() ? 1u : 0u; }));
    empties.push_back(ClosedLoop("single", "empty RPC (Check)", callers, server.pid(), 0, [&](int) {
      grpc::ClientContext ctx;
      grpc::health::v1::HealthCheckRequest req;
      grpc::health::v1::HealthCheckResponse resp;
      return health->Check(&ctx, req, &resp).ok() ? 1u : 0u;
    }));
    directs.push_back(
        ClosedLoop("single", "direct produce", callers, server.pid(), payload.size(), [&](int t) {
          const auto& ns = namespaces[t % threads];
          waits[t]->Expect(1);
          if (!direct.get()
                   .Produce(ns.topic(), ns.partition(), wal::EncodeKey(t % threads + 1), record,
                            waits[t].get())
                   .ok()) {
            return 0u;
          }
          return waits[t]->Wait() == 0 ? 1u : 0u;
        }));
  }
  Row a = Median(appends), u = Median(unaries), e = Median(empties), d = Median(directs);
  a.parameter = u.parameter = e.parameter = d.parameter = absl::StrCat("1x", payload.size(), "B");
  Emit(a);
  Emit(u);
  Emit(e);
  Emit(d);
  EmitRatio("single", "ratio Append/empty", a.parameter, a.entries_per_s / e.entries_per_s);
  EmitRatio("single", "ratio direct/empty", a.parameter, d.entries_per_s / e.entries_per_s);
  EmitRatio("single", "ratio Append/direct", a.parameter, a.entries_per_s / d.entries_per_s);
  EmitRatio("single", "ratio unary/direct", a.parameter, u.entries_per_s / d.entries_per_s);
  EmitRatio("single", "ratio cpu/GB svc/direct", a.parameter, a.cpu_s_per_gb / d.cpu_s_per_gb);
  max_single_rate = a.entries_per_s;
}

// Open loop: requests start on a fixed schedule, latency counts from the scheduled start.
Row Bench::OpenLoop(const std::string& system, double rate,
                    const std::function<void(std::function<void()>)>& send) {
  Latencies latencies;
  std::atomic<int64_t> outstanding{0};
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const auto t0 = Clock::now();
  const double cpu0 = PathCpuSeconds(system, server.pid());
  uint64_t sent = 0;
  for (;; ++sent) {
    const auto at = t0 + std::chrono::duration_cast<Clock::duration>(duration<double>(sent / rate));
    if (at - t0 > duration<double>(seconds)) break;
    std::this_thread::sleep_until(at);
    ++outstanding;
    send([&, at] {
      latencies.Add(duration<double, std::milli>(Clock::now() - at).count());
      --outstanding;
    });
  }
  while (outstanding > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const double secs = duration<double>(Clock::now() - t0).count();
  Row r{"latency", system, absl::StrFormat("%.0f/s", rate)};
  r.entries_per_s = sent / secs;
  r.mb_per_s = sent * payload.size() / secs / 1e6;
  r.p50_ms = latencies.Percentile(0.5);
  r.p99_ms = latencies.Percentile(0.99);
  r.p999_ms = latencies.Percentile(0.999);
  r.cpu_s_per_gb =
      (PathCpuSeconds(system, server.pid()) - cpu0) / std::max(1e-9, sent * payload.size() / 1e9);
  r.rss_mib = ResidentMiB(server.pid());
  return r;
}

void Bench::Latency() {
  if (max_single_rate == 0) Single();
  const std::string key = wal::EncodeKey(1);
  const std::string record = wal::EncodeEntry(payload, 1, 1000000).front();
  const auto& ns = namespaces[0];
  const std::vector<std::string> loads = absl::StrSplit(absl::GetFlag(FLAGS_latency_loads), ',');
  for (const std::string& load : loads) {
    const double rate = std::stod(load) * max_single_rate;
    std::vector<Row> service, unary_rows, direct_rows;
    for (int run = 0; run < runs; ++run) {
      for (wal::Client* c : {client.get(), unary.get()}) {
        (c == client.get() ? service : unary_rows)
            .push_back(OpenLoop(c == client.get() ? "service" : "service unary", rate,
                                [&](std::function<void()> done) {
                                  wal::v1::AppendRequest request;
                                  auto* e = request.add_entries();
                                  e->set_namespace_id(1);
                                  e->set_data(payload);
                                  // A failed append would count as a fast one.
                                  c->AppendAsync(std::move(request),
                                                 [done](absl::StatusOr<std::vector<uint64_t>> r) {
                                                   Must(r.status(), "latency append");
                                                   done();
                                                 });
                                }));
      }
      direct_rows.push_back(OpenLoop("direct", rate, [&](std::function<void()> done) {
        auto* d = new CallOnDelivery;
        d->fn = std::move(done);
        if (!direct.get().Produce(ns.topic(), ns.partition(), key, record, d).ok()) {
          d->OnDelivery(wal::Delivery::Of(RD_KAFKA_RESP_ERR__QUEUE_FULL,
                                          RD_KAFKA_MSG_STATUS_NOT_PERSISTED, -1));
        }
      }));
    }
    // Median by p99 here.
    Row s = MedianByP99(service), u = MedianByP99(unary_rows), d = MedianByP99(direct_rows);
    s.parameter = u.parameter = d.parameter = absl::StrCat(load, " of max");
    s.value = u.value = d.value = rate;
    Emit(s);
    Emit(u);
    Emit(d);
  }
}

}  // namespace walbench
