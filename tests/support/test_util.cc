#include "tests/support/test_util.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/client_interceptor.h"
#include "server/common/namespace_key.h"
#include "server/kafka/admin.h"
#include "server/log/record_format.h"

namespace wal::testing {

std::string UniqueName(const std::string& base) {
  static std::atomic<int> counter{0};
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return absl::StrCat(
      base, "_", getpid(), "_", counter++, "_",
      std::chrono::duration_cast<std::chrono::milliseconds>(now).count() % 100000000);
}

std::string TestBrokers() {
  const char* brokers = std::getenv("WAL_TEST_BROKERS");
  return brokers ? brokers : "";
}

ServerOptions MockServerOptions() {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.http_listen = "";
  o.topic_count = 2;
  o.partitions_per_topic = 2;
  o.startup_timeout = std::chrono::seconds(20);
  return o;
}

std::unique_ptr<Client> Connect(const std::string& address, std::chrono::milliseconds timeout) {
  ClientOptions options;
  options.target = address;
  options.timeout = timeout;
  auto client = Client::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

namespace {

class LoseAnswer : public grpc::experimental::Interceptor {
 public:
  LoseAnswer(int lose_every, std::atomic<int>* calls, LostAnswers* lost)
      : lose_every_(lose_every), calls_(calls), lost_(lost) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_STATUS)) {
      grpc::Status* status = methods->GetRecvStatus();
      if (status->ok() && ++*calls_ % lose_every_ == 0) {
        ++lost_->count;
        *status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "answer lost on the way (test)");
      }
    }
    methods->Proceed();
  }

 private:
  const int lose_every_;
  std::atomic<int>* calls_;
  LostAnswers* lost_;
};

// On an AppendStream: every lose_every-th message of answers is thrown away and the stream
// cancelled, as when the connection drops after walserver wrote the appends.
class LoseStreamAnswers : public grpc::experimental::Interceptor {
 public:
  LoseStreamAnswers(grpc::experimental::ClientRpcInfo* info, int lose_every,
                    std::atomic<int>* messages, LostAnswers* lost)
      : info_(info), lose_every_(lose_every), messages_(messages), lost_(lost) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      auto* response = static_cast<v1::AppendStreamResponse*>(methods->GetRecvMessage());
      if (response != nullptr && ++*messages_ % lose_every_ == 0) {
        bool any_ok = false;
        for (const auto& result : response->results()) any_ok |= result.code() == 0;
        if (any_ok) {
          lost_->count += response->results_size();
          response->clear_results();
          info_->client_context()->TryCancel();
        }
      }
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ClientRpcInfo* const info_;
  const int lose_every_;
  std::atomic<int>* messages_;
  LostAnswers* lost_;
};

class LoseAnswers : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  LoseAnswers(int lose_every, LostAnswers* lost) : lose_every_(lose_every), lost_(lost) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    const std::string method = info->method();
    if (method == "/wal.v1.WalService/AppendStream") {
      return new LoseStreamAnswers(info, lose_every_, &calls_, lost_);
    }
    if (method != "/wal.v1.WalService/Append") return nullptr;
    return new LoseAnswer(lose_every_, &calls_, lost_);
  }

 private:
  const int lose_every_;
  LostAnswers* lost_;
  std::atomic<int> calls_{0};
};

}  // namespace

std::unique_ptr<Client> LosingClient(const std::string& address, int lose_every, LostAnswers* lost,
                                     ClientOptions options) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<LoseAnswers>(lose_every, lost));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  auto channel = grpc::experimental::CreateCustomChannelWithInterceptors(
      address, grpc::InsecureChannelCredentials(), args, std::move(factories));
  options.retry_backoff = std::chrono::milliseconds(10);
  return Client::OnChannel(std::move(channel), options);
}

absl::StatusOr<int64_t> ProduceRaw(const std::string& bootstrap, const std::string& topic,
                                   int32_t partition, const std::string& key,
                                   const std::string& value) {
  struct Waiter : DeliveryHandler {
    std::promise<std::pair<rd_kafka_resp_err_t, int64_t>> done;
    void OnDelivery(const Delivery& delivery) override {
      done.set_value({delivery.err, delivery.offset});
    }
  } waiter;
  auto producer = Producer::Create({{"bootstrap.servers", bootstrap}}, "test-raw");
  if (!producer.ok()) return producer.status();
  if (absl::Status s = (*producer)->Produce(topic, partition, key, value, &waiter); !s.ok()) {
    return s;
  }
  auto future = waiter.done.get_future();
  if (future.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    return absl::DeadlineExceededError("raw produce not acknowledged");
  }
  const auto [err, offset] = future.get();
  if (err) return absl::UnavailableError(rd_kafka_err2str(err));
  return offset;
}

