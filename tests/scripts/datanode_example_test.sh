#!/usr/bin/env bash
# The datanode example (append, flush and truncate, replay on open) against the walserver
# binary, twice: the second run reopens the same region.
source "$(dirname "$0")/lib.sh"
: "${EXAMPLE:?path of datanode_example}"
start_walserver example
"$EXAMPLE" "$ADDR" 42 | tee "$work/first"
grep -q "(new, writer epoch 1), replayed 0 entries" "$work/first" || fail "first open"
"$EXAMPLE" "$ADDR" 42 | tee "$work/second"
grep -q "(existing, writer epoch 2), replayed 1 entries" "$work/second" ||
  fail "reopen must take a new epoch and replay the unflushed entry"
echo "datanode_example_test: all checks passed"
