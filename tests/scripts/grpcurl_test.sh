#!/usr/bin/env bash
# grpcurl against a walserver on the real Kafka broker: reflection, health, and the WAL calls
# with JSON bodies, exactly as the README shows them.
source "$(dirname "$0")/lib.sh"
require_kafka
GRPCURL=${GRPCURL:-$(command -v grpcurl || echo "$HOME/go/bin/grpcurl")}
[[ -x "$GRPCURL" ]] || fail "grpcurl not found; scripts/setup.sh --test installs it"
# shellcheck disable=SC2046
start_walserver grpcurl $(kafka_args grpcurl)
G() { "$GRPCURL" -plaintext "$@"; }

expect_contains "$(G "$ADDR" list)" "^wal.v1.WalService$" "grpcurl list"
expect_contains "$(G "$ADDR" list)" "^grpc.health.v1.Health$" "grpcurl list"
expect_contains "$(G "$ADDR" describe wal.v1.WalService)" "rpc Append \( .wal.v1.AppendRequest \)" "describe"
expect_contains "$(G "$ADDR" grpc.health.v1.Health/Check)" '"status": "SERVING"' "health check"

out=$(G -d '{"namespace_id": 7}' "$ADDR" wal.v1.WalService/CreateNamespace)
expect_contains "$out" '"created": true' "CreateNamespace"
# bytes are base64 in JSON: "aGVsbG8=" is "hello", "d29ybGQ=" is "world".
out=$(G -d '{"entries": [{"namespace_id": 7, "data": "aGVsbG8="}, {"namespace_id": 7, "data": "d29ybGQ="}]}' \
  "$ADDR" wal.v1.WalService/Append)
expect_contains "$out" '"entry_ids"' "Append"
second=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["entry_ids"][1])' <<<"$out")
out=$(G -d '{"namespace_id": 7}' "$ADDR" wal.v1.WalService/Read)
expect_contains "$out" '"data": "aGVsbG8="' "Read"
expect_contains "$out" '"data": "d29ybGQ="' "Read"
out=$(G -d "{\"namespace_id\": 7, \"entry_id\": $second}" "$ADDR" wal.v1.WalService/Truncate)
expect_contains "$out" "\"first_entry_id\": \"$second\"" "Truncate"
out=$(G -d '{"namespace_id": 7}' "$ADDR" wal.v1.WalService/Read)
[[ "$out" != *aGVsbG8=* ]] || fail "a truncated entry was returned: $out"
expect_contains "$(G -d '{"namespace_id": 7}' "$ADDR" wal.v1.WalService/GetNamespace)" '"topic": "grpcurl_'
expect_contains "$(G -d '{}' "$ADDR" wal.v1.WalService/ListNamespaces)" '"namespace_id": "7"'
expect_contains "$(G -d '{"namespace_id": 7}' "$ADDR" wal.v1.WalService/AcquireNamespace)" '"epoch": "1"'
err=$(G -d '{"entries": [{"namespace_id": 7, "data": "eA=="}]}' "$ADDR" wal.v1.WalService/Append 2>&1 || true)
expect_contains "$err" "Code: FailedPrecondition" "an append without the epoch after AcquireNamespace"
err=$(G -d '{"namespace_id": 8}' "$ADDR" wal.v1.WalService/GetNamespace 2>&1 || true)
expect_contains "$err" "Code: NotFound" "errors keep their gRPC code"
echo "grpcurl_test: all checks passed"
