#include "server/flags.h"

#include <cstdint>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace {
// The defaults of every server flag.
const wal::ServerOptions kDefaults;

// Durations are flags in whole milliseconds, as int: larger values are refused when parsed.
int Millis(std::chrono::milliseconds d) { return static_cast<int>(d.count()); }
}  // namespace

ABSL_FLAG(std::string, listen, kDefaults.listen,
          "gRPC listen addresses, comma-separated: HOST:PORT or unix:///path/to/socket");
ABSL_FLAG(std::string, brokers, kDefaults.brokers,
          "Kafka bootstrap servers, HOST:PORT[,...]. Empty: an in-process mock cluster that keeps "
          "data in memory only, for trying the service");
ABSL_FLAG(std::string, topic_prefix, kDefaults.topic_prefix,
          "Topics are <prefix>_0 .. <prefix>_<topic_count-1> for data and <prefix>_meta");
ABSL_FLAG(int, topic_count, kDefaults.topic_count, "Number of data topics");
ABSL_FLAG(int, partitions_per_topic, kDefaults.partitions_per_topic,
          "Partitions per data topic; each partition is a slot");
ABSL_FLAG(int, replication_factor, kDefaults.replication_factor,
          "Replication factor of topics walserver creates");
ABSL_FLAG(int, min_insync_replicas, kDefaults.min_insync_replicas,
          "min.insync.replicas of topics walserver creates");
ABSL_FLAG(uint64_t, max_entry_bytes, kDefaults.max_entry_bytes,
          "Largest entry accepted; 0 means 64 MiB (4 MiB on the in-process mock cluster, which "
          "keeps only about 5 MiB per partition)");
ABSL_FLAG(uint64_t, max_record_bytes, kDefaults.max_record_bytes,
          "Largest Kafka record value; larger entries are split into several records");
ABSL_FLAG(int, producers, kDefaults.producers,
          "Kafka producers in the pool; each owns a share of the slots");
ABSL_FLAG(int, slot_flushes_in_flight, kDefaults.slot_flushes_in_flight,
          "Groups of records a slot keeps in flight; entries arriving meanwhile wait and leave "
          "together, packed into shared Kafka records (group commit)");
ABSL_FLAG(bool, packed_records, kDefaults.packed_records,
          "Pack the small entries of several namespaces into shared Kafka records; false while "
          "a walserver that cannot read them (before record format 2) still serves the topics");
ABSL_FLAG(int, append_timeout_ms, Millis(kDefaults.append_timeout),
          "An append not acknowledged by Kafka in this time fails with UNAVAILABLE (at most "
          "30000)");
ABSL_FLAG(int, kafka_rto_max_ms, Millis(kDefaults.kafka_rto_max),
          "TCP retransmits on Kafka connections at least this often (1000-120000; Linux 6.15 and "
          "later), so that appends come back about a second after a network cut heals; 0 "
          "leaves the kernel's cap (120 s)");
ABSL_FLAG(int, admin_timeout_ms, Millis(kDefaults.admin_timeout),
          "Bound on Kafka round trips of CreateNamespace, Truncate and the other admin calls");
ABSL_FLAG(int, slow_append_ms, Millis(kDefaults.slow_append),
          "Log appends that spent longer than this in one stage (before Kafka, in Kafka, or "
          "their answer's way back on a stream); 0 logs none");
ABSL_FLAG(int, max_concurrent_reads, kDefaults.max_concurrent_reads,
          "Read streams beyond this get RESOURCE_EXHAUSTED");
ABSL_FLAG(bool, read_index, kDefaults.read_index,
          "Reads skip the stretches of a slot that hold none of their namespaces' records, as "
          "the slot's index (built by earlier scans) says; false: every read scans every record");
ABSL_FLAG(int, read_index_save_interval_ms, Millis(kDefaults.read_index_save_interval),
          "Save each slot's index that changed to the <prefix>_index topic this often (and at "
          "shutdown), so that a walserver starting again skips from its first reads; 0: never");
ABSL_FLAG(int, keepalive_time_ms, Millis(kDefaults.keepalive_time),
          "Ping a client connection that sent nothing for this long (HTTP/2 keepalive); 0: never");
