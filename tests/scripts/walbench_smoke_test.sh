#!/usr/bin/env bash
# walbench in its smoke mode against the real Kafka broker: every mode runs and reports a row.
# This proves walbench works; it asserts no speed.
source "$(dirname "$0")/lib.sh"
require_kafka
: "${WALBENCH:?path of walbench}"
"$WALBENCH" --brokers="$WAL_TEST_BROKERS" --walserver="$WALSERVER" --smoke --csv="$work/bench.csv"
for mode in regions throughput single latency replay index follow sweep startup compression; do
  grep -q "^$mode," "$work/bench.csv" || fail "walbench wrote no $mode row"
done
# Every measured row has a positive figure.
python3 - "$work/bench.csv" <<'PY' || fail "walbench rows without figures"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
bad = [r for r in rows if max(float(r["entries_per_s"]), float(r["mb_per_s"]), float(r["value"])) <= 0]
sys.exit(1 if bad else 0)
PY
echo "walbench_smoke_test: all checks passed"
