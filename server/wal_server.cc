#include "server/wal_server.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/common/deadline.h"
#include "server/common/read_file.h"
#include "server/kafka/admin.h"
#include "spdlog/spdlog.h"

namespace wal {
namespace {

constexpr uint64_t kMiB = 1 << 20;

absl::StatusOr<mode_t> UnixSocketMode(const std::string& mode) {
  const bool octal =
      !mode.empty() && mode.size() <= 4 && mode.find_first_not_of("01234567") == std::string::npos;
  if (!octal) {
    return absl::InvalidArgumentError(
        absl::StrCat("--unix_socket_mode=", mode,
                     " is not an octal mode such as 0660 (rw for owner and group)"));
  }
  return static_cast<mode_t>(std::stoul(mode, nullptr, 8));
}

// -1 (no change) for an empty name.
absl::StatusOr<gid_t> UnixSocketGroup(const std::string& name) {
  if (name.empty()) return static_cast<gid_t>(-1);
  uint32_t number = 0;
  if (absl::SimpleAtoi(name, &number)) return static_cast<gid_t>(number);
  std::vector<char> buffer(16384);
  group entry{};
  group* found = nullptr;
  int err = 0;
  while ((err = getgrnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found)) == ERANGE) {
    buffer.resize(buffer.size() * 2);  // a group with many members
  }
  if (err != 0 || found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--unix_socket_group=", name, " is not a group of this host (name or number)",
                     err != 0 ? absl::StrCat(": ", std::strerror(err)) : ""));
  }
  return found->gr_gid;
}

// The file of a unix:///path or unix:path listen address.
std::string UnixSocketPath(const std::string& listen) {
  return std::string(absl::StripPrefix(absl::StripPrefix(listen, "unix:"), "//"));
}

