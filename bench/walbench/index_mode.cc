// The index mode: replays that cost a namespace's own records, not its slot's (the slot index,
// server/log/slot_index.h). One slot holds --index_mib MiB of one big namespace; a small one has
// 6 entries of 20 bytes spread over it, a third holds 1% of the slot's bytes in 100 runs, and of
// 1,000 regions (namespaces) 10 hold 1% of the slot between them (10 runs each) and 990 none.
// The small ones are read, and the 1,000 regions opened with one ReadMany as a datanode opens
// its regions, in alternating rounds through a walserver whose index the big namespace's replay
// filled and through a walserver on the same topics started with --read_index=false. Last, the
// first reads after a restart, through a walserver that keeps its index in Kafka and one that
// keeps none.
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/walbench/bench.h"

namespace walbench {
namespace {

// Bytes sent over the loopback interface so far (every byte between walbench, walserver and the
// broker): around a read, what it fetched from Kafka plus what it delivered.
uint64_t LoopbackBytes() {
  std::ifstream in("/proc/net/dev");
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream name(line.substr(0, colon));
    std::string interface;
    name >> interface;
    if (interface != "lo") continue;
    std::istringstream fields(line.substr(colon + 1));
    uint64_t received = 0;
    fields >> received;
    return received;
  }
  return 0;
}

// Seconds to read `ns` whole; `bytes` gets the entry bytes delivered, `loopback` (if not null)
// the loopback bytes meanwhile.
double TimeRead(wal::Client& c, uint64_t ns, uint64_t* bytes, uint64_t* loopback = nullptr) {
  const uint64_t loopback_before = LoopbackBytes();
  const auto t0 = Clock::now();
  *bytes = ReadWhole(c, ns);
  const double seconds = duration<double>(Clock::now() - t0).count();
  if (loopback != nullptr) *loopback = LoopbackBytes() - loopback_before;
  return seconds;
}

// Seconds to read `ids` whole on one ReadMany; `bytes` gets the entry bytes delivered.
double TimeReadMany(wal::Client& c, uint64_t first_id, int count, uint64_t* bytes) {
  *bytes = 0;
  wal::ReadManyOptions read;
  for (int i = 0; i < count; ++i) read.namespaces.push_back({first_id + i});
  const auto t0 = Clock::now();
  Must(c.ReadMany(
           read,
           [&](wal::v1::Entry& e) {
             *bytes += e.data().size();
             return true;
           },
           [](const wal::v1::ReadEnd& end) {
             Must(absl::Status(static_cast<absl::StatusCode>(end.code()), end.message()),
                  "read many");
             return true;
           }),
       "read many");
  return duration<double>(Clock::now() - t0).count();
}

constexpr uint64_t kSmall = 1, kBig = 2, kOnePercent = 3, kFirstRegion = 1001;
constexpr int kRegions = 1000, kRegionsWithData = 10;

}  // namespace

