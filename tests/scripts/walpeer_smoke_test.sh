#!/usr/bin/env bash
# walpeer (bench/peer) in its smoke mode against the real Kafka broker: every mode runs every
# path (rskafka direct, rskafka behind the merging worker, walserver through the Rust walclient)
# and reports a figure. walpeer itself fails on any failed call, and on a replay that does not
# read back every entry it wrote once and in order. Given the broker's pid (WAL_TEST_BROKER_PID,
# from test.sh; the broker runs on this host) it reports the broker's CPU per GB of each path
# too. This proves the peer works; it asserts no speed.
source "$(dirname "$0")/lib.sh"
require_kafka
: "${WALPEER:?path of walpeer}"
: "${WAL_TEST_BROKER_PID:?pid of the broker at WAL_TEST_BROKERS}"
"$WALPEER" --brokers="$WAL_TEST_BROKERS" --walserver="$WALSERVER" --smoke --csv="$work/peer.csv" \
  --broker_pid="$WAL_TEST_BROKER_PID" | tee "$work/peer.txt" || fail "walpeer failed"
# One line per path of regions, batched and single, each with CPU the broker spent on it.
[[ $(grep -E "broker CPU [0-9.]+ s/GB, path and broker [0-9.]+ s/GB" "$work/peer.txt" |
  grep -cv "broker CPU 0.00 ") -eq 9 ]] ||
  fail "walpeer did not report the broker's CPU for each path of regions, batched and single"
python3 - "$work/peer.csv" <<'PY' || fail "walpeer rows missing or without figures"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
want = {(m, p) for m in ("regions", "batched", "single", "latency-p99", "regions-latency-p99")
        for p in ("rskafka", "rskafka+worker", "walserver")}
want |= {("replay", "rskafka"), ("replay", "walserver")}
have = {(r["mode"], r["path"]) for r in rows if float(r["value"]) > 0}
missing = want - have
print("missing:", sorted(missing)) if missing else None
sys.exit(1 if missing else 0)
PY
echo "walpeer_smoke_test: all checks passed"
