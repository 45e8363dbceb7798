#!/usr/bin/env bash
# walctl's reads on the real Kafka broker: a record corrupted in Kafka stops a read with
# DATA_LOSS, --skip-lost goes past it and shows the gap, --since reads from a time, every entry
# carries the checksum walctl checked, and a record damaged in the broker's log stops a read
# (a ReadMany member whose entries lie past it goes on).
source "$(dirname "$0")/lib.sh"
require_kafka
# Uncompressed, so that the damage below lands on the byte it names.
args="$(kafka_args recovery) --compression=none"
prefix=$(sed -n 's/.*--topic_prefix=\([^ ]*\).*/\1/p' <<<"$args")
# shellcheck disable=SC2086  # a list of flags
start_walserver recovery $args
W() { "$WALCTL" --server="$ADDR" "$@"; }

# A namespace whose id reads "ABCDEFGH" as its 8-byte big-endian key, so kcat can write to it.
ns=4702394921427289928
W create "$ns" >/dev/null
W append "$ns" one >/dev/null
before_corrupt=$(date +%s%3N)
sleep 0.05
slot=$(W --json info "$ns")
topic=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["topic"])' "$slot")
partition=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("partition", 0))' "$slot")

# A record in walserver's format (docs/ARCHITECTURE.md, "Data records") whose data changed after
# its checksum was computed, as a bit flipped on a disk would leave it.
python3 - "$work/corrupt" <<'EOF'
import struct, sys, time
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF
good, bad = b"two", b"twO"
header = struct.pack(">BBHIQQIQQQQQq", 1, 1, 76, crc32c(good), len(good), 4242, 0, 0, 0, 0, 0, 0,
                     int(time.time() * 1000))
assert len(header) == 76
open(sys.argv[1], "wb").write(header + bad)
EOF
kcat -P -b "$WAL_TEST_BROKERS" -t "$topic" -p "$partition" -k ABCDEFGH "$work/corrupt" ||
  fail "kcat could not write the corrupt record"
W append "$ns" three >/dev/null

# Without --skip-lost: the entry before it, then DATA_LOSS (exit 7) naming it; never its data.
expect_exit 7 W read "$ns" --data-only
[[ "$(cat "$work/out")" == "one" ]] || fail "before the corrupt entry: $(cat "$work/out")"
expect_contains "$(cat "$work/err")" "is corrupt: its data does not match the checksum"

# With --skip-lost: every good entry, and the gap between them, exit 0.
out=$(W read "$ns" --skip-lost)
expect_contains "$out" $'^[0-9]+\tone$'
expect_contains "$out" $'^GAP\t[0-9]+\t[0-9]+\tUNDECODABLE\t.*is corrupt'
expect_contains "$out" $'^[0-9]+\tthree$'
[[ $(grep -c . <<<"$out") -eq 3 ]] || fail "read --skip-lost: $out"
grep -q "twO" <<<"$out" && fail "the corrupt data was printed"
[[ "$(W read "$ns" --skip-lost --data-only 2>"$work/gaps")" == $'one\nthree' ]] ||
  fail "--data-only --skip-lost must print only the data"
expect_contains "$(cat "$work/gaps")" $'^GAP\t' "standard error"
W --json read "$ns" --skip-lost | python3 -c '
import base64, json, sys
rows = [json.loads(l) for l in sys.stdin]
assert [r["gap"]["reason"] for r in rows if "gap" in r] == ["UNDECODABLE"], rows
entries = [r for r in rows if "gap" not in r]
assert [base64.b64decode(e["data"]) for e in entries] == [b"one", b"three"], rows
assert all("crc32c" in e for e in entries), rows
' || fail "read --json --skip-lost"

# --since: from the first entry appended at or after a time.
[[ "$(W read "$ns" --since=1h --skip-lost --data-only 2>/dev/null)" == $'one\nthree' ]] ||
  fail "--since=1h"
since=$(python3 -c 'import datetime,sys; print(datetime.datetime.fromtimestamp(int(sys.argv[1])/1000, datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"))' "$before_corrupt")
[[ "$(W read "$ns" --since="$since" --skip-lost --data-only 2>/dev/null)" == "three" ]] ||
  fail "--since=$since: $(W read "$ns" --since="$since" --skip-lost 2>&1)"
[[ -z "$(W read "$ns" --since=2099-01-01T00:00:00Z --data-only)" ]] || fail "--since in the future"
expect_exit 2 W read "$ns" --since=yesterday
expect_exit 2 W read "$ns" --since=-5m
expect_exit 2 W read "$ns" --since=inf
expect_exit 2 W read "$ns" --since=1000000000h
expect_exit 2 W read "$ns" --since=10m --start=1
# A record damaged in Kafka's own log (a bit flipped on the broker's disk, here in the header
# walserver wrote, which the entry's checksum does not cover): Kafka's batch checksum catches it,
# and the read stops with DATA_LOSS instead of passing over the entry as someone else's record.
[[ -d "${WAL_TEST_KAFKA_DATA_DIR:-}" ]] ||
  fail "WAL_TEST_KAFKA_DATA_DIR is not set: this test needs the data directory of the broker in WAL_TEST_BROKERS (./scripts/test.sh sets both)"