// Gives the socket gRPC bound the group and mode asked for (the umask during the bind already
// kept it from being any looser). The path must still be the socket, not a link someone put in
// its place in a shared folder.
absl::Status SetUnixSocketAccess(const std::string& listen, mode_t mode, gid_t group,
                                 const ServerOptions& o) {
  const std::string path = UnixSocketPath(listen);
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    return absl::UnavailableError(
        absl::StrCat("--listen=", listen, ": ", path, " is no longer the socket walserver bound"));
  }
  if (group != static_cast<gid_t>(-1) && lchown(path.c_str(), static_cast<uid_t>(-1), group) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "--unix_socket_group=", o.unix_socket_group, ": cannot give ", path, " that group: ",
        std::strerror(errno), " (a process may give its files only groups it is a member of)"));
  }
  if (chmod(path.c_str(), mode) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("--unix_socket_mode=", o.unix_socket_mode,
                                                    ": cannot chmod ", path, ": ",
                                                    std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status Validate(const ServerOptions& o) {
  if (o.topic_count < 1 || o.partitions_per_topic < 1) {
    return absl::InvalidArgumentError("topic_count and partitions_per_topic must be at least 1");
  }
  if (o.topic_prefix.empty()) return absl::InvalidArgumentError("topic_prefix must not be empty");
  if (o.max_record_bytes < 1024 || o.max_record_bytes > 64 * kMiB) {
    return absl::InvalidArgumentError("max_record_bytes must be between 1024 and 64 MiB");
  }
  if (o.max_entry_bytes > 1024 * kMiB) {
    return absl::InvalidArgumentError("max_entry_bytes must be at most 1 GiB");
  }
  // -1 leaves the replication factor to the brokers' default.
  if ((o.replication_factor < 1 && o.replication_factor != -1) || o.min_insync_replicas < 1) {
    return absl::InvalidArgumentError(
        "replication_factor must be at least 1 (or -1, the brokers' default) and "
        "min_insync_replicas at least 1");
  }
  if (o.replication_factor > 0 && o.min_insync_replicas > o.replication_factor) {
    return absl::InvalidArgumentError(
        absl::StrCat("--min_insync_replicas=", o.min_insync_replicas,
                     " is more than --replication_factor=", o.replication_factor,
                     ": Kafka would refuse every append. For a single broker set both to 1"));
  }
  if (o.compression != "none" && o.compression != "lz4" && o.compression != "zstd" &&
      o.compression != "snappy" && o.compression != "gzip") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--compression=", o.compression, " is not a codec: none, lz4, zstd, snappy or gzip"));
  }
  if (o.prune_mode != "auto" && o.prune_mode != "delete" && o.prune_mode != "logical") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--prune_mode=", o.prune_mode,
        " is not a mode: auto (delete until Kafka refuses, then logical), delete or logical"));
  }
  if (o.producers < 1 || o.max_concurrent_reads < 1 || o.slot_flushes_in_flight < 1) {
    return absl::InvalidArgumentError(
        "producers, max_concurrent_reads and slot_flushes_in_flight must be at least 1");
  }
  if (o.append_timeout.count() < 100 || o.admin_timeout.count() < 100) {
    return absl::InvalidArgumentError("append_timeout and admin_timeout must be at least 100 ms");
  }
  if (o.keepalive_time.count() < 0 || o.keepalive_timeout.count() < 1) {
    return absl::InvalidArgumentError(
        "keepalive_time_ms must be 0 (no pings) or more, keepalive_timeout_ms at least 1");
  }
  // Its announcement's key, "server/<name>", must not be 8 bytes long like a namespace's.
  if (o.name.size() == 1) {
    return absl::InvalidArgumentError(
        "--name must be empty (the default) or at least 2 characters");
  }
  if (auto mode = UnixSocketMode(o.unix_socket_mode); !mode.ok()) return mode.status();
  if (auto group = UnixSocketGroup(o.unix_socket_group); !group.ok()) return group.status();
  if (o.slow_append.count() < 0) {
    return absl::InvalidArgumentError("slow_append_ms must be 0 (log none) or more");
  }
  if (o.read_index_save_interval.count() < 0) {
    return absl::InvalidArgumentError(
        "read_index_save_interval_ms must be 0 (the index is not kept in Kafka) or more");
  }
  // Readers give up a torn split entry once a record encoded 60 s after its first chunk
  // arrives (log/entry_assembler.h): no chunk may land later, with 30 s to spare for clocks.
  if (o.kafka_rto_max.count() != 0 &&
      (o.kafka_rto_max.count() < 1000 || o.kafka_rto_max.count() > 120000)) {
    return absl::InvalidArgumentError(
        "kafka_rto_max_ms must be between 1000 and 120000, or 0 (the kernel's cap)");
  }
  if (o.append_timeout.count() > 30000) {
    return absl::InvalidArgumentError("append_timeout must be at most 30000 ms");
  }
  return absl::OkStatus();
}

// True if a process listens on the unix socket at `path` (a file left by a process that is
// gone refuses connections). Non-blocking: a listener whose backlog is full answers EAGAIN.
bool SomeoneListensOn(const std::string& path) {
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) return false;  // gRPC reports it
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  const bool listening =
      connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0 ||
      errno == EAGAIN;
  close(fd);
  return listening;
}

// Claims the unix socket of `listen` for this server: an flock on "<socket>.lock" (returned, held
// while the server serves), then a check that no other process serves on the socket, then the
// removal of a socket file left by an earlier run.
absl::StatusOr<int> ClaimUnixSocket(const std::string& listen) {
  // A socket file left by an earlier run would make the bind fail, and gRPC removes it
  // before binding: first make sure no other process still serves on it, or is about to.
  const std::string path = UnixSocketPath(listen);
  const std::string lock_path = path + ".lock";
  const int lock = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (lock < 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on --listen=", listen, ": cannot open ", lock_path, ": ",
        std::strerror(errno), errno == ENOENT ? " (is the socket's folder missing?)" : ""));
  }
  if (flock(lock, LOCK_EX | LOCK_NB) != 0) {
    close(lock);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on --listen=", listen,
                     ": another walserver serves on this socket or is starting on it (it holds ",
                     lock_path, "). Stop it or choose another --listen"));
  }
  if (SomeoneListensOn(path)) {
    close(lock);
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on --listen=", listen,
        ": another process serves on this socket. Stop it or choose another --listen"));
  }
  std::error_code ignored;
  if (std::filesystem::is_socket(path, ignored)) std::filesystem::remove(path, ignored);
  return lock;
}

