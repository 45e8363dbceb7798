#!/usr/bin/env bash
# walctl end to end against the walserver binary on its embedded default: every command, its
# --help, table and --json output, input from arguments, lines and whole files, follow, exit
# codes per error class, and the unix socket transport.
source "$(dirname "$0")/lib.sh"
sock="$work/wal.sock"
start_walserver main --listen="unix://$sock,127.0.0.1:0"
W() { "$WALCTL" --server="$ADDR" "$@"; }

# Every command has its own --help.
for cmd in create append read truncate info ls delete; do
  help=$("$WALCTL" "$cmd" --help) || fail "$cmd --help failed"
  expect_contains "$help" "^Usage: walctl $cmd" "$cmd --help"
done
expect_contains "$("$WALCTL" --help)" "Exit status" "walctl --help"

# create / append / read, human output.
expect_contains "$(W create 10)" "^created"
expect_contains "$(W create 10)" "^already existed"
ids=$(W append 10 first second)
[[ $(wc -l <<<"$ids") -eq 2 ]] || fail "append printed '$ids'"
printf 'line one\nline two\nline three\n' | W append 10 >/dev/null
head -c 3000 /dev/urandom | base64 >"$work/blob"
W append 10 --file="$work/blob" >/dev/null
out=$(W read 10 --data-only)
[[ $(head -n 5 <<<"$out") == $'first\nsecond\nline one\nline two\nline three' ]] || fail "read: $out"
[[ $(tail -n +6 <<<"$out") == "$(cat "$work/blob")" ]] || fail "a file must be one whole entry"
first=$(head -n 1 <<<"$ids")
second=$(tail -n 1 <<<"$ids")
expect_contains "$(W read 10 --limit=1)" "^$first	first$"
expect_contains "$(W read 10 --start="$second" --limit=1)" "^$second	second$"

# A large append from standard input streams: 200 batches, 8 in flight; the ids print in input
# order, and the log holds the lines in input order, each once.
W create 11 >/dev/null
seq 1 20000 | W append 11 --batch=100 >"$work/ids"
[[ $(wc -l <"$work/ids") -eq 20000 ]] || fail "streamed append printed $(wc -l <"$work/ids") ids"
sort -n -c "$work/ids" || fail "streamed append ids are not in input order"
[[ "$(W read 11 --data-only)" == "$(seq 1 20000)" ]] || fail "streamed append: the log differs"
[[ "$(W read 11 | cut -f1)" == "$(cat "$work/ids")" ]] || fail "streamed append: ids differ"
W append 11 --window=0 </dev/null 2>/dev/null && fail "--window=0 accepted"

# JSON output is one object per line.
W --json read 10 | python3 -c '
import base64, json, sys
rows = [json.loads(l) for l in sys.stdin]
assert len(rows) == 6, rows
assert base64.b64decode(rows[0]["data"]) == b"first", rows[0]
assert all(r["namespaceId"] == "10" for r in rows)
' || fail "read --json"
W --json info 10 | python3 -c '
import json, sys; ns = json.load(sys.stdin); assert ns["namespaceId"] == "10" and "nextEntryId" in ns, ns
' || fail "info --json"
expect_contains "$(W ls)" "^NAMESPACE +TOPIC"
expect_contains "$(W --json ls)" '"namespaceId":"10"'

# On a terminal (script(1) gives one), progress and a summary go to stderr; not in a pipe.
script -qec "$WALCTL --server=$ADDR read 10 >/dev/null" /dev/null >"$work/tty" </dev/null
grep -q "read 6 entries" "$work/tty" || fail "no progress on a terminal: $(cat -v "$work/tty")"
W read 10 2>"$work/piped" >/dev/null
[[ ! -s "$work/piped" ]] || fail "progress must stay off when stderr is not a terminal"

# The unix socket serves the same namespace.
expect_contains "$("$WALCTL" --server="unix://$sock" info 10)" "^namespace_id: +10$"

# read --follow prints entries appended after it began: the append waits until the follower
# printed the whole log as it was (it is past its end), so only following can print it.
W read 10 --follow --data-only >"$work/follow" &
follower=$!
pids+=("$follower")
for _ in $(seq 1 100); do
  [[ "$(cat "$work/follow")" == "$out" ]] && break
  sleep 0.1
done
[[ "$(cat "$work/follow")" == "$out" ]] || fail "read --follow did not print the log: $(cat "$work/follow")"
kill -0 "$follower" || fail "read --follow ended at the end of the log"
W append 10 "appended later" >/dev/null
for _ in $(seq 1 100); do
  grep -q "appended later" "$work/follow" && break
  sleep 0.1
done
grep -q "appended later" "$work/follow" || fail "read --follow did not print the new entry"
kill "$follower"

# truncate, delete.
expect_contains "$(W truncate 10 "$second")" "^first_entry_id: +$second$"
expect_contains "$(W read 10 --limit=1 --data-only)" "^second$"
expect_contains "$(W delete 10)" "^deleted"

# acquire: a new epoch; an append with an older one is refused and writes nothing.
W create 12 >/dev/null
expect_contains "$(W append 12 "before any epoch")" "^[0-9]+$"
expect_contains "$(W acquire 12)" "^epoch: +1$"
expect_contains "$(W info 12)" "^epoch: +1$"
expect_exit 4 W append 12 --epoch=0 "fenced writer"  # FAILED_PRECONDITION
expect_contains "$(W append 12 --epoch=1 "owner")" "^[0-9]+$"
expect_contains "$(W acquire 12)" "^epoch: +2$"
[[ $(W read 12 --data-only) == $'before any epoch\nowner' ]] || fail "acquire/append: $(W read 12)"
W --json read 12 | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
assert [r.get("epoch", "0") for r in rows] == ["0", "1"], rows
' || fail "read --json must show the epoch of each entry"

# Exit codes per error class.
expect_exit 3 W info 10                        # NOT_FOUND
expect_exit 4 W create 0                       # INVALID_ARGUMENT
W create 11 >/dev/null
expect_exit 5 W truncate 11 999999             # OUT_OF_RANGE
expect_exit 6 "$WALCTL" --server=127.0.0.1:1 --timeout=1 info 11   # UNAVAILABLE
expect_exit 2 W frobnicate                     # usage
expect_exit 2 W read 11 --bogus
expect_exit 2 W create notanumber
echo "walctl_test: all checks passed"
