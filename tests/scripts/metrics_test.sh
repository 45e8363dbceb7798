#!/usr/bin/env bash
# /metrics and /healthz of a walserver on the real Kafka broker: values move with traffic.
source "$(dirname "$0")/lib.sh"
require_kafka
# shellcheck disable=SC2046
start_walserver metrics $(kafka_args metrics)
W() { "$WALCTL" --server="$ADDR" "$@"; }
metric() {  # metric NAME_WITH_LABELS -> value (0 when absent)
  curl -sf "http://$HTTP/metrics" | awk -v m="$1" '$1 == m { print $2; found=1 } END { if (!found) print 0 }'
}

[[ $(curl -s -o /dev/null -w '%{http_code}' "http://$HTTP/healthz") == 200 ]] || fail "/healthz"
page=$(curl -sf "http://$HTTP/metrics")
expect_contains "$page" "^# TYPE walserver_append_bytes_total counter$" "/metrics"
expect_contains "$page" "^walserver_meta_healthy 1$" "/metrics"
expect_contains "$page" \
  "^walserver_build_info[{]version=\"$expected_version\",librdkafka=\"$expected_librdkafka\"[}] 1$" "/metrics"
expect_contains "$(cat "$work/metrics.log")" "walserver $expected_version .*librdkafka $expected_librdkafka" \
  "start-up line"

# walctl appends on the append stream: each append counts as a StreamedAppend call.
before_calls=$(metric 'walserver_rpc_calls_total{method="StreamedAppend",code="OK"}')
before_bytes=$(metric walserver_append_bytes_total)
W create 1 >/dev/null
W append 1 aaaa bbbbbb >/dev/null
W append 1 cc >/dev/null
W read 1 >/dev/null
W info 404 >/dev/null 2>&1 || true
after_calls=$(metric 'walserver_rpc_calls_total{method="StreamedAppend",code="OK"}')
after_bytes=$(metric walserver_append_bytes_total)
[[ $((after_calls - before_calls)) -eq 2 ]] || fail "StreamedAppend calls went $before_calls -> $after_calls"
[[ $((after_bytes - before_bytes)) -eq 12 ]] || fail "appended bytes went $before_bytes -> $after_bytes"
[[ $(metric walserver_read_entries_total) -eq 3 ]] || fail "read entries"
[[ $(metric 'walserver_rpc_calls_total{method="GetNamespace",code="NOT_FOUND"}') -eq 1 ]] ||
  fail "NOT_FOUND calls are counted by code"
[[ $(metric 'walserver_rpc_latency_seconds_count{method="StreamedAppend",code="OK"}') -eq 2 ]] ||
  fail "latency histogram count"
[[ $(metric walserver_namespaces) -eq 1 ]] || fail "namespaces gauge"
# Both appends passed each stage (walctl's stream ends after the writes of its answers).
for stage in start kafka answer; do
  [[ $(metric "walserver_append_stage_seconds_count{stage=\"$stage\"}") -eq 2 ]] ||
    fail "$stage stage count: $(metric "walserver_append_stage_seconds_count{stage=\"$stage\"}")"
done
# Nothing waits for Kafka once the appends are answered; the limit is 4 x the 64 MiB max entry.
[[ $(metric walserver_append_bytes_in_flight) -eq 0 ]] || fail "append bytes in flight at rest"
[[ $(metric walserver_append_bytes_in_flight_limit) -eq $((256 << 20)) ]] ||
  fail "append bytes in flight limit: $(metric walserver_append_bytes_in_flight_limit)"
expect_contains "$(curl -sf "http://$HTTP/metrics")" "^# TYPE walserver_rpc_latency_seconds histogram$"
expect_contains "$(curl -sf "http://$HTTP/metrics")" '^walserver_slot_namespaces\{topic="metrics_[^"]*",partition="[0-9]"\} 1$'
# librdkafka statistics arrive every 5 s: the broker connection shows up. (The page is read whole
# before grep: under pipefail, `curl | grep -q` fails when grep stops reading before curl wrote
# it all.)
for _ in $(seq 1 80); do
  grep -q '^walserver_kafka_broker_up{.*} 1$' <<<"$(curl -sf "http://$HTTP/metrics")" && break
  sleep 0.25
done
grep -q '^walserver_kafka_broker_up{.*} 1$' <<<"$(curl -sf "http://$HTTP/metrics")" ||
  fail "broker connection state from librdkafka statistics"
curl -sf "http://$HTTP/metrics" |
  awk '/^walserver_kafka_tx_bytes_total\{/ { sum += $2 } END { exit !(sum > 0) }' ||
  fail "walserver_kafka_tx_bytes_total from librdkafka statistics"
curl -sf "http://$HTTP/metrics" |
  awk '/^walserver_kafka_tx_requests_total\{/ { sum += $2 } END { exit !(sum > 0) }' ||
  fail "walserver_kafka_tx_requests_total from librdkafka statistics"
echo "metrics_test: all checks passed"