absl::StatusOr<std::vector<RawRecord>> ReadSlotRaw(const std::string& bootstrap,
                                                   const std::string& topic, int32_t partition) {
  auto consumer = Consumer::Create({{"bootstrap.servers", bootstrap}}, "test-raw-reader");
  if (!consumer.ok()) return consumer.status();
  auto marks = QueryWatermarks((*consumer)->handle(), Slot{topic, partition},
                               Clock::now() + std::chrono::seconds(10));
  if (!marks.ok()) return marks.status();
  std::vector<RawRecord> out;
  if (marks->high == marks->low) return out;
  if (absl::Status s = (*consumer)->Assign(topic, partition, marks->low); !s.ok()) return s;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    Message msg = (*consumer)->Poll(100);
    if (!msg || msg->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) continue;
    if (msg->err) return absl::UnavailableError(rd_kafka_err2str(msg->err));
    RawRecord r;
    r.offset = msg->offset;
    if (msg->key) r.key.assign(static_cast<const char*>(msg->key), msg->key_len);
    if (msg->payload) r.value.assign(static_cast<const char*>(msg->payload), msg->len);
    out.push_back(std::move(r));
    if (msg->offset + 1 >= marks->high) return out;
  }
  return absl::DeadlineExceededError("reading the slot took over 60 s");
}

absl::StatusOr<std::map<EntryName, int>> EntryCopies(const std::string& bootstrap,
                                                     const std::string& topic, int32_t partition) {
  absl::StatusOr<std::vector<RawRecord>> records = ReadSlotRaw(bootstrap, topic, partition);
  if (!records.ok()) return records.status();
  std::map<EntryName, int> copies;
  // Split entries under way, by session and nonce: the entry, and the chunk that comes next.
  std::map<std::pair<uint64_t, uint64_t>, std::pair<EntryName, uint32_t>> started;
  const auto count = [&](uint64_t ns, std::string_view value) {
    absl::StatusOr<DecodedRecord> record = DecodeRecord(value);
    if (!record.ok()) return;
    const RecordHeader& h = record->header;
    const EntryName name{ns, h.stamp.writer_id, h.stamp.sequence};
    const std::pair<uint64_t, uint64_t> entry{h.source.session, h.entry_nonce};
    if (h.kind == RecordKind::kFull) {
      ++copies[name];
    } else if (h.kind == RecordKind::kFirst) {
      started[entry] = {name, 1};
    } else if (h.kind == RecordKind::kMiddle || h.kind == RecordKind::kLast) {
      auto it = started.find(entry);
      if (it == started.end()) return;
      if (h.chunk_index != it->second.second) {
        started.erase(it);  // torn
      } else if (h.kind == RecordKind::kMiddle) {
        ++it->second.second;
      } else {
        ++copies[it->second.first];
        started.erase(it);
      }
    }
  };
  for (const RawRecord& r : *records) {
    if (IsPackedRecord(r.value)) {
      std::vector<PackedPart> parts;
      if (absl::Status s = DecodePacked(r.value, &parts); !s.ok()) return s;
      for (const PackedPart& part : parts) count(part.namespace_id, part.record);
    } else if (std::optional<uint64_t> ns = DecodeKey(r.key.data(), r.key.size())) {
      count(*ns, r.value);
    }
  }
  return copies;
}

std::vector<std::string> KafkaServerArgs(const std::string& brokers, const std::string& prefix) {
  return {"--brokers=" + brokers, "--topic_prefix=" + prefix, "--topic_count=2",
          "--partitions_per_topic=2",
          // The test broker is a single node.
          "--replication_factor=1", "--min_insync_replicas=1"};
}

int EphemeralPortsStart() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return in >> low ? low : 32768;  // Linux's default when the file cannot be read
}

bool PortIsFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return free;
}

