// walbench: walserver against direct librdkafka on the same broker, in the same run.
//
// It starts a walserver process on the given brokers, then for each mode measures the service
// (through walclient) and the same work done directly with librdkafka (idempotent, acks=all,
// same linger and batching), alternating service and direct runs and reporting the median of
// --runs. Figures: entries/s, MB/s, latency percentiles, CPU seconds per GB (of walbench, and of
// walserver on the service's paths), walserver's
// resident memory, and the service/direct ratio. Output: a table on stdout, rows in --csv.
//
// Modes:
//   throughput  closed loop, batches of --batch entries of --entry_bytes per Append; on the
//               append stream (walclient's default) and as unary calls, for reference
//   single      closed loop, one entry per Append (streamed, and unary for reference), against
//               an empty RPC (health Check) and against one record produced straight to Kafka
//               by as many callers
//   latency     open loop at fixed rates (fractions of the measured maximum)
//   replay      read one namespace back; read all namespaces of one slot at once, as separate
//               Reads and as one ReadMany; read the same bytes written as one namespace, through
//               one stream, and with 999 empty namespaces of its slot on one ReadMany
//   follow      how late a follow read sees each entry: one entry every 20 ms from one client,
//               a follow read on another client, of the same walserver and of a second one on
//               the same topics; against a librdkafka
//               consumer following the same partition while a producer writes as often
//               (entries/s column: entries seen; p99.9 column: the slowest)
//   sweep       10 .. --max_namespaces namespaces: memory and CPU when idle, throughput; then
//               the same load over 10 and over all of them, alternating. Steps of 1,000 or
//               more namespaces are created --create_in_flight at a time, with a "create" row
//   startup     restart walserver with all those namespaces in the meta topic
//   compression for each of --codecs, a walserver with --compression=CODEC appends
//               --replay_mib MiB of time-series WAL entries (TimeSeriesEntry) from --threads
//               callers, then replays them: append MB/s and CPU per GB, the bytes the
//               broker stores per GB appended (from --kafka_data_dir), replay seconds
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/wal_client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "server/common/namespace_key.h"
#include "server/kafka/client.h"
#include "server/kafka/consumer.h"
#include "server/kafka/producer.h"
#include "server/log/record_format.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, brokers, "", "Kafka bootstrap servers (required)");
ABSL_FLAG(std::string, walserver, "", "Path of the walserver binary (required)");
ABSL_FLAG(std::string, modes, "throughput,single,latency,replay,follow,sweep,startup,compression",
          "Comma-separated modes to run");
ABSL_FLAG(double, seconds, 5, "Length of each timed run");
ABSL_FLAG(int, runs, 3, "Alternating service/direct runs per figure; the median is reported");
ABSL_FLAG(int, threads, 4, "Concurrent callers in closed-loop modes");
ABSL_FLAG(int, single_threads, 64,
          "Concurrent callers in single mode: enough to load the server, as many regions would");
ABSL_FLAG(int, batch, 64, "Entries per Append in throughput mode");
ABSL_FLAG(int, entry_bytes, 1024, "Bytes per entry");
ABSL_FLAG(std::string, latency_loads, "0.1,0.25,0.5,0.75,0.9",
          "Open-loop rates as fractions of the measured single-entry maximum");
ABSL_FLAG(int, replay_mib, 64, "MiB written into one slot for the replay modes");
ABSL_FLAG(int, replay_namespaces, 100, "Namespaces in the slot for replay-all");
ABSL_FLAG(int, max_namespaces, 10000,
          "Largest namespace count of the sweep: 10, 100, ... up to 1000000");
ABSL_FLAG(int, create_in_flight, 256, "CreateNamespace calls at once when the sweep creates");
ABSL_FLAG(std::vector<std::string>, walserver_args, {},
          "Extra walserver flags, comma-separated (e.g. --producers=1), to compare settings");
ABSL_FLAG(std::string, csv, "", "Write every row here as CSV");
ABSL_FLAG(std::string, kafka_data_dir, "",
          "The broker's log.dirs, for the bytes each codec stores (compression mode)");
ABSL_FLAG(std::string, codecs, "none,lz4,zstd,snappy,gzip", "Codecs the compression mode compares");
ABSL_FLAG(bool, checksums, true,
          "walclient sends a CRC-32C with each entry and checks those it reads (false: the cost "
          "of end-to-end checksums, by difference)");
ABSL_FLAG(bool, smoke, false, "Tiny sizes and one run per figure: proves walbench works");

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::duration;

// ---- Measuring ----

double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  std::vector<std::string> fields = absl::StrSplit(text.substr(close + 2), ' ');
  // Fields after the command: state is [0]; utime and stime are fields 14 and 15 of the file.
  return (std::stod(fields[11]) + std::stod(fields[12])) / sysconf(_SC_CLK_TCK);
}

// The CPU a path costs: walbench's own process, plus walserver's unless the path goes straight
// to Kafka ("direct ..."). Per process, so that the broker and other load on the host do not
// fall on whichever path runs beside them.
double PathCpuSeconds(const std::string& system, pid_t server) {
  const bool direct = system.rfind("direct", 0) == 0;
  return ProcessCpuSeconds(getpid()) + (direct || server <= 0 ? 0 : ProcessCpuSeconds(server));
}

double ResidentMiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0;
}

struct Latencies {
  std::mutex mu;
  std::vector<double> ms;
  void Add(double v) {
    std::lock_guard<std::mutex> lock(mu);
    ms.push_back(v);
  }
  double Percentile(double p) {
    std::lock_guard<std::mutex> lock(mu);
    if (ms.empty()) return 0;
    std::sort(ms.begin(), ms.end());
    return ms[std::min(ms.size() - 1, static_cast<size_t>(p * ms.size()))];
  }
};

struct Row {
  std::string mode;
  std::string system;  // service or direct (or a description)
  std::string parameter;
  double entries_per_s = 0;
  double mb_per_s = 0;
  double p50_ms = 0, p99_ms = 0, p999_ms = 0;
  double cpu_s_per_gb = 0;
  double rss_mib = 0;
  double value = 0;  // a mode-specific figure (seconds, bytes per namespace...)
};

std::ofstream g_csv;  // rows are written as they come, so a failed mode keeps the earlier ones

void Emit(const Row& r) {
  if (g_csv.is_open()) {
    g_csv << r.mode << "," << r.system << "," << r.parameter << "," << r.entries_per_s << ","
          << r.mb_per_s << "," << r.p50_ms << "," << r.p99_ms << "," << r.p999_ms << ","
          << r.cpu_s_per_gb << "," << r.rss_mib << "," << r.value << std::endl;
  }
  std::cout << absl::StrFormat(
                   "%-11s %-22s %-14s %12.0f %9.2f %9.3f %9.3f %9.3f %10.2f %8.1f %12.3f\n", r.mode,
                   r.system, r.parameter, r.entries_per_s, r.mb_per_s, r.p50_ms, r.p99_ms,
                   r.p999_ms, r.cpu_s_per_gb, r.rss_mib, r.value)
            << std::flush;
}

Row Median(std::vector<Row> runs) {
  std::sort(runs.begin(), runs.end(),
            [](const Row& a, const Row& b) { return a.entries_per_s < b.entries_per_s; });
  return runs[runs.size() / 2];
}

// A benchmark whose setup failed measures nothing: stop with the reason.
void Must(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::cerr << "walbench: " << what << ": " << status << "\n";
    std::exit(1);
  }
}

// ---- walserver as a child process ----

class Walserver {
 public:
  Walserver(std::string prefix, std::vector<std::string> extra = {})
      : prefix_(std::move(prefix)), extra_(std::move(extra)) {}
  ~Walserver() { Stop(); }

  // Starts it and returns the seconds until it served.
  double Start() {
    // Two walservers may share a prefix (the follow mode's second one): each its own files.
    static int started = 0;
    const std::string name = absl::StrCat(prefix_, "-", started++);
    const std::string ready = absl::StrCat("/tmp/walbench-", getpid(), "-", name, ".ready");
    std::filesystem::remove(ready);
    std::vector<std::string> args = {absl::GetFlag(FLAGS_walserver),
                                     "--brokers=" + absl::GetFlag(FLAGS_brokers),
                                     "--topic_prefix=" + prefix_,
                                     "--listen=127.0.0.1:0",
                                     "--http_listen=",
                                     "--replication_factor=1",
                                     "--min_insync_replicas=1",
                                     "--log_level=warn",
                                     "--ready_file=" + ready};
    args.insert(args.end(), extra_.begin(), extra_.end());
    for (const std::string& a : absl::GetFlag(FLAGS_walserver_args)) args.push_back(a);
    const auto t0 = Clock::now();
    pid_ = fork();
    if (pid_ == 0) {
      // Dies with walbench, and keeps its output out of walbench's.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      FILE* log = std::freopen(absl::StrCat("/tmp/walbench-", name, ".log").c_str(), "w", stderr);
      if (log != nullptr) dup2(fileno(log), STDOUT_FILENO);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    while (true) {
      std::ifstream in(ready);
      if (in && std::getline(in, address_) && !address_.empty()) break;
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        std::cerr << "walbench: walserver exited during start-up\n";
        std::exit(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return duration<double>(Clock::now() - t0).count();
  }
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }
  const std::string& prefix() const { return prefix_; }

 private:
  std::string prefix_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
  std::string address_;
};

// A client on walserver; `stream` false sends each append as its own unary call (the old path,
// kept as a reference row).
std::unique_ptr<wal::Client> Connect(const std::string& address, bool stream = true) {
  wal::ClientOptions options;
  options.target = address;
  options.append_stream = stream;
  options.checksums = absl::GetFlag(FLAGS_checksums);
  options.timeout = std::chrono::seconds(60);
  return std::move(*wal::Client::Connect(options));
}

// ---- Direct librdkafka ----

class DirectProducer {
 public:
  DirectProducer() {
    wal::KafkaProperties props{{"bootstrap.servers", absl::GetFlag(FLAGS_brokers)},
                               {"linger.ms", "0"},
                               {"socket.nagle.disable", "true"},
                               {"message.max.bytes", "1064576"}};
    producer_ = std::move(*wal::Producer::Create(props, "walbench-direct"));
  }
  wal::Producer& get() { return *producer_; }

 private:
  std::unique_ptr<wal::Producer> producer_;
};

// Waits for a set of delivery reports, like one Append call waits for its entries.
class BatchWait : public wal::DeliveryHandler {
 public:
  void Expect(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = n;
  }
  void OnDelivery(const wal::Delivery& delivery) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!delivery.written()) ++errors_;
    if (--pending_ == 0) cv_.notify_one();
  }
  int Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return pending_ == 0; });
    return errors_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int pending_ = 0;
  int errors_ = 0;
};