// Message sizes, one listener per port, and keepalive: the settings of every connection.
void SetConnectionLimits(const ServerOptions& o, uint64_t max_entry_bytes,
                         grpc::ServerBuilder& builder) {
  // A request may carry one largest entry plus its envelope; a reply batch likewise.
  const int message_limit =
      static_cast<int>(std::min<uint64_t>(max_entry_bytes + 4 * kMiB, INT32_MAX));
  builder.SetMaxReceiveMessageSize(message_limit);
  // gRPC shares a port with any other process that asks (SO_REUSEPORT): a second walserver on
  // the same --listen would start and take part of the first one's connections. Refuse instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxSendMessageSize(message_limit);
  // Keepalive (docs/CONTRACT.md, "Dead connections"). Clients' pings are accepted whether or not
  // calls are open (they find a dead connection before a call waits on it), as often as every
  // kMinClientPingInterval; walserver's own pings go on without limit on a connection that
  // sends no data, such as an idle client's or a stalled follower's.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Twice as often as a client may ping: timers and clocks on both sides make the gaps a
  // little uneven.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             static_cast<int>(kMinClientPingInterval.count() / 2));
  // Zero turns walserver's pings off (gRPC's own default would ping every two hours).
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             o.keepalive_time.count() > 0
                                 ? static_cast<int>(o.keepalive_time.count())
                                 : std::numeric_limits<int>::max());
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             static_cast<int>(o.keepalive_timeout.count()));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

