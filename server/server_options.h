// The options of a whole walserver; walserver's flags (server/flags.cc) and in-process servers
// fill them in.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "server/kafka/client.h"
#include "server/log/entry_reader.h"
#include "server/log/entry_writer.h"
#include "server/log/slot_index_store.h"
#include "server/meta/meta_store.h"
#include "server/rpc/wal_service.h"

namespace wal {

// The options of a whole server, each defined here once: walserver's flags (server/flags.cc) take
// their defaults from this struct, and the defaults that belong to a component come from that
// component's options.
struct ServerOptions {
  // gRPC addresses, comma-separated: HOST:PORT (port 0 picks one) or unix:///path.
  std::string listen = "127.0.0.1:50051";
  // Prometheus /metrics and /healthz, HOST:PORT; empty: off. The default is walserver's; a
  // second server on the host (tests, in-process servers) sets port 0 or empty.
  std::string http_listen = "127.0.0.1:9464";
  std::string brokers;  // empty: the in-process mock cluster
  std::string topic_prefix = "wal";
  int topic_count = 4;
  int partitions_per_topic = 4;
  int replication_factor = 3;
  int min_insync_replicas = 2;
  uint64_t max_entry_bytes = 0;  // 0: 64 MiB, or 4 MiB on the mock cluster
  uint64_t max_record_bytes = WriterOptions().max_record_bytes;
  int producers = WriterOptions().producers;
  int slot_flushes_in_flight = WriterOptions().slot_flushes_in_flight;
  bool packed_records = WriterOptions().packed_records;
  std::chrono::milliseconds append_timeout = WriterOptions().append_timeout;
  // TCP's retransmission interval cap on Kafka connections (kafka/client.h); zero: the kernel's.
  std::chrono::milliseconds kafka_rto_max = kDefaultKafkaRtoMax;
  std::chrono::milliseconds admin_timeout = ServiceOptions().admin_timeout;
  // An append stage slower than this is logged; zero: none.
  std::chrono::milliseconds slow_append = ServiceOptions().slow_append;
  std::chrono::milliseconds startup_timeout = MetaOptions().startup_timeout;
  int max_concurrent_reads = static_cast<int>(ReaderOptions().max_concurrent_reads);
  bool read_index = ReaderOptions().slot_index;
  // How often each slot's index that changed is saved to <prefix>_index (and once more at
  // shutdown), for a walserver that starts later on these topics; 0: not kept in Kafka.
  std::chrono::milliseconds read_index_save_interval = SlotIndexStoreOptions().save_interval;
  // HTTP/2 keepalive: walserver pings a connection that sent nothing for keepalive_time and
  // closes it when the answer takes longer than keepalive_timeout, so that a client that died or
  // was cut off without a FIN frees its reads and appends. Zero: no pings from walserver. Clients
  // may ping as often as every kMinClientPingInterval either way.
  std::chrono::milliseconds keepalive_time{10000};
  std::chrono::milliseconds keepalive_timeout{10000};
  // How often the slots are pruned (DeleteRecords); 0: never.
  std::chrono::milliseconds prune_interval{60000};
  // auto, delete or logical (meta/pruner.h, PruneMode).
  std::string prune_mode = "auto";
  // The data topics' record batches: none, lz4, zstd, snappy or gzip
  // (docs/benchmarks/2026-12-01-compression-checksums.md has the measurements behind the default).
  std::string compression = "lz4";
  // Entry bytes of appends waiting for Kafka; more gets RESOURCE_EXHAUSTED. 0: 4 x max_entry_bytes.
  uint64_t max_inflight_append_bytes = 0;
  // A file holding the bearer token every call must carry; empty: no token needed.
  std::string auth_token_file;
  // TLS on the TCP listeners (unix sockets stay plaintext): the server's PEM certificate chain
  // and key; with tls_client_ca_file, clients must present a certificate it signed.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  // Unix socket listeners: the socket's mode, in octal, and its group, a name or a number
  // (empty: the group it got, the process's or a setgid folder's). Connecting needs write
  // permission, so a datanode running as another user connects through the group.
  std::string unix_socket_mode = "0660";
  std::string unix_socket_group;
  KafkaProperties kafka_properties;  // passed to every Kafka client
  // In Kafka client ids and every record; empty: the host and the first listen address.
  std::string name;
};

}  // namespace wal