ABSL_FLAG(int, keepalive_timeout_ms, Millis(kDefaults.keepalive_timeout),
          "Close a connection whose answer to a ping takes longer than this, ending its calls");
ABSL_FLAG(uint64_t, max_inflight_append_bytes, kDefaults.max_inflight_append_bytes,
          "Entry bytes of appends waiting for Kafka; an append beyond gets RESOURCE_EXHAUSTED. "
          "0 means 4 x max_entry_bytes");
ABSL_FLAG(int, startup_timeout_ms, Millis(kDefaults.startup_timeout),
          "How long start-up waits for Kafka");
ABSL_FLAG(std::string, auth_token_file, kDefaults.auth_token_file,
          "File holding a bearer token: every call must then carry 'authorization: Bearer "
          "<token>' (UNAUTHENTICATED otherwise); the health service stays open");
ABSL_FLAG(std::string, tls_cert_file, kDefaults.tls_cert_file,
          "PEM certificate chain for TLS on the TCP listeners (with --tls_key_file)");
ABSL_FLAG(std::string, tls_key_file, kDefaults.tls_key_file, "PEM private key of --tls_cert_file");
ABSL_FLAG(std::string, unix_socket_mode, kDefaults.unix_socket_mode,
          "Mode of unix socket listeners, in octal; connecting needs write permission");
ABSL_FLAG(std::string, unix_socket_group, kDefaults.unix_socket_group,
          "Group of unix socket listeners, a name or a number; empty: the group the socket got "
          "(the process's, or a setgid folder's)");
ABSL_FLAG(std::string, tls_client_ca_file, kDefaults.tls_client_ca_file,
          "PEM CA certificates: clients must present a certificate signed by one of them");
ABSL_FLAG(int, prune_interval_ms, Millis(kDefaults.prune_interval),
          "How often records no live namespace can read are deleted from the slots "
          "(DeleteRecords); 0 turns pruning off");
ABSL_FLAG(std::string, compression, kDefaults.compression,
          "Compression of the data topics' record batches: none, lz4, zstd, snappy or gzip "
          "(docs/benchmarks/2026-12-01-compression-checksums.md compares them on time-series WAL "
          "entries)");
ABSL_FLAG(std::string, prune_mode, kDefaults.prune_mode,
          "auto: delete records with DeleteRecords until the cluster refuses it (a policy, an "
          "ACL, a managed Kafka without it), then truncate logically only; delete: always try, "
          "and report each refusal; logical: never delete (truncated records stay in Kafka)");
ABSL_FLAG(std::string, kafka_properties, "",
          "Extra librdkafka properties for every client, KEY=VALUE[,KEY=VALUE...] (security "
          "settings, for example); also settable one by one as --kafka.KEY=VALUE");
ABSL_FLAG(std::string, name, kDefaults.name,
          "Name of this server in Kafka client ids and its records; unique per live server and "
          "the same across its restarts. Empty: HOST-LISTEN (the first --listen address), or "
          "HOST-PID with port 0");
ABSL_FLAG(std::string, http_listen, kDefaults.http_listen,
          "HOST:PORT of the HTTP port with Prometheus /metrics and /healthz; empty: off");
// The process's own.
ABSL_FLAG(std::string, ready_file, "",
          "Once serving, write the listen address (with the real port) to this file");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn or error");
ABSL_FLAG(std::string, log_format, "text", "text, or json for one JSON object per line");
ABSL_FLAG(std::string, config, "",
          "Config file of 'name = value' lines (any option here, and kafka.<property> for "
          "librdkafka). Precedence: command line, then WALSERVER_<NAME> environment variables, "
          "then this file, then the defaults");