int FreePort() {
  // Below the ephemeral ports: a port the kernel hands out to outgoing connections can be taken
  // while a server is down, by any connection or by a client's own retry connecting to itself
  // (TCP's simultaneous open), and the server then cannot listen on it again. The upper half of
  // the 12,000 below them: tests/kafka/kafka.sh takes the lower half for brokers, which keep
  // their ports across a stop and start (a walserver here once took a stopped broker's).
  const int end = EphemeralPortsStart();
  const int band = std::max(1025, end - 12000);
  const int start = band + (end - band) / 2;
  if (end - start < 500) {
    ADD_FAILURE()
        << "too few ports below the ephemeral ones (net.ipv4.ip_local_port_range starts at " << end
        << ")";
    return 0;
  }
  static std::mt19937 rng(std::random_device{}());
  static std::mutex mu;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    int port;
    {
      std::lock_guard<std::mutex> lock(mu);
      port = std::uniform_int_distribution<int>(start, end - 1)(rng);
    }
    if (PortIsFree(port)) return port;
  }
  ADD_FAILURE() << "no free port in [" << start << ", " << end << ")";
  return 0;
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(std::vector<std::string> args,
                                                                    const std::string& listen) {
  auto p = std::make_unique<ServerProcess>();
  p->dir_ = (std::filesystem::temp_directory_path() / UniqueName("walserver")).string();
  std::filesystem::create_directories(p->dir_);
  p->args_ = std::move(args);
  // A port of our own choosing rather than the kernel's (0), which is an ephemeral one that
  // Restart could find taken (FreePort). Another test may pick the same one before walserver
  // listens (after its start-up with Kafka): then another port.
  const bool any_port = listen == "127.0.0.1:0";
  for (int attempt = 0;; ++attempt) {
    const std::string address = any_port ? absl::StrCat("127.0.0.1:", FreePort()) : listen;
    absl::Status s = p->Launch(address);
    if (s.ok()) return p;
    if (!any_port || attempt == 4 || !absl::StrContains(s.message(), "cannot listen")) return s;
  }
}

absl::Status ServerProcess::Restart() {
  Kill();
  return Launch(address_);
}

