#!/usr/bin/env bash
# A read of highly compressible entries keeps walserver's memory bounded. Kafka keeps batches
# as the producer compressed them, and librdkafka decompresses a whole fetch at once: lz4 packs
# 1 MiB of one repeated byte into about 4 KiB, so a fetch of 1 MiB (walserver's limit until
# 2026-12-03) held about 250 MiB of entries (this test: a peak of 257 MB). Reads now fetch 64
# KiB at a time (`fetch.message.max.bytes`), a bound of about 16 MiB per fetch.
# Resident memory: not run under the sanitizers, whose shadow memory and quarantine inflate it.
source "$(dirname "$0")/lib.sh"
require_kafka
args="$(kafka_args read_memory) --compression=lz4"
# shellcheck disable=SC2086  # a list of flags
start_walserver writer $args
W() { "$WALCTL" --server="$ADDR" "$@"; }
W create 1 >/dev/null
# 300 MiB: 3,000 entries of 100 KiB of one byte, 10 per request.
python3 -c '
import sys
line = "a" * (100 * 1024) + "\n"
sys.stdout.write(line * 3000)' | W append 1 --batch=10 >/dev/null
kill "$PID"
wait "$PID" || true

# A fresh walserver reads it back: its peak resident memory is the read's.
# shellcheck disable=SC2086
start_walserver reader $args
bytes=$(W read 1 --data-only | wc -c)
[[ $bytes -eq $((3000 * (100 * 1024 + 1))) ]] || fail "read $bytes bytes"
kill -0 "$PID" 2>/dev/null || fail "walserver exited during the read"
peak_kb=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$PID/status")
[[ -n "$peak_kb" ]] || fail "no VmHWM in /proc/$PID/status"
echo "walserver's peak resident memory while reading 300 MiB of lz4-compressed entries: $((peak_kb / 1024)) MiB"
((peak_kb < 160 * 1024)) || fail "walserver's peak resident memory was $((peak_kb / 1024)) MiB (bound: 160)"
