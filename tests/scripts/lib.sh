# Shared by the shell tests: start walserver as a child, assert, clean up.
# Source it after setting WALSERVER and WALCTL (paths of the binaries, from CTest).
set -euo pipefail

: "${WALSERVER:?path of the walserver binary}"
: "${WALCTL:?path of the walctl binary}"
work=$(mktemp -d /tmp/walserver-test.XXXXXX)
pids=()
cleanup() {
  local rc=$?
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ $rc -ne 0 ]]; then
    echo "--- walserver logs ---" >&2
    tail -n 30 "$work"/*.log >&2 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# What walserver --version must name: its version (project() in CMakeLists.txt) and the
# librdkafka scripts/librdkafka.sh builds for it.
repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
expected_version=$(sed -n 's/^project(walserver VERSION \([0-9.]*\).*/\1/p' "$repo_root/CMakeLists.txt")
expected_librdkafka=$(sed -n 's/^librdkafka_version=//p' "$repo_root/scripts/librdkafka.sh")

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# start_walserver NAME [ARGS...]: starts walserver, waits until it serves, and sets
# ADDR (gRPC), HTTP (metrics) and PID.
start_walserver() {
  local name=$1
  shift
  local ready="$work/$name.ready"
  "$WALSERVER" --listen=127.0.0.1:0 --http_listen=127.0.0.1:0 --ready_file="$ready" "$@" \
    >"$work/$name.log" 2>&1 &
  PID=$!
  pids+=("$PID")
  for _ in $(seq 1 600); do
    if [[ -s "$ready" ]]; then
      ADDR=$(sed -n 1p "$ready")
      HTTP=$(sed -n 2p "$ready")
      return 0
    fi
    kill -0 "$PID" 2>/dev/null || fail "walserver $name exited: $(tail -n 5 "$work/$name.log")"
    sleep 0.1
  done
  fail "walserver $name did not start"
}

# expect_exit CODE COMMAND...: runs COMMAND and checks its exit status.
expect_exit() {
  local want=$1
  shift
  local got=0
  "$@" >"$work/out" 2>"$work/err" || got=$?
  [[ $got -eq $want ]] || fail "'$*' exited $got, expected $want; stderr: $(cat "$work/err")"
}

# expect_contains TEXT PATTERN [WHAT]
expect_contains() {
  grep -qE -- "$2" <<<"$1" || fail "${3:-output} lacks /$2/: $1"
}

# require_kafka: fails the test unless the real Kafka of ./scripts/test.sh is there.
require_kafka() {
  [[ -n "${WAL_TEST_BROKERS:-}" ]] ||
    fail "WAL_TEST_BROKERS is not set: integration tests need the real Kafka that ./scripts/test.sh starts"
}

# kafka_args PREFIX: walserver arguments for the test broker, with topics of the test's own.
kafka_args() {
  echo "--brokers=$WAL_TEST_BROKERS --topic_prefix=$1_$$_$RANDOM --topic_count=2 \
--partitions_per_topic=2 --replication_factor=1 --min_insync_replicas=1"
}
