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
# The streams: several appends on one AppendStream (grpcurl sends one message per JSON object),
# each answered with its request_id; the fenced one fails alone. Then ReadMany of two namespaces.
G -d '{"namespace_id": 9}' "$ADDR" wal.v1.WalService/CreateNamespace >/dev/null
out=$(G -d '{"appends": [{"request_id": 1, "append": {"entries": [{"namespace_id": 9, "data": "b25l"}]}}]}
{"appends": [{"request_id": 2, "append": {"entries": [{"namespace_id": 7, "data": "eA=="}]}},
             {"request_id": 3, "append": {"entries": [{"namespace_id": 9, "data": "dHdv"}]}}]}' \
  "$ADDR" wal.v1.WalService/AppendStream)
python3 -c '
import json, sys
results = {}
for message in json.loads("[" + sys.stdin.read().replace("}\n{", "},{") + "]"):
    for r in message["results"]:
        results[r["request_id"]] = r
assert set(results) == {"1", "2", "3"}, results
assert "code" not in results["1"] and len(results["1"]["entry_ids"]) == 1, results
assert results["2"]["code"] == 9 and "fenced" in results["2"]["message"], results  # FAILED_PRECONDITION
assert "code" not in results["3"], results
' <<<"$out" || fail "AppendStream answers: $out"
out=$(G -d '{"reads": [{"namespace_id": 7}, {"namespace_id": 9}]}' "$ADDR" wal.v1.WalService/ReadMany)
expect_contains "$out" '"data": "d29ybGQ="' "ReadMany"
expect_contains "$out" '"data": "b25l"' "ReadMany"
expect_contains "$out" '"data": "dHdv"' "ReadMany"
# Ends may share a message: each namespace's, once.
python3 -c '
import json, sys
ended = []
for message in json.loads("[" + sys.stdin.read().replace("}\n{", "},{") + "]"):
    ended += [e["namespace_id"] for e in message.get("ends", [])]
assert sorted(ended) == ["7", "9"], ended
' <<<"$out" || fail "ReadMany must end each namespace once: $out"
err=$(G -d '{"namespace_id": 8}' "$ADDR" wal.v1.WalService/GetNamespace 2>&1 || true)
expect_contains "$err" "Code: NotFound" "errors keep their gRPC code"
echo "grpcurl_test: all checks passed"