// The credentials of TCP listeners: TLS when a certificate is configured.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> TcpCredentials(const ServerOptions& o) {
  if (o.tls_cert_file.empty() && o.tls_key_file.empty()) {
    if (!o.tls_client_ca_file.empty()) {
      return absl::InvalidArgumentError("tls_client_ca_file needs tls_cert_file and tls_key_file");
    }
    return grpc::InsecureServerCredentials();
  }
  if (o.tls_cert_file.empty() || o.tls_key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both tls_cert_file and tls_key_file");
  }
  auto cert = ReadWholeFile(o.tls_cert_file, "tls_cert_file");
  if (!cert.ok()) return cert.status();
  auto key = ReadWholeFile(o.tls_key_file, "tls_key_file");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  if (!o.tls_client_ca_file.empty()) {
    auto ca = ReadWholeFile(o.tls_client_ca_file, "tls_client_ca_file");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

std::string HostName() {
  char host[256] = "walserver";
  gethostname(host, sizeof(host) - 1);
  return host;
}

// The host and the first listen address: the same across restarts, and never the same for two
// live walservers on one host (only one can listen there). A port chosen at start (0) is not
// known yet and changes anyway: then the process id keeps the name unique.
std::string DefaultName(const std::string& listen) {
  const std::string first = std::string(
      absl::StripAsciiWhitespace(absl::string_view(listen).substr(0, listen.find(','))));
  if (absl::EndsWith(first, ":0")) return absl::StrCat(HostName(), "-", getpid());
  std::string name = absl::StrCat(HostName(), "-", first);
  // Kafka client ids keep to letters, digits, '.', '_' and '-'.
  for (char& c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  }
  return name;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WalServer>> WalServer::Start(ServerOptions o) {
  if (absl::Status s = Validate(o); !s.ok()) return s;
  if (o.name.empty()) o.name = DefaultName(o.listen);
  std::unique_ptr<WalServer> self(new WalServer());
  // First, so that a second walserver on the same socket is refused before any work on Kafka.
  if (absl::Status s = self->ClaimUnixSockets(o); !s.ok()) return s;
  // In the order they depend on each other; the destructor (Shutdown) tears down in reverse.
  auto core = WalCore::Start(o);
  if (!core.ok()) return core.status();
  self->core_ = std::move(*core);
  for (auto step : {&WalServer::StartGrpc, &WalServer::Announce, &WalServer::StartHttpAndPruner}) {
    if (absl::Status s = (self.get()->*step)(o); !s.ok()) return s;
  }
  self->AddCollectors();
  spdlog::info(
      "walserver {} {} listening on {}{} (Kafka {}, librdkafka {}, slots {}x{}, max entry {} "
      "bytes)",
      WALSERVER_VERSION, o.name, absl::StrJoin(self->addresses_, ", "),
      self->http_ ? absl::StrCat(", metrics on http://", self->http_->address()) : "",
      self->core_->mock_cluster() ? "in-process mock"
                                  : self->core_->kafka().at("bootstrap.servers"),
      LibrdkafkaVersion(), o.topic_count, o.partitions_per_topic, self->max_entry_bytes());
  return self;
}

absl::StatusOr<ServiceOptions> WalServer::MakeServiceOptions(const ServerOptions& o) const {
  ServiceOptions service_options;
  service_options.max_entry_bytes = max_entry_bytes();
  service_options.max_inflight_append_bytes =
      o.max_inflight_append_bytes != 0 ? o.max_inflight_append_bytes : 4 * max_entry_bytes();
  if (service_options.max_inflight_append_bytes < max_entry_bytes()) {
    return absl::InvalidArgumentError(
        "max_inflight_append_bytes must be at least max_entry_bytes, or no largest entry fits");
  }
  service_options.admin_timeout = o.admin_timeout;
  service_options.slow_append = o.slow_append;
  if (!o.auth_token_file.empty()) {
    auto token = ReadWholeFile(o.auth_token_file, "auth_token_file");
    if (!token.ok()) return token.status();
    service_options.auth_token = std::string(absl::StripAsciiWhitespace(*token));
    if (service_options.auth_token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("auth_token_file ", o.auth_token_file, " holds no token"));
    }
  }
  return service_options;
}

absl::Status WalServer::ClaimUnixSockets(const ServerOptions& o) {
  const std::vector<std::string> listens = absl::StrSplit(o.listen, ',', absl::SkipWhitespace());
  for (const std::string& listen : listens) {
    if (!absl::StartsWith(listen, "unix:")) continue;
    auto lock = ClaimUnixSocket(listen);
    if (!lock.ok()) return lock.status();
    unix_socket_locks_.push_back(*lock);
  }
  return absl::OkStatus();
}

absl::Status WalServer::StartGrpc(const ServerOptions& o) {
  auto service_options = MakeServiceOptions(o);
  if (!service_options.ok()) return service_options.status();
  auto tcp_credentials = TcpCredentials(o);
  if (!tcp_credentials.ok()) return tcp_credentials.status();
  service_ = std::make_unique<WalServiceImpl>(*service_options, &core_->meta(), &core_->writer(),
                                              &core_->retried(), &core_->reader(), core_->admin(),
                                              &core_->metrics());
  // Our own health service reports the namespace table's state, and reflection can describe it.
  grpc::EnableDefaultHealthCheckService(false);
  health_ = std::make_unique<HealthService>([meta = &core_->meta()] { return meta->Health(); });
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::vector<std::string> listens = absl::StrSplit(o.listen, ',', absl::SkipWhitespace());
  if (listens.empty()) return absl::InvalidArgumentError("no listen address given");
  std::vector<int> ports(listens.size(), 0);
  for (size_t i = 0; i < listens.size(); ++i) {
    const bool unix_socket = absl::StartsWith(listens[i], "unix:");  // claimed at Start
    builder.AddListeningPort(
        listens[i], unix_socket ? grpc::InsecureServerCredentials() : *tcp_credentials, &ports[i]);
  }
  builder.RegisterService(service_.get());
  builder.RegisterService(health_.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<MetricsInterceptorFactory>(&core_->metrics()));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  SetConnectionLimits(o, max_entry_bytes(), builder);
  // Validate checked both; a group looked up again may fail now (a name service down).
  const absl::StatusOr<mode_t> socket_mode = UnixSocketMode(o.unix_socket_mode);
  const absl::StatusOr<gid_t> socket_group = UnixSocketGroup(o.unix_socket_group);
  if (!socket_mode.ok()) return socket_mode.status();
  if (!socket_group.ok()) return socket_group.status();
  // Claimed at Start, before the work on Kafka: a process other than a walserver (which the
  // lock keeps out) may have bound the path since, and gRPC would remove its socket and bind.
  for (const std::string& listen : listens) {
    if (absl::StartsWith(listen, "unix:") && SomeoneListensOn(UnixSocketPath(listen))) {
      return absl::UnavailableError(absl::StrCat(
          "cannot listen on --listen=", listen,
          ": another process serves on this socket. Stop it or choose another --listen"));
    }
  }
  // Sockets are bound with no more permission than asked for, so that no one connects in the
  // moment before the chmod below (which only adds what the umask took away).
  const mode_t umask_before = umask(~*socket_mode & 0777);
  server_ = builder.BuildAndStart();
  umask(umask_before);
  if (server_) awake_ = std::make_unique<CallbackThreadsAwake>(server_.get());
  for (size_t i = 0; i < listens.size(); ++i) {
    if (!server_ || ports[i] == 0) {
      return absl::UnavailableError(absl::StrCat(
          "cannot listen on --listen=", listens[i],
          ": another process holds the address, it is not one of this host's, or the unix "
          "socket's folder is missing. Stop the other process or choose another --listen"));
    }
    if (absl::StartsWith(listens[i], "unix:")) {
      if (absl::Status s = SetUnixSocketAccess(listens[i], *socket_mode, *socket_group, o);
          !s.ok()) {
        return s;
      }
      addresses_.push_back(listens[i]);
    } else {
      addresses_.push_back(
          absl::StrCat(listens[i].substr(0, listens[i].rfind(':')), ":", ports[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status WalServer::Announce(const ServerOptions& o) {
  return core_->meta().Announce(HostName(), absl::StrJoin(addresses_, ","),
                                Clock::now() + o.startup_timeout);
}

absl::Status WalServer::StartHttpAndPruner(const ServerOptions& o) {
  if (!o.http_listen.empty()) {
    auto http = HttpEndpoint::Start(o.http_listen, &core_->metrics(),
                                    [meta = &core_->meta()] { return meta->Health(); });
    if (!http.ok()) {
      return absl::Status(http.status().code(),
                          absl::StrCat("--http_listen: ", http.status().message(),
                                       ". Stop the process holding it, choose another "
                                       "--http_listen, or set it empty to turn /metrics off"));
    }
    http_ = std::move(*http);
  }
  const PruneMode mode = o.prune_mode == "logical"  ? PruneMode::kLogical
                         : o.prune_mode == "delete" ? PruneMode::kDelete
                                                    : PruneMode::kAuto;
  if (mode == PruneMode::kLogical) {
    core_->metrics().prune_logical = 1;
    spdlog::info(
        "--prune_mode=logical: truncated entries are unreadable, and their records stay in "
        "Kafka (disk use only grows)");
  } else if (o.prune_interval.count() == 0) {
    core_->metrics().prune_logical = 1;  // --prune_interval_ms=0: nothing is ever deleted
  } else if (core_->mock_cluster() != nullptr) {
    // The mock cluster has no DeleteRecords, and asking it leaks a queue of the client (192
    // bytes under LeakSanitizer, librdkafka 2.0.2 and 2.12.1 alike): what auto would find out
    // at its first round is known.
    core_->metrics().prune_logical = 1;
  } else {
    // Each namespace counts from its first readable entry, so an idle one does not pin its slot.
    auto first_entries = [reader = &core_->reader()](const Slot& slot, int64_t end_at_least,
                                                     Clock::time_point deadline) {
      return reader->FirstEntriesOf(slot, end_at_least, deadline);
    };
    pruner_ = std::make_unique<Pruner>(&core_->meta(), core_->admin(), core_->slots(),
                                       o.prune_interval, mode, &core_->metrics(), first_entries);
  }
  return absl::OkStatus();
}

void WalServer::AddCollectors() {
  core_->metrics().AddCollector([](MetricWriter& w) {
    w.Sample("walserver_build_info",
             {{"version", WALSERVER_VERSION}, {"librdkafka", LibrdkafkaVersion()}}, 1);
  });
  core_->metrics().AddCollector(
      [meta = &core_->meta(), reader = &core_->reader()](MetricWriter& w) {
        w.Sample("walserver_meta_healthy", {}, meta->Health().ok() ? 1 : 0);
        w.Sample("walserver_name_conflicts_total", {}, static_cast<double>(meta->name_conflicts()));
        w.Sample("walserver_records_skipped_total", {{"topic", "data"}},
                 static_cast<double>(reader->records_skipped()));
        w.Sample("walserver_records_skipped_total", {{"topic", "meta"}},
                 static_cast<double>(meta->records_skipped()));
        size_t live = 0;
        for (const auto& [slot, count] : meta->LoadPerSlot()) {
          live += count;
          w.Sample("walserver_slot_namespaces",
                   {{"topic", slot.topic}, {"partition", std::to_string(slot.partition)}},
                   static_cast<double>(count));
        }
        w.Sample("walserver_namespaces", {}, static_cast<double>(live));
        for (const auto& [slot, offset] : meta->LowestFirstEntryIds()) {
          w.Sample("walserver_slot_lowest_first_entry_id",
                   {{"topic", slot.topic}, {"partition", std::to_string(slot.partition)}},
                   static_cast<double>(offset));
        }
        for (const auto& [slot, count] : meta->LoadPerSlot()) {
          w.Sample("walserver_slot_pruned_before",
                   {{"topic", slot.topic}, {"partition", std::to_string(slot.partition)}},
                   static_cast<double>(meta->PrunedBefore(slot)));
        }
      });
  core_->metrics().AddCollector([service = service_.get()](MetricWriter& w) {
    w.Sample("walserver_append_bytes_in_flight", {},
             static_cast<double>(service->inflight_append_bytes()));
    w.Sample("walserver_append_bytes_in_flight_limit", {},
             static_cast<double>(service->max_inflight_append_bytes()));
  });
  core_->metrics().AddCollector([writer = &core_->writer()](MetricWriter& w) {
    for (const Producer* p : writer->producers()) {
      w.Sample("walserver_kafka_producer_queue_messages", {{"producer", p->name()}},
               p->queue_length());
      WriteKafkaStats(p->name(), p->stats_json(), w);
    }
    w.Sample("walserver_packed_records_total", {}, static_cast<double>(writer->packed_records()));
    w.Sample("walserver_packed_entries_total", {}, static_cast<double>(writer->packed_entries()));
  });
}

WalServer::~WalServer() {
  Shutdown();
  for (int lock : unix_socket_locks_) close(lock);
}

void WalServer::Shutdown(std::chrono::milliseconds grace) {
  // The pruner's step in progress (bounded) ends while the calls finish.
  if (pruner_) pruner_->Stop();
  awake_.reset();  // its calls must not keep the server's Shutdown waiting
  http_.reset();
  // Reads end at once (a following read would otherwise hold the grace period); appends in
  // flight finish within it and reach their callers.
  if (core_) core_->StopReads();
  // Long-lived append streams end once what they started is answered.
  if (service_) service_->StopStreams();
  const auto fail_pending = [this] {
    // Catch-ups first: a round begun after the cancellation below would not notice it.
    if (service_) service_->FailCatchUps();
    CancelWatermarkQueries();
    if (core_) core_->FailPending();
  };
  if (server_) {
    // gRPC's Shutdown waits for every call to finish. Calls still waiting on Kafka when the
    // grace ends (it may be unreachable) are failed, so that shutdown never waits longer.
    std::mutex mu;
    std::condition_variable cv;
    bool finished = false;
    std::thread watchdog([&] {
      std::unique_lock<std::mutex> lock(mu);
      if (cv.wait_for(lock, grace, [&] { return finished; })) return;
      lock.unlock();
      spdlog::warn("shutdown: failing the calls still waiting on Kafka after {} ms", grace.count());
      fail_pending();
    });
    server_->Shutdown(std::chrono::system_clock::now() + grace);
    {
      std::lock_guard<std::mutex> lock(mu);
      finished = true;
    }
    cv.notify_all();
    watchdog.join();
    server_.reset();
  }
  pruner_.reset();
  // No call waits on Kafka any more; what the producers still hold belongs to calls that were
  // answered already (the outcome unknown to them), so it is dropped rather than waited for.
  fail_pending();
  // A stream whose call ended still holds its reactor until its last append completes, and
  // that completion uses the service: failed just above, so it comes at once.
  if (service_ && !service_->WaitForStreams(Clock::now() + std::chrono::seconds(5))) {
    spdlog::warn("shutdown: append streams still wait for their appends; leaving the service");
    (void)service_.release();
  }
  service_.reset();
  health_.reset();
  if (core_) core_->Close();
}

}  // namespace wal