damaged=4702394921427289929
W create "$damaged" >/dev/null
W append "$damaged" alpha >/dev/null
bravo=$(W append "$damaged" bravo)
charlie=$(W append "$damaged" charlie)
slot=$(W --json info "$damaged")
topic=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["topic"])' "$slot")
partition=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("partition", 0))' "$slot")
# A namespace of the same slot whose first entry lies past the damage: a ReadMany scanning the
# slot for both from alpha must take it off the damaged scan and deliver it.
later=""
for id in $(seq 100 160); do
  W create "$id" >/dev/null
  [[ "$(W --json info "$id")" == *"\"$topic\""* && $(W --json info "$id" |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("partition", 0))') == "$partition" ]] &&
    later=$id && break
done
[[ -n "$later" ]] || fail "no namespace of 100-160 shares a slot with $damaged"
W append "$later" delta >/dev/null
python3 - "$WAL_TEST_KAFKA_DATA_DIR/$topic-$partition" <<'PY' || fail "could not damage the record"
import glob, sys
for path in glob.glob(sys.argv[1] + "/*.log"):
    data = open(path, "rb").read()
    at = data.find(b"bravo")
    if at >= 0:
        with open(path, "r+b") as f:  # the record's format version, 76 bytes before its data
            f.seek(at - 76)
            f.write(bytes([data[at - 76] ^ 0x06]))
        sys.exit(0)
sys.exit("no segment in " + sys.argv[1] + " holds the entry")
PY
expect_exit 7 W read "$damaged" --data-only
[[ "$(cat "$work/out")" == "alpha" ]] || fail "before the damaged record: $(cat "$work/out")"
expect_contains "$(cat "$work/err")" "is damaged at offset $bravo"
[[ "$(W read "$damaged" --start="$charlie" --data-only)" == "charlie" ]] ||
  fail "a read after the damaged record: $(W read "$damaged" --start="$charlie" 2>&1)"
GRPCURL=${GRPCURL:-$(command -v grpcurl || echo "$HOME/go/bin/grpcurl")}
[[ -x "$GRPCURL" ]] || fail "grpcurl not found; scripts/setup.sh --test installs it"
"$GRPCURL" -plaintext -d "{\"reads\": [{\"namespace_id\": \"$damaged\"}, {\"namespace_id\": \"$later\"}]}" \
  "$ADDR" wal.v1.WalService/ReadMany >"$work/many" 2>&1 || fail "ReadMany: $(cat "$work/many")"
python3 - "$work/many" "$damaged" "$later" <<'PY' || fail "ReadMany across the damage: $(cat "$work/many")"
import base64, json, sys
text = open(sys.argv[1]).read()
messages, decoder, at = [], json.JSONDecoder(), 0
while at < len(text):
    if text[at].isspace():
        at += 1
        continue
    message, at = decoder.raw_decode(text, at)
    messages.append(message)
data = {}
ends = {}
for m in messages:
    for e in m.get("entries", []):
        data.setdefault(e["namespace_id"], []).append(base64.b64decode(e["data"]))
    for e in m.get("ends", []):
        ends[e["namespace_id"]] = e.get("code", 0)
damaged, later = sys.argv[2], sys.argv[3]
assert data.get(damaged) == [b"alpha"], data
assert ends.get(damaged) == 15, ends  # DATA_LOSS
assert data.get(later) == [b"delta"], data
assert ends.get(later) == 0, ends
PY
# The metadata topic damaged in the broker's log: walserver does not start on a namespace table
# that would lack the damaged records' changes, and says why and which copies to repair from.
kill "$PID"
wait "$PID" 2>/dev/null || true
python3 - "$WAL_TEST_KAFKA_DATA_DIR/${prefix}_meta-0" <<'PY' || fail "could not damage the record"
import glob, sys
for path in glob.glob(sys.argv[1] + "/*.log"):
    data = open(path, "rb").read()
    at = data.find(b"ABCDEFGH")  # the key of namespace $ns in its creation record
    if at >= 0:
        with open(path, "r+b") as f:
            f.seek(at)
            f.write(b"a")
        sys.exit(0)
sys.exit("no segment in " + sys.argv[1] + " holds the namespace's record")
PY
got=0
started=$(date +%s)
# shellcheck disable=SC2086
"$WALSERVER" --listen=127.0.0.1:0 --http_listen=127.0.0.1:0 --startup_timeout_ms=60000 $args \
  >"$work/damaged.log" 2>&1 || got=$?
[[ $got -eq 1 ]] || fail "walserver on a damaged metadata topic exited $got: $(tail -n 5 "$work/damaged.log")"
# Not after its 60 s start-up timeout: the wait for the table fails as soon as the damage is met.
(($(date +%s) - started < 30)) || fail "walserver took $(($(date +%s) - started)) s to give up"
expect_contains "$(cat "$work/damaged.log")" "damaged in Kafka's log at offset"
# And what to do about it: the suite broker holds the topic's only copy.
expect_contains "$(cat "$work/damaged.log")" "The only copy in sync is on broker"
echo "recovery_test: all checks passed"