// ---- Modes ----

// One WAL entry as a time-series datanode writes it: a region's batch of rows (a schema, then
// per row two tags, a timestamp and five float fields in random walks), encoded like a
// protobuf message. Tags repeat and timestamps step regularly, as in real metrics; the floats'
// low bits are noise. Deterministic per seed.
std::string TimeSeriesEntry(uint64_t seed, size_t target_bytes) {
  std::mt19937_64 rng(seed);
  std::string out;
  const auto varint = [&](uint64_t v) {
    while (v >= 0x80) {
      out.push_back(static_cast<char>(v | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<char>(v));
  };
  const auto text = [&](int field, const std::string& value) {
    varint(static_cast<uint64_t>(field) << 3 | 2);
    varint(value.size());
    out += value;
  };
  for (const char* column :
       {"host", "az", "ts", "cpu_user", "cpu_system", "mem_used", "disk_io", "net_rx"}) {
    text(1, column);
  }
  std::uniform_real_distribution<double> step(-0.5, 0.5);
  double fields[5] = {23.5, 7.25, 61.0, 120.0, 830.0};
  int64_t ts = 1764547200000 + static_cast<int64_t>(seed % 100000) * 10000;
  for (int row = 0; out.size() < target_bytes; ++row) {
    text(2, absl::StrCat("host-", (seed * 7 + row) % 64));
    text(3, absl::StrCat("us-west-2", std::string(1, static_cast<char>('a' + row % 3))));
    varint(4 << 3);
    varint(static_cast<uint64_t>(ts));
    ts += 10000;
    for (double& f : fields) {
      f += step(rng);
      const double rounded = static_cast<double>(static_cast<int64_t>(f * 100)) / 100;
      out.push_back(static_cast<char>(5 << 3 | 1));
      out.append(reinterpret_cast<const char*>(&rounded), sizeof(rounded));
    }
  }
  return out;
}

// Bytes of the partition's log segments in the broker's data directory.
uint64_t StoredBytes(const std::string& data_dir, const std::string& topic, int partition) {
  uint64_t bytes = 0;
  const std::filesystem::path dir =
      std::filesystem::path(data_dir) / absl::StrCat(topic, "-", partition);
  for (const auto& file : std::filesystem::directory_iterator(dir)) {
    if (file.path().extension() == ".log") bytes += file.file_size();
  }
  return bytes;
}

std::string Payload(size_t bytes) {
  std::mt19937_64 rng(bytes);
  std::string s(bytes, '\0');
  for (char& c : s) c = static_cast<char>('a' + rng() % 26);
  return s;
}

// Runs `work` on `threads` threads for the run length; work returns entries done per call.
template <typename Work>
Row ClosedLoop(const std::string& mode, const std::string& system, int threads, pid_t server,
               size_t bytes_per_entry, Work work) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> entries{0};
  Latencies latencies;
  const double cpu0 = PathCpuSeconds(system, server);
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      while (!stop) {
        const auto c0 = Clock::now();
        entries += work(t);
        latencies.Add(duration<double, std::milli>(Clock::now() - c0).count());
      }
    });
  }
  std::this_thread::sleep_for(duration<double>(absl::GetFlag(FLAGS_seconds)));
  stop = true;
  for (auto& th : pool) th.join();
  const double secs = duration<double>(Clock::now() - t0).count();
  const double cpu = PathCpuSeconds(system, server) - cpu0;
  Row r;
  r.mode = mode;
  r.system = system;
  r.entries_per_s = entries / secs;
  r.mb_per_s = entries * bytes_per_entry / secs / 1e6;
  r.p50_ms = latencies.Percentile(0.5);
  r.p99_ms = latencies.Percentile(0.99);
  r.p999_ms = latencies.Percentile(0.999);
  const double gb = entries * bytes_per_entry / 1e9;
  r.cpu_s_per_gb = gb > 0 ? cpu / gb : 0;
  r.rss_mib = server > 0 ? ResidentMiB(server) : 0;
  return r;
}

struct Bench {
  Walserver server{absl::StrCat("bench", getpid())};
  std::unique_ptr<wal::Client> client;  // appends on the append stream (walclient's default)
  std::unique_ptr<wal::Client> unary;   // one unary Append call per append
  DirectProducer direct;
  std::string payload = Payload(absl::GetFlag(FLAGS_entry_bytes));
  int threads = absl::GetFlag(FLAGS_threads);
  int runs = absl::GetFlag(FLAGS_runs);
  // One namespace per caller thread; the direct runs write the same slots.
  std::vector<wal::v1::Namespace> namespaces;
  double max_single_rate = 0;