absl::Status ServerProcess::Launch(const std::string& listen) {
  const std::string ready = dir_ + "/ready";
  const std::string log = dir_ + "/walserver.log";
  std::filesystem::remove(ready);
  std::vector<std::string> args = args_;
  args.insert(args.begin(), WALSERVER_PATH);
  args.push_back("--listen=" + listen);
  args.push_back("--http_listen=127.0.0.1:0");
  args.push_back("--ready_file=" + ready);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The log holds every launch; a failed start reports its own part.
  std::error_code no_log_yet;
  const uintmax_t log_start = std::filesystem::file_size(log, no_log_yet);
  pid_ = fork();
  if (pid_ < 0) return absl::InternalError("fork failed");
  if (pid_ == 0) {
    FILE* out = std::freopen(log.c_str(), "a", stderr);
    if (out) dup2(fileno(stderr), STDOUT_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::ifstream in(ready); in && std::getline(in, address_) && !address_.empty()) {
      return absl::OkStatus();
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      std::ifstream in(log);
      if (!no_log_yet) in.seekg(static_cast<std::streamoff>(log_start));
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      return absl::InternalError(absl::StrCat("walserver exited during start-up:\n", text));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError("walserver did not start within 90 s; log in " + log);
}

int ServerProcess::Stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string ServerProcess::log() const {
  std::ifstream in(dir_ + "/walserver.log");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void ServerProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

ServerProcess::~ServerProcess() {
  Kill();
  std::error_code ignored;
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir_, ignored);
}

int64_t ProcStatus(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::atoll(line.c_str() + field.size() + 1);
  }
  return -1;
}

std::string RandomData(std::mt19937_64& rng, size_t size) {
  std::string s(size, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

void RoundTrip(Client& client, uint64_t first_id, int namespaces, int entries, uint32_t seed) {
  std::mt19937_64 rng(seed);
  for (int i = 0; i < namespaces; ++i) {
    auto created = client.CreateNamespace(first_id + i);
    ASSERT_TRUE(created.ok()) << created.status();
    ASSERT_TRUE(created->created);
  }
  struct Expected {
    uint64_t id;
    std::string data;
  };
  std::map<uint64_t, std::vector<Expected>> expected;
  int appended = 0;
  while (appended < entries) {
    const int batch = std::min<int>(entries - appended, 1 + static_cast<int>(rng() % 40));
    v1::AppendRequest request;
    for (int i = 0; i < batch; ++i) {
      v1::Entry* e = request.add_entries();
      e->set_namespace_id(first_id + rng() % namespaces);
      // Binary data of mixed sizes, zero bytes included.
      e->set_data(absl::StrCat("entry ", appended + i, ":", RandomData(rng, rng() % 3000)));
    }
    auto ids = client.Append(request);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_EQ(ids->size(), static_cast<size_t>(batch));
    for (int i = 0; i < batch; ++i) {
      const v1::Entry& e = request.entries(i);
      auto& list = expected[e.namespace_id()];
      if (!list.empty()) {
        ASSERT_GT((*ids)[i], list.back().id) << "ids must increase within a namespace";
      }
      list.push_back({(*ids)[i], e.data()});
    }
    appended += batch;
  }
  for (int i = 0; i < namespaces; ++i) {
    const uint64_t ns = first_id + i;
    auto read = client.ReadAll(ns);
    ASSERT_TRUE(read.ok()) << read.status();
    const auto& want = expected[ns];
    ASSERT_EQ(read->size(), want.size()) << "namespace " << ns;
    for (size_t k = 0; k < want.size(); ++k) {
      ASSERT_EQ((*read)[k].namespace_id(), ns);
      ASSERT_EQ((*read)[k].entry_id(), want[k].id) << "namespace " << ns << " entry " << k;
      ASSERT_EQ((*read)[k].data(), want[k].data) << "namespace " << ns << " entry " << k;
    }
  }
}

absl::Status InjectFatalProducerErrors(const EntryWriter& writer) {
  // Waits on these very producers: an append may replace one as soon as it turns fatal (the
  // writer keeps the old one alive until it goes).
  return InjectFatalProducerErrors(writer.producers());
}

absl::Status InjectFatalProducerErrors(const std::vector<const Producer*>& injected) {
  for (const Producer* p : injected) {
    const rd_kafka_resp_err_t err = rd_kafka_test_fatal_error(
        p->handle(), RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER, "injected by the test");
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return absl::InternalError(
          absl::StrCat("rd_kafka_test_fatal_error: ", rd_kafka_err2str(err)));
    }
  }
  // The error reaches the producers' poll threads within their 100 ms poll.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    bool all_fatal = true;
    for (const Producer* p : injected) all_fatal &= p->fatal();
    if (all_fatal) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError("the producers did not report the fatal error within 5 s");
}

void DeleteTopic(rd_kafka_t* admin, const std::string& topic) {
  rd_kafka_DeleteTopic_t* request = rd_kafka_DeleteTopic_new(topic.c_str());
  rd_kafka_queue_t* queue = rd_kafka_queue_new(admin);
  rd_kafka_DeleteTopics(admin, &request, 1, nullptr, queue);
  rd_kafka_event_t* event = rd_kafka_queue_poll(queue, 30000);
  rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR__TIMED_OUT;
  std::string why = "timed out";
  size_t count = 0;
  const rd_kafka_topic_result_t** results =
      event == nullptr
          ? nullptr
          : rd_kafka_DeleteTopics_result_topics(rd_kafka_event_DeleteTopics_result(event), &count);
  if (count == 1) {
    err = rd_kafka_topic_result_error(results[0]);
    if (err) why = rd_kafka_topic_result_error_string(results[0]);
  }
  if (event != nullptr) rd_kafka_event_destroy(event);
  rd_kafka_queue_destroy(queue);
  rd_kafka_DeleteTopic_destroy(request);
  ASSERT_EQ(err, RD_KAFKA_RESP_ERR_NO_ERROR) << "deleting " << topic << ": " << why;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    const rd_kafka_metadata_t* md = nullptr;
    rd_kafka_topic_t* rkt = rd_kafka_topic_new(admin, topic.c_str(), nullptr);
    const rd_kafka_resp_err_t err = rd_kafka_metadata(admin, 0, rkt, &md, 5000);
    rd_kafka_topic_destroy(rkt);
    const bool gone = err == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1 &&
                      md->topics[0].err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
    const bool gone_too = err == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1 &&
                          md->topics[0].err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
    if (md != nullptr) rd_kafka_metadata_destroy(md);
    if (gone || gone_too) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  FAIL() << topic << " was not deleted";
}

}  // namespace wal::testing