namespace wal {

absl::StatusOr<ServerOptions> ServerOptionsFromFlags(
    const std::map<std::string, std::string>& kafka_properties) {
  using std::chrono::milliseconds;
  ServerOptions o;
  o.listen = absl::GetFlag(FLAGS_listen);
  o.http_listen = absl::GetFlag(FLAGS_http_listen);
  o.brokers = absl::GetFlag(FLAGS_brokers);
  o.topic_prefix = absl::GetFlag(FLAGS_topic_prefix);
  o.topic_count = absl::GetFlag(FLAGS_topic_count);
  o.partitions_per_topic = absl::GetFlag(FLAGS_partitions_per_topic);
  o.replication_factor = absl::GetFlag(FLAGS_replication_factor);
  o.min_insync_replicas = absl::GetFlag(FLAGS_min_insync_replicas);
  o.max_entry_bytes = absl::GetFlag(FLAGS_max_entry_bytes);
  o.max_record_bytes = absl::GetFlag(FLAGS_max_record_bytes);
  o.producers = absl::GetFlag(FLAGS_producers);
  o.slot_flushes_in_flight = absl::GetFlag(FLAGS_slot_flushes_in_flight);
  o.packed_records = absl::GetFlag(FLAGS_packed_records);
  o.append_timeout = milliseconds(absl::GetFlag(FLAGS_append_timeout_ms));
  o.kafka_rto_max = milliseconds(absl::GetFlag(FLAGS_kafka_rto_max_ms));
  o.admin_timeout = milliseconds(absl::GetFlag(FLAGS_admin_timeout_ms));
  o.slow_append = milliseconds(absl::GetFlag(FLAGS_slow_append_ms));
  o.startup_timeout = milliseconds(absl::GetFlag(FLAGS_startup_timeout_ms));
  o.max_concurrent_reads = absl::GetFlag(FLAGS_max_concurrent_reads);
  o.read_index = absl::GetFlag(FLAGS_read_index);
  o.read_index_save_interval = milliseconds(absl::GetFlag(FLAGS_read_index_save_interval_ms));
  o.keepalive_time = milliseconds(absl::GetFlag(FLAGS_keepalive_time_ms));
  o.keepalive_timeout = milliseconds(absl::GetFlag(FLAGS_keepalive_timeout_ms));
  o.prune_interval = milliseconds(absl::GetFlag(FLAGS_prune_interval_ms));
  o.prune_mode = absl::GetFlag(FLAGS_prune_mode);
  o.compression = absl::GetFlag(FLAGS_compression);
  o.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  o.tls_cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  o.tls_key_file = absl::GetFlag(FLAGS_tls_key_file);
  o.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  o.unix_socket_mode = absl::GetFlag(FLAGS_unix_socket_mode);
  o.unix_socket_group = absl::GetFlag(FLAGS_unix_socket_group);
  o.max_inflight_append_bytes = absl::GetFlag(FLAGS_max_inflight_append_bytes);
  o.name = absl::GetFlag(FLAGS_name);
  for (absl::string_view kv :
       absl::StrSplit(absl::GetFlag(FLAGS_kafka_properties), ',', absl::SkipWhitespace())) {
    std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first.empty() || p.second.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--kafka_properties: '", kv, "' is not KEY=VALUE"));
    }
    o.kafka_properties[p.first] = p.second;
  }
  for (const auto& [key, value] : kafka_properties) o.kafka_properties[key] = value;
  return o;
}

std::string LogFormatFlag() { return absl::GetFlag(FLAGS_log_format); }
std::string LogLevelFlag() { return absl::GetFlag(FLAGS_log_level); }
std::string ReadyFileFlag() { return absl::GetFlag(FLAGS_ready_file); }

void PrintHelp(std::ostream& out) {
  out << absl::ProgramUsageMessage() << "\n\nOptions:\n";
  std::map<std::string, absl::CommandLineFlag*> ours;  // sorted by name
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::EndsWith(flag->Filename(), "server/flags.cc")) ours.emplace(name, flag);
  }
  for (const auto& [name, flag] : ours) {
    const std::string default_value = flag->DefaultValue();
    const std::string text = absl::StrCat(
        "--", name, " (", flag->Help(), "); default: ",
        flag->IsOfType<std::string>() ? absl::StrCat("\"", default_value, "\"") : default_value,
        ";");
    // Wrapped at 80 columns, continuation lines indented.
    std::string line = "  ";
    for (absl::string_view word : absl::StrSplit(text, ' ')) {
      if (line.size() + word.size() + 1 > 80 && line.size() > 6) {
        out << line << "\n";
        line = "      ";
      } else if (line.size() > 2 && line.back() != ' ') {
        line += ' ';
      }
      absl::StrAppend(&line, word);
    }
    out << line << "\n";
  }
}

}  // namespace wal