  void Setup() {
    server.Start();
    client = Connect(server.address());
    unary = Connect(server.address(), /*stream=*/false);
    for (int t = 0; t < threads; ++t) {
      auto created = client->CreateNamespace(t + 1);
      Must(created.status(), "create");
      namespaces.push_back(created->ns);
    }
  }

  Row ServiceBatches(int batch, wal::Client& c, const std::string& system) {
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

  Row DirectBatches(int batch) {
    std::vector<std::unique_ptr<BatchWait>> waits;
    for (int t = 0; t < threads; ++t) waits.push_back(std::make_unique<BatchWait>());
    // The same record format and key as walserver writes, so the bytes on the wire match.
    const std::string record = wal::EncodeEntry(payload, 1, 1000000).front();
    return ClosedLoop("throughput", "direct", threads, server.pid(), payload.size(), [&](int t) {
      const auto& ns = namespaces[t];
      const std::string key = wal::EncodeKey(t + 1);
      waits[t]->Expect(batch);
      for (int i = 0; i < batch; ++i) {
        while (
            !direct.get().Produce(ns.topic(), ns.partition(), key, record, waits[t].get()).ok()) {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
      }
      return waits[t]->Wait() == 0 ? static_cast<uint64_t>(batch) : 0;
    });
  }

  void Throughput() {
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
    Row ratio{"throughput", "ratio service/direct", s.parameter};
    ratio.value = s.entries_per_s / d.entries_per_s;
    Emit(ratio);
    Row unary_ratio{"throughput", "ratio unary/direct", s.parameter};
    unary_ratio.value = u.entries_per_s / d.entries_per_s;
    Emit(unary_ratio);
    Row cpu{"throughput", "ratio cpu/GB svc/direct", s.parameter};
    cpu.value = s.cpu_s_per_gb / d.cpu_s_per_gb;
    Emit(cpu);
  }

  void Single() {
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
      unaries.push_back(
          ClosedLoop("single", "service unary Append", callers, server.pid(), payload.size(),
                     [&](int t) { return unary->Append(requests[t]).ok() ? 1u : 0u; }));
      empties.push_back(
          ClosedLoop("single", "empty RPC (Check)", callers, server.pid(), 0, [&](int) {
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
    Row ratio{"single", "ratio Append/empty", a.parameter};
    ratio.value = a.entries_per_s / e.entries_per_s;
    Emit(ratio);
    Row ceiling{"single", "ratio direct/empty", a.parameter};
    ceiling.value = d.entries_per_s / e.entries_per_s;
    Emit(ceiling);
    Row vs_direct{"single", "ratio Append/direct", a.parameter};
    vs_direct.value = a.entries_per_s / d.entries_per_s;
    Emit(vs_direct);
    Row unary_vs_direct{"single", "ratio unary/direct", a.parameter};
    unary_vs_direct.value = u.entries_per_s / d.entries_per_s;
    Emit(unary_vs_direct);
    Row cpu{"single", "ratio cpu/GB svc/direct", a.parameter};
    cpu.value = a.cpu_s_per_gb / d.cpu_s_per_gb;
    Emit(cpu);
    max_single_rate = a.entries_per_s;
  }

  // Open loop: requests start on a fixed schedule, latency counts from the scheduled start.
  Row OpenLoop(const std::string& system, double rate,
               const std::function<void(std::function<void()>)>& send) {
    Latencies latencies;
    std::atomic<int64_t> outstanding{0};
    const double seconds = absl::GetFlag(FLAGS_seconds);
    const auto t0 = Clock::now();
    const double cpu0 = PathCpuSeconds(system, server.pid());
    uint64_t sent = 0;
    for (;; ++sent) {
      const auto at =
          t0 + std::chrono::duration_cast<Clock::duration>(duration<double>(sent / rate));
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

  void Latency() {
    if (max_single_rate == 0) Single();
    const std::string key = wal::EncodeKey(1);
    const std::string record = wal::EncodeEntry(payload, 1, 1000000).front();
    const auto& ns = namespaces[0];
    struct Done : wal::DeliveryHandler {
      std::function<void()> fn;
      void OnDelivery(const wal::Delivery&) override {
        fn();
        delete this;
      }
    };
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
          auto* d = new Done;
          d->fn = std::move(done);
          if (!direct.get().Produce(ns.topic(), ns.partition(), key, record, d).ok()) {
            d->OnDelivery(wal::Delivery::Of(RD_KAFKA_RESP_ERR__QUEUE_FULL,
                                            RD_KAFKA_MSG_STATUS_NOT_PERSISTED, -1));
          }
        }));
      }
      // Median by p99 here.
      auto by_p99 = [](std::vector<Row> v) {
        std::sort(v.begin(), v.end(),
                  [](const Row& a, const Row& b) { return a.p99_ms < b.p99_ms; });
        return v[v.size() / 2];
      };
      Row s = by_p99(service), u = by_p99(unary_rows), d = by_p99(direct_rows);
      s.parameter = u.parameter = d.parameter = absl::StrCat(load, " of max");
      s.value = u.value = d.value = rate;
      Emit(s);
      Emit(u);
      Emit(d);
    }
  }

  // Raw scan of [start, end) of a slot with a consumer, keeping every record of `key` (or all).
  double RawScan(const std::string& topic, int partition, int64_t start, int64_t end,
                 uint64_t* bytes) {
    wal::KafkaProperties props{{"bootstrap.servers", absl::GetFlag(FLAGS_brokers)},
                               {"socket.nagle.disable", "true"},
                               {"fetch.message.max.bytes", "1064576"}};
    auto consumer = std::move(*wal::Consumer::Create(props, "walbench-scan"));
    const auto t0 = Clock::now();
    Must(consumer->Assign(topic, partition, start), "assigning the raw scan");
    *bytes = 0;
    for (int64_t pos = start; pos < end;) {
      wal::Message m = consumer->Poll(100);
      if (!m) continue;
      if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        pos = std::max(pos, m->offset);
        continue;
      }
      if (m->err) continue;
      *bytes += m->len;
      pos = m->offset + 1;
    }
    return duration<double>(Clock::now() - t0).count();
  }

  // How late a follower sees an entry: one entry every 20 ms, each carrying its number, from
  // one client; a follow read through the same walserver on another client notes when each
  // arrives. Direct: a librdkafka consumer following the same partition while a producer writes
  // a record every 20 ms. Latency counts from the call (or produce) to the follower's receipt.
  Row FollowService(const wal::v1::Namespace& ns, int count, const std::string& follower_address,
                    const std::string& system) {
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
    Latencies latencies;
    std::thread reader([&] {
      wal::v1::Entry e;
      for (int got = 0; got < count && follower->Next(&e);) {
        const auto now = Clock::now();
        const int i = std::stoi(e.data().substr(0, e.data().find(' ')));
        if (i < 0 || i >= count || !was_sent[i].load()) continue;
        latencies.Add(duration<double, std::milli>(now - sent[i]).count());
        ++got;
      }
    });
    const auto t0 = Clock::now() + std::chrono::milliseconds(200);  // the read has started
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

  Row FollowDirect(const wal::v1::Namespace& ns, int count) {
    wal::KafkaProperties props{{"bootstrap.servers", absl::GetFlag(FLAGS_brokers)},
                               {"socket.nagle.disable", "true"}};
    auto consumer = std::move(*wal::Consumer::Create(props, "walbench-follow"));
    Must(consumer->Assign(ns.topic(), ns.partition(), RD_KAFKA_OFFSET_END),
         "assigning the follower");
    const std::string key = wal::EncodeKey(1u << 30);  // no namespace's: walserver skips nothing
    std::vector<Clock::time_point> sent(count);
    std::vector<std::atomic<bool>> was_sent(count);
    std::atomic<bool> stop{false};
    Latencies latencies;
    std::thread reader([&] {
      for (int got = 0; got < count && !stop;) {
        wal::Message m = consumer->Poll(100);
        if (!m || m->err) continue;
        const auto now = Clock::now();
        auto record =
            wal::DecodeRecord(std::string_view(static_cast<const char*>(m->payload), m->len));
        if (!record.ok()) continue;
        const std::string data(record->payload);
        const int i = std::stoi(data.substr(0, data.find(' ')));
        if (i < 0 || i >= count || !was_sent[i].load()) continue;
        latencies.Add(duration<double, std::milli>(now - sent[i]).count());
        ++got;
      }
    });
    const auto t0 = Clock::now() + std::chrono::milliseconds(500);  // assigned and at the end
    BatchWait wait;
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

  Row FollowRow(const std::string& system, Latencies& latencies, int count) {
    Row r{"follow", system, "1 entry / 20 ms"};
    r.entries_per_s = static_cast<double>(latencies.ms.size());  // entries seen of `count`
    r.p50_ms = latencies.Percentile(0.5);
    r.p99_ms = latencies.Percentile(0.99);
    r.p999_ms = latencies.Percentile(1.0);
    r.value = count;
    return r;
  }

  void Follow() {
    const int count = absl::GetFlag(FLAGS_smoke) ? 25 : 250;
    // A second walserver on the same topics: a follower of a region served by another sidecar.
    Walserver other(server.prefix());
    other.Start();
    std::vector<Row> same, another, direct_rows;
    for (int run = 0; run < runs; ++run) {
      same.push_back(FollowService(namespaces[0], count, server.address(), "service same server"));
      Emit(same.back());
      another.push_back(
          FollowService(namespaces[0], count, other.address(), "service other server"));
      Emit(another.back());
      direct_rows.push_back(FollowDirect(namespaces[0], count));
      Emit(direct_rows.back());
    }
    other.Stop();
    auto by_p99 = [](std::vector<Row> v) {
      std::sort(v.begin(), v.end(), [](const Row& a, const Row& b) { return a.p99_ms < b.p99_ms; });
      return v[v.size() / 2];
    };
    const Row d = by_p99(direct_rows);
    // value: the ratio of the p99s; the p99 column: their difference.
    for (const Row& s : {by_p99(same), by_p99(another)}) {
      Row ratio{"follow", "ratio p99 " + s.system.substr(8) + "/direct", s.parameter};
      ratio.value = s.p99_ms / std::max(1e-9, d.p99_ms);
      ratio.p99_ms = s.p99_ms - d.p99_ms;
      Emit(ratio);
    }
  }

  // Over 80 lines on purpose: one experiment (set up a slot, then three measured phases whose
  // figures are compared in one table) reads best top to bottom.
  void Replay() {
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
    for (int round = 0; written < total; ++round) {
      wal::v1::AppendRequest request;
      for (int i = 0; i < batch; ++i) {
        auto* e = request.add_entries();
        e->set_namespace_id(1 + (round * batch + i) % count);
        e->set_data(payload);
        written += payload.size();
      }
      Must(c->Append(request).status(), "append");
    }
    const int64_t end = c->GetNamespace(1)->next_entry_id();
    const double mb = written / 1e6;

    std::vector<double> one, all, raw, many;
    for (int run = 0; run < runs; ++run) {
      auto t0 = Clock::now();
      uint64_t n = 0;
      wal::ReadOptions read;
      read.namespace_id = 1;
      Must(c->Read(read, [&](wal::v1::Entry&) { return ++n > 0; }), "read");
      one.push_back(duration<double>(Clock::now() - t0).count());
      uint64_t bytes = 0;
      raw.push_back(RawScan(ns->topic(), ns->partition(), start, end, &bytes));
      t0 = Clock::now();
      std::vector<std::thread> readers;
      for (int r = 1; r <= count; ++r) {
        readers.emplace_back([&, r] {
          wal::ReadOptions ro;
          ro.namespace_id = r;
          Must(c->Read(ro, [](wal::v1::Entry&) { return true; }), "read");
        });
      }
      for (auto& t : readers) t.join();
      all.push_back(duration<double>(Clock::now() - t0).count());
      // The same namespaces on one ReadMany stream, as a datanode opens its regions.
      t0 = Clock::now();
      wal::ReadManyOptions read_many;
      for (int r = 1; r <= count; ++r) read_many.namespaces.push_back({uint64_t(r), 0, 0});
      int ended = 0;
      Must(c->ReadMany(
               read_many, [](wal::v1::Entry&) { return true; },
               [&](const wal::v1::ReadEnd& end) {
                 if (end.code() != 0) Must(absl::InternalError(end.message()), "ReadMany");
                 ++ended;
                 return true;
               }),
           "ReadMany");
      if (ended != count) Must(absl::InternalError("not every namespace ended"), "ReadMany");
      many.push_back(duration<double>(Clock::now() - t0).count());
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
    std::vector<double> whole_times, among_empty;
    for (int run = 0; run < runs; ++run) {
      auto t0 = Clock::now();
      wal::ReadOptions read;
      read.namespace_id = 1;
      Must(w->Read(read, [](wal::v1::Entry&) { return true; }), "read");
      whole_times.push_back(duration<double>(Clock::now() - t0).count());
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
      if (got != written) Must(absl::InternalError("ReadMany missed bytes"), "ReadMany");
      among_empty.push_back(duration<double>(Clock::now() - t0).count());
    }
    whole.Stop();

    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    Row r1{"replay", "service 1 namespace", absl::StrFormat("%.0f MB slot", mb)};
    r1.value = median(one);
    r1.mb_per_s = mb / r1.value;  // slot bytes scanned per second
    Row r0{"replay", "direct raw scan", r1.parameter};
    r0.value = median(raw);
    r0.mb_per_s = mb / r0.value;
    Row ra{"replay", absl::StrCat("service ", count, " at once"), r1.parameter};
    ra.value = median(all);
    ra.mb_per_s = mb / ra.value;
    Emit(r1);
    Emit(r0);
    Emit(ra);
    Row q1{"replay", "ratio 1 ns scan/raw", r1.parameter};
    q1.value = r0.value / r1.value;  // speed ratio: >= 0.9 wanted
    Row qa{"replay", "ratio all/raw time", r1.parameter};
    qa.value = ra.value / r0.value;  // time ratio: <= 1.2 wanted
    Row rw{"replay", "service one stream", r1.parameter};
    rw.value = median(whole_times);
    rw.mb_per_s = mb / rw.value;
    Emit(rw);
    Emit(q1);
    Emit(qa);
    Row qw{"replay", "ratio all/one stream", r1.parameter};
    qw.value = ra.value / rw.value;
    Emit(qw);
    Row rm{"replay", "service ReadMany", r1.parameter};
    rm.value = median(many);
    rm.mb_per_s = mb / rm.value;
    Emit(rm);
    Row qm{"replay", "ratio ReadMany/raw time", r1.parameter};
    qm.value = rm.value / r0.value;
    Emit(qm);
    Row re{"replay", absl::StrCat("service ReadMany 1 + ", empty, " empty"), r1.parameter};
    re.value = median(among_empty);
    re.mb_per_s = mb / re.value;
    Emit(re);
    Row qe{"replay", "ratio ReadMany 1+empty/one stream", r1.parameter};
    qe.value = re.value / rw.value;  // time ratio: <= 1.2 wanted
    Emit(qe);
  }

  // Closed-loop batches, each for one namespace, as a datanode appends one region's batch per
  // call; successive calls go round-robin over namespaces 1000000 .. 1000000+n-1.
  Row SpreadLoad(wal::Client& c, pid_t pid, int n) {
    std::atomic<uint64_t> next{0};
    const int batch = absl::GetFlag(FLAGS_batch);
    return ClosedLoop("sweep", "service", threads, pid, payload.size(), [&](int) {
      wal::v1::AppendRequest request;
      const uint64_t ns = 1000000 + next++ % n;
      for (int i = 0; i < batch; ++i) {
        auto* e = request.add_entries();
        e->set_namespace_id(ns);
        e->set_data(payload);
      }
      return c.Append(request).ok() ? static_cast<uint64_t>(batch) : 0;
    });
  }

  // Creates namespaces 1000000+from .. 1000000+to-1 with --create_in_flight calls at once, as
  // many datanodes opening their regions together; a row with the rate.
  Row CreateConcurrently(wal::Client& c, pid_t pid, int from, int to) {
    const int in_flight = std::min(absl::GetFlag(FLAGS_create_in_flight), to - from);
    std::atomic<int> next{from};
    const double cpu0 = PathCpuSeconds("service", pid);
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < in_flight; ++t) {
      pool.emplace_back([&] {
        for (int id = next++; id < to; id = next++) {
          Must(c.CreateNamespace(1000000 + id).status(), "create");
        }
      });
    }
    for (auto& th : pool) th.join();
    const double secs = duration<double>(Clock::now() - t0).count();
    Row r{"create", "service", absl::StrCat(to - from, " x ", in_flight, " in flight")};
    r.entries_per_s = (to - from) / secs;
    r.value = PathCpuSeconds("service", pid) - cpu0;  // CPU seconds of walbench and walserver
    r.rss_mib = ResidentMiB(pid);
    return r;
  }

  void Compression() {
    // Without the broker's data directory the bytes stored are not measured (value 0).
    const std::string data_dir = absl::GetFlag(FLAGS_kafka_data_dir);
    const auto stored_bytes = [&](const wal::v1::Namespace& ns) -> uint64_t {
      return data_dir.empty() ? 0 : StoredBytes(data_dir, ns.topic(), ns.partition());
    };
    const uint64_t total = static_cast<uint64_t>(absl::GetFlag(FLAGS_replay_mib)) << 20;
    const int threads = absl::GetFlag(FLAGS_threads);
    const int batch = 16;
    // Distinct entries (a few hundred), so that no codec sees the same bytes over and over.
    std::vector<std::string> entries;
    for (uint64_t seed = 1; seed <= 512; ++seed) entries.push_back(TimeSeriesEntry(seed, 4096));
    const std::vector<std::string> codecs = absl::StrSplit(absl::GetFlag(FLAGS_codecs), ',');
    for (const std::string& codec : codecs) {
      Walserver ws(absl::StrCat("codec", codec, getpid()),
                   {"--topic_count=1", "--partitions_per_topic=1", "--compression=" + codec});
      ws.Start();
      auto c = Connect(ws.address());
      Must(c->CreateNamespace(1).status(), "create");
      const auto ns = c->GetNamespace(1);
      const uint64_t before = stored_bytes(*ns);
      std::atomic<uint64_t> written{0}, appended{0}, appended_entries{0}, next{0};
      const double cpu0 = PathCpuSeconds("service", ws.pid());
      const auto t0 = Clock::now();
      std::vector<std::thread> callers;
      for (int t = 0; t < threads; ++t) {
        callers.emplace_back([&] {
          while (written.load() < total) {
            wal::v1::AppendRequest request;
            uint64_t bytes = 0;
            for (int i = 0; i < batch; ++i) {
              const std::string& data = entries[next++ % entries.size()];
              auto* e = request.add_entries();
              e->set_namespace_id(1);
              e->set_data(data);
              bytes += data.size();
            }
            written += bytes;
            Must(c->Append(std::move(request)).status(), "append");
            appended += bytes;
            appended_entries += batch;
          }
        });
      }
      for (auto& t : callers) t.join();
      const double secs = duration<double>(Clock::now() - t0).count();
      const double cpu = PathCpuSeconds("service", ws.pid()) - cpu0;
      const double gb = appended / 1e9;
      const uint64_t stored = stored_bytes(*ns) - before;
      std::vector<double> replays;
      for (int run = 0; run < runs; ++run) {
        const auto r0 = Clock::now();
        uint64_t n = 0;
        wal::ReadOptions read;
        read.namespace_id = 1;
        Must(c->Read(read, [&](wal::v1::Entry&) { return ++n > 0; }), "replay");
        replays.push_back(duration<double>(Clock::now() - r0).count());
      }
      std::sort(replays.begin(), replays.end());
      const std::string parameter = absl::StrFormat("%.0f MB rows", appended / 1e6);
      Row append{"compression", codec + " append", parameter};
      append.entries_per_s = appended_entries / secs;
      append.mb_per_s = appended / 1e6 / secs;
      append.cpu_s_per_gb = cpu / gb;
      append.rss_mib = ResidentMiB(ws.pid());
      append.value = static_cast<double>(stored) / gb;  // bytes stored per GB appended
      Emit(append);
      Row replay{"compression", codec + " replay", parameter};
      replay.mb_per_s = appended / 1e6 / replays[replays.size() / 2];
      replay.value = replays[replays.size() / 2];  // seconds
      Emit(replay);
    }
  }

  void Sweep() {
    Walserver sweep(absl::StrCat("sweep", getpid()));
    sweep.Start();
    auto c = Connect(sweep.address());
    const int max = absl::GetFlag(FLAGS_max_namespaces);
    int created = 0;
    double rss_at_10 = 0;
    for (int n : {10, 100, 1000, 10000, 100000, 1000000}) {
      if (n > max) break;
      if (n - created >= 1000) {
        Emit(CreateConcurrently(*c, sweep.pid(), created, n));
        created = n;
      }
      for (; created < n; ++created) {
        Must(c->CreateNamespace(1000000 + created).status(), "create");
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));
      // Idle: no calls for a while, then CPU and memory.
      const double cpu0 = ProcessCpuSeconds(sweep.pid());
      // CPU time comes in 10 ms ticks, 0.2% of a core over 5 s: the largest count, which the
      // target is about, is watched six times as long.
      const bool largest = n * 10 > max;
      const double idle = absl::GetFlag(FLAGS_seconds) * (largest ? 6 : 2);
      std::this_thread::sleep_for(duration<double>(idle));
      const double cpu = (ProcessCpuSeconds(sweep.pid()) - cpu0) / idle;
      const double rss = ResidentMiB(sweep.pid());
      if (n == 10) rss_at_10 = rss;
      // The same total load spread over all namespaces.
      Row load = SpreadLoad(*c, sweep.pid(), n);
      load.parameter = absl::StrCat(n, " namespaces");
      load.rss_mib = rss;
      load.value = cpu * 100;  // idle CPU, % of a core
      Emit(load);
      if (n > 10) {
        Row mem{"sweep", "bytes per idle namespace", load.parameter};
        mem.value = (rss - rss_at_10) * 1048576.0 / (n - 10);
        Emit(mem);
      }
    }
    // The throughput target, with every namespace created: the same load spread over the first
    // 10 and over all of them, alternating, median of --runs each.
    if (created > 10) {
      std::vector<Row> few, all;
      for (int run = 0; run < runs; ++run) {
        few.push_back(SpreadLoad(*c, sweep.pid(), 10));
        all.push_back(SpreadLoad(*c, sweep.pid(), created));
      }
      Row f = Median(few), a = Median(all);
      f.parameter = "over 10";
      a.parameter = absl::StrCat("over ", created);
      Emit(f);
      Emit(a);
      Row ratio{"sweep", absl::StrCat("ratio ", created, "/10"), a.parameter};
      ratio.value = a.entries_per_s / f.entries_per_s;
      Emit(ratio);
    }
    sweep.Stop();
    if (absl::StrContains(absl::GetFlag(FLAGS_modes), "startup")) {
      Walserver again(sweep.prefix());
      Row r{"startup", "service", absl::StrCat(created, " namespaces")};
      r.value = again.Start();
      Emit(r);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "walserver against direct librdkafka on the same broker, in the same run.\n"
      "Usage: walbench --brokers=HOST:PORT --walserver=PATH [--modes=...] [options]");
  absl::ParseCommandLine(argc, argv);
  spdlog::set_level(spdlog::level::warn);
  // As walserver does: Debian's Abseil checks every gRPC lock for deadlock cycles otherwise,
  // which cost this client 2% of the host in single mode.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (absl::GetFlag(FLAGS_brokers).empty() || absl::GetFlag(FLAGS_walserver).empty()) {
    std::cerr << "walbench: --brokers and --walserver are required\n";
    return 2;
  }
  if (absl::GetFlag(FLAGS_smoke)) {
    absl::SetFlag(&FLAGS_seconds, 0.5);
    absl::SetFlag(&FLAGS_runs, 1);
    absl::SetFlag(&FLAGS_replay_mib, 2);
    absl::SetFlag(&FLAGS_replay_namespaces, 5);
    absl::SetFlag(&FLAGS_max_namespaces, 100);
    absl::SetFlag(&FLAGS_latency_loads, "0.5");
    absl::SetFlag(&FLAGS_codecs, "none,lz4");
  }
  std::cout << absl::StrFormat("%-11s %-22s %-14s %12s %9s %9s %9s %9s %10s %8s %12s\n", "mode",
                               "system", "parameter", "entries/s", "MB/s", "p50 ms", "p99 ms",
                               "p99.9 ms", "CPU s/GB", "RSS MiB", "value");
  if (!absl::GetFlag(FLAGS_csv).empty()) {
    g_csv.open(absl::GetFlag(FLAGS_csv));
    g_csv << "mode,system,parameter,entries_per_s,mb_per_s,p50_ms,p99_ms,p999_ms,cpu_s_per_gb,"
             "rss_mib,value"
          << std::endl;
  }
  Bench bench;
  bench.Setup();
  const std::string modes = absl::GetFlag(FLAGS_modes);
  if (absl::StrContains(modes, "throughput")) bench.Throughput();
  if (absl::StrContains(modes, "single")) bench.Single();
  if (absl::StrContains(modes, "latency")) bench.Latency();
  if (absl::StrContains(modes, "replay")) bench.Replay();
  if (absl::StrContains(modes, "follow")) bench.Follow();
  if (absl::StrContains(modes, "sweep")) bench.Sweep();
  if (absl::StrContains(modes, "compression")) bench.Compression();
  bench.server.Stop();
  return 0;
}
