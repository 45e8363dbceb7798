#!/usr/bin/env bash
# Start-up failures on the real Kafka broker name what was tried and the option that fixes them:
# the single test broker with the default replication (3) or with the brokers' default (one replica)
# and two in sync asked for, an address no broker listens on,
# addresses another process holds, and topics made with other settings. Options that do not fit
# the cluster exit 2, like bad options; Kafka out of reach exits 1.
source "$(dirname "$0")/lib.sh"
require_kafka
prefix=startup_$$_$RANDOM
# Every attempt gets the same short wait for Kafka and its own ports.
# A walserver that starts after all is stopped after 60 s, and fails the test.
walserver() { timeout -k 5 60 "$WALSERVER" "$@"; }
try() { walserver --listen=127.0.0.1:0 --http_listen=127.0.0.1:0 --startup_timeout_ms=3000 "$@"; }
output() { cat "$work/out" "$work/err"; }

# One broker, replication factor 3 by default: the message gives the two flags to set.
expect_exit 2 try --brokers="$WAL_TEST_BROKERS" --topic_prefix="$prefix"
expect_contains "$(output)" "has 1 live broker\(s\), fewer than --replication_factor=3"
expect_contains "$(output)" "start walserver with --replication_factor=1 --min_insync_replicas=1"
# ... and the advice works.
expect_exit 2 try --brokers="$WAL_TEST_BROKERS" --topic_prefix="$prefix" --replication_factor=1
expect_contains "$(output)" "--min_insync_replicas=2 is more than --replication_factor=1"
# The brokers' default replication (-1) on one broker gives topics one replica each, fewer than
# min.insync.replicas: every append would fail, so start-up does, naming the flags.
expect_exit 2 try --brokers="$WAL_TEST_BROKERS" --topic_prefix="${prefix}_default" \
  --replication_factor=-1 --min_insync_replicas=2
expect_contains "$(output)" "has 1 replica\(s\), fewer than --min_insync_replicas=2"
expect_contains "$(output)" "--replication_factor"
# shellcheck disable=SC2046
start_walserver first --brokers="$WAL_TEST_BROKERS" --topic_prefix="$prefix" \
  --replication_factor=1 --min_insync_replicas=1
first_addr=$ADDR first_http=$HTTP

# The topics exist now, with 4 partitions each: other settings are refused, naming the flags.
expect_exit 2 try --brokers="$WAL_TEST_BROKERS" --topic_prefix="$prefix" \
  --replication_factor=1 --min_insync_replicas=1 --partitions_per_topic=3
expect_contains "$(output)" "exists with 4 partitions, expected 3"
expect_contains "$(output)" "--partitions_per_topic"
expect_contains "$(output)" "choose another --topic_prefix"

# Addresses another process holds.
ok_kafka=(--brokers="$WAL_TEST_BROKERS" --topic_prefix="$prefix" --replication_factor=1
  --min_insync_replicas=1 --startup_timeout_ms=10000)
expect_exit 1 walserver "${ok_kafka[@]}" --listen="$first_addr" --http_listen=127.0.0.1:0
expect_contains "$(output)" "cannot listen on --listen=$first_addr"
expect_contains "$(output)" "choose another --listen"
expect_exit 1 walserver "${ok_kafka[@]}" --listen=127.0.0.1:0 --http_listen="$first_http"
expect_contains "$(output)" "--http_listen: cannot listen on $first_http"

# A unix socket another walserver serves on is not taken over (gRPC would unlink it and bind).
socket=$work/held.sock
# shellcheck disable=SC2046
start_walserver holder $(kafka_args holder) --listen="unix://$socket"
expect_exit 1 walserver "${ok_kafka[@]}" --listen="unix://$socket" --http_listen=
expect_contains "$(output)" "cannot listen on --listen=unix://$socket: another walserver serves on this socket"
"$WALCTL" --server="unix://$socket" ls >/dev/null || fail "the holder lost its socket"
# ... and before any work on Kafka: a duplicate whose Kafka is out of reach is told of the socket.
closed_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
expect_exit 1 walserver --brokers="127.0.0.1:$closed_port" --topic_prefix="$prefix" \
  --startup_timeout_ms=10000 --listen="unix://$socket" --http_listen=
expect_contains "$(output)" "cannot listen on --listen=unix://$socket: another walserver serves on this socket"

# No broker at the address: what was tried, for how long, and where to look.
expect_exit 1 try --brokers="127.0.0.1:$closed_port" --topic_prefix="$prefix"
expect_contains "$(output)" "no Kafka broker at --brokers=127.0.0.1:$closed_port answered within --startup_timeout_ms=3000"
expect_contains "$(output)" "--kafka.security.protocol"

# The first walserver was never disturbed.
"$WALCTL" --server="$first_addr" create 1 >/dev/null || fail "the first walserver stopped serving"
echo "startup_errors_test: all checks passed"
