#!/usr/bin/env bash
# The datanode example (append, flush and truncate, replay on open with one ReadMany) against
# the walserver binary, for three regions, twice: the second run reopens the same regions.
source "$(dirname "$0")/lib.sh"
: "${EXAMPLE:?path of datanode_example}"
start_walserver example
"$EXAMPLE" "$ADDR" 42 43 44 | tee "$work/first"
for region in 42 43 44; do
  grep -q "^opened region $region (new, writer epoch 1), replayed 0 entries" "$work/first" ||
    fail "first open of region $region"
  grep -q "^reopened region $region, replayed 1 entry" "$work/first" || fail "reopen of $region"
done
"$EXAMPLE" "$ADDR" 42 43 44 | tee "$work/second"
for region in 42 43 44; do
  grep -q "^opened region $region (existing, writer epoch 2), replayed 1 entries" "$work/second" ||
    fail "reopen of region $region must take a new epoch and replay the unflushed entry"
done
echo "datanode_example_test: all checks passed"
