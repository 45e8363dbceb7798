#!/usr/bin/env bash
# ./scripts/run.sh --local-kafka: a single-node Kafka with its data in --state_dir and walserver
# on it. Entries appended in one run are read in the next; Ctrl-C (SIGINT to the foreground
# process group) stops walserver and Kafka and exits 0; nothing is left running.
source "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
state=$work/state
# A failed check must not leave the broker running: it has a session of its own.
trap 'status=$?; "$root/tests/kafka/kafka.sh" kill "$state/kafka" >/dev/null 2>&1 || true
pkill -f -- "--ready_file=$work/ready" || true
(exit $status); cleanup' EXIT
set -m  # each run.sh in a process group of its own, as a terminal runs it

run_local() {  # starts run.sh in the background; sets RUN_PID, ADDR
  rm -f "$work/ready"
  WALSERVER=$WALSERVER "$root/scripts/run.sh" --local-kafka --state_dir="$state" \
    --listen=127.0.0.1:0 --http_listen=127.0.0.1:0 --ready_file="$work/ready" \
    >>"$work/run.log" 2>&1 &
  RUN_PID=$!
  pids+=("$RUN_PID")
  for _ in $(seq 1 1200); do
    if [[ -s "$work/ready" ]]; then
      ADDR=$(sed -n 1p "$work/ready")
      return 0
    fi
    kill -0 "$RUN_PID" 2>/dev/null || fail "run.sh exited: $(tail -n 20 "$work/run.log")"
    sleep 0.1
  done
  fail "run.sh --local-kafka did not serve within 120 s: $(tail -n 20 "$work/run.log")"
}

ctrl_c() {  # what a terminal does on Ctrl-C; waits for run.sh and checks what it left
  local kafka_pid status=0
  kafka_pid=$(cat "$state/kafka/pid")
  kill -INT -- "-$RUN_PID"
  timeout 60 tail --pid="$RUN_PID" -f /dev/null || fail "run.sh still runs 60 s after Ctrl-C"
  wait "$RUN_PID" || status=$?
  [[ $status -eq 0 ]] || fail "run.sh exited $status after Ctrl-C: $(tail -n 20 "$work/run.log")"
  ! kill -0 "$kafka_pid" 2>/dev/null || fail "Kafka ($kafka_pid) still runs after Ctrl-C"
  ! pgrep -f -- "--ready_file=$work/ready" >/dev/null || fail "walserver still runs after Ctrl-C"
}

run_local
W() { "$WALCTL" --server="$ADDR" "$@"; }
W create 7 >/dev/null
W append 7 first second third >/dev/null
expect_contains "$(W read 7)" "third"
# A second run.sh on the same folder would share the broker and stop it under the first.
# (Under timeout: without the lock it would serve, and the test must fail, not hang.)
expect_exit 2 timeout -k 5 60 env WALSERVER="$WALSERVER" "$root/scripts/run.sh" --local-kafka \
  --state_dir="$state" --listen=127.0.0.1:0 --http_listen=127.0.0.1:0
expect_contains "$(cat "$work/err")" "another run.sh --local-kafka is using"
expect_contains "$(W read 7)" "third"
ctrl_c
[[ -d "$state/kafka/data" ]] || fail "no Kafka data under --state_dir"

# Both come back on the same data.
run_local
out=$(W read 7)
expect_contains "$out" "first"
expect_contains "$out" "second"
expect_contains "$out" "third"
[[ $(grep -c . <<<"$out") -eq 3 ]] || fail "expected the 3 entries once each, got: $out"
W append 7 fourth >/dev/null
ctrl_c
echo "local_kafka_test: all checks passed"