// Over 80 lines on purpose: one experiment (lay out a slot, then alternating measured reads
// compared in one table) reads best top to bottom.
void Bench::Index() {
  const std::string prefix = absl::StrCat("index", getpid());
  const std::vector<std::string> one_slot = {"--topic_count=1", "--partitions_per_topic=1"};
  Walserver indexed(prefix, one_slot);
  indexed.Start();
  std::vector<std::string> no_index_args = one_slot;
  no_index_args.push_back("--read_index=false");
  Walserver plain(prefix, no_index_args);
  plain.Start();
  auto c = Connect(indexed.address());
  auto p = Connect(plain.address());
  for (uint64_t ns : {kSmall, kBig, kOnePercent}) Must(c->CreateNamespace(ns).status(), "create");
  for (int r = 0; r < kRegions; ++r) Must(c->CreateNamespace(kFirstRegion + r).status(), "create");

  // 100 stretches; the small namespace writes before stretches 0, 20, 40, 60, 80 and after the
  // last; the 1% namespace begins each stretch with its run, and a region with data follows
  // with a run as long (region s % 10 in stretch s).
  const uint64_t total = static_cast<uint64_t>(absl::GetFlag(FLAGS_index_mib)) << 20;
  const uint64_t stretch = total / 100;
  const int batch = 64;
  const std::string twenty_bytes(20, 's');
  // Entry bytes of the big namespace, the 1% one, the regions.
  uint64_t written_big = 0, written_spread = 0, written_regions = 0;
  auto append = [&](uint64_t ns, uint64_t bytes) {
    uint64_t put = 0;
    for (; put < bytes;) {
      wal::v1::AppendRequest request;
      for (int i = 0; i < batch && put < bytes; ++i, put += payload.size()) {
        auto* e = request.add_entries();
        e->set_namespace_id(ns);
        e->set_data(payload);
      }
      Must(c->Append(request).status(), "append");
    }
    if (ns == kBig) written_big += put;
    if (ns == kOnePercent) written_spread += put;
    if (ns >= kFirstRegion) written_regions += put;
  };
  for (int s = 0; s < 100; ++s) {
    if (s % 20 == 0) Must(c->Append(kSmall, {twenty_bytes}).status(), "append");
    append(kOnePercent, stretch / 100);
    append(kFirstRegion + s % kRegionsWithData, stretch / 100);
    append(kBig, stretch - 2 * (stretch / 100));
  }
  Must(c->Append(kSmall, {twenty_bytes}).status(), "append");
  const double mb = total / 1e6;
  const std::string parameter = absl::StrFormat("%.0f MB slot", mb);

  // The big namespace's replay reads the slot and fills the index on the way.
  uint64_t bytes = 0;
  Row big{"index", "service big ns replay", parameter};
  big.value = TimeRead(*c, kBig, &bytes);
  MustDeliver(bytes, written_big, "replay of the big namespace");
  big.mb_per_s = bytes / 1e6 / big.value;
  Emit(big);

  std::vector<double> small_indexed, small_plain, spread_indexed, spread_plain, moved;
  std::vector<double> regions_indexed, regions_plain, with_data_indexed;
  uint64_t small_bytes = 0, spread_bytes = 0, loopback = 0, region_bytes = 0;
  // Every read must deliver what was written: one that skipped too much would look fast.
  const uint64_t written_small = 6 * twenty_bytes.size();
  for (int run = 0; run < runs; ++run) {
    small_indexed.push_back(TimeRead(*c, kSmall, &small_bytes));
    MustDeliver(small_bytes, written_small, "read of the small namespace, indexed");
    small_plain.push_back(TimeRead(*p, kSmall, &small_bytes));
    MustDeliver(small_bytes, written_small, "read of the small namespace, not indexed");
    spread_indexed.push_back(TimeRead(*c, kOnePercent, &spread_bytes, &loopback));
    MustDeliver(spread_bytes, written_spread, "read of the 1% namespace, indexed");
    moved.push_back(static_cast<double>(loopback) / static_cast<double>(spread_bytes));
    spread_plain.push_back(TimeRead(*p, kOnePercent, &spread_bytes));
    MustDeliver(spread_bytes, written_spread, "read of the 1% namespace, not indexed");
    regions_indexed.push_back(TimeReadMany(*c, kFirstRegion, kRegions, &region_bytes));
    MustDeliver(region_bytes, written_regions, "ReadMany of the regions, indexed");
    regions_plain.push_back(TimeReadMany(*p, kFirstRegion, kRegions, &region_bytes));
    MustDeliver(region_bytes, written_regions, "ReadMany of the regions, not indexed");
    with_data_indexed.push_back(TimeReadMany(*c, kFirstRegion, kRegionsWithData, &region_bytes));
    MustDeliver(region_bytes, written_regions, "ReadMany of the regions with data, indexed");
  }
  plain.Stop();

  // The first read after a restart: through the indexed walserver, which saved its index to
  // Kafka when it stopped and took it when it started, and through one that keeps none
  // (--read_index_save_interval_ms=0), whose index starts empty. Both start again before each
  // measured read.
  std::vector<std::string> forgetful_args = one_slot;
  forgetful_args.push_back("--read_index_save_interval_ms=0");
  Walserver forgetful(prefix, forgetful_args);
  std::vector<double> small_kept, small_forgot, regions_kept, regions_forgot;
  auto restarted = [](Walserver& w) {
    w.Stop();
    w.Start();
    return Connect(w.address());
  };
  for (int run = 0; run < runs; ++run) {
    small_kept.push_back(TimeRead(*restarted(indexed), kSmall, &small_bytes));
    MustDeliver(small_bytes, written_small, "read of the small namespace, index kept");
    small_forgot.push_back(TimeRead(*restarted(forgetful), kSmall, &small_bytes));
    MustDeliver(small_bytes, written_small, "read of the small namespace, index not kept");
    regions_kept.push_back(
        TimeReadMany(*restarted(indexed), kFirstRegion, kRegions, &region_bytes));
    MustDeliver(region_bytes, written_regions, "ReadMany of the regions, index kept");
    regions_forgot.push_back(
        TimeReadMany(*restarted(forgetful), kFirstRegion, kRegions, &region_bytes));
    MustDeliver(region_bytes, written_regions, "ReadMany of the regions, index not kept");
  }
  indexed.Stop();
  forgetful.Stop();
  auto emit = [&](const std::string& system, const std::vector<double>& times, uint64_t got) {
    Row r{"index", system, parameter};
    r.value = Median(times);
    r.mb_per_s = got / 1e6 / r.value;  // entry bytes delivered per second
    Emit(r);
    return r.value;
  };
  const double si = emit("service 6 x 20 B indexed", small_indexed, small_bytes);
  const double sp = emit("service 6 x 20 B not indexed", small_plain, small_bytes);
  EmitRatio("index", "ratio 6 x 20 B index/no index", parameter, si / sp);
  const double pi = emit("service 1% in 100 runs indexed", spread_indexed, spread_bytes);
  const double pp = emit("service 1% in 100 runs not indexed", spread_plain, spread_bytes);
  EmitRatio("index", "ratio 1% index/no index", parameter, pi / pp);
  // Fetched from Kafka and delivered to walbench, per byte delivered: the fetched part is this
  // less one.
  EmitRatio("index", "loopback/delivered 1% indexed", parameter, Median(moved));
  const double ri =
      emit("service ReadMany 1000 regions (10 with data) indexed", regions_indexed, region_bytes);
  const double rp =
      emit("service ReadMany 1000 regions (10 with data) not indexed", regions_plain, region_bytes);
  EmitRatio("index", "ratio ReadMany 1000 regions index/no index", parameter, ri / rp);
  const double wi =
      emit("service ReadMany of the 10 with data indexed", with_data_indexed, region_bytes);
  // What the 990 empty regions add to opening the 10 with data.
  EmitRatio("index", "ratio ReadMany 1000 regions/the 10 with data indexed", parameter, ri / wi);
  const double sk =
      emit("service 6 x 20 B after a restart with the index kept", small_kept, small_bytes);
  const double sf = emit("service 6 x 20 B after a restart without it", small_forgot, small_bytes);
  EmitRatio("index", "ratio 6 x 20 B after a restart kept/not kept", parameter, sk / sf);
  const double rk = emit("service ReadMany 1000 regions after a restart with the index kept",
                         regions_kept, region_bytes);
  const double rf = emit("service ReadMany 1000 regions after a restart without it", regions_forgot,
                         region_bytes);
  EmitRatio("index", "ratio ReadMany 1000 regions after a restart kept/not kept", parameter,
            rk / rf);
}

}  // namespace walbench
