#!/usr/bin/env bash
# Installs what is missing, builds, and runs walserver in the foreground.
#   scripts/run.sh [walserver options]
#       With no --brokers: the embedded in-process Kafka mock, data in memory only.
#   scripts/run.sh --local-kafka [--state_dir=DIR] [walserver options]
#       A single-node Kafka (the same cached jars as the tests) whose data lives in DIR
#       (default ~/.local/share/walserver), and walserver on it with replication 1: entries
#       survive restarts of both. Ctrl-C stops walserver, then Kafka.
# Other arguments go to walserver (see ./build/server/walserver --help). $WALSERVER, when set,
# is the binary to run instead of building one.
set -euo pipefail

usage_error() {
  echo "run.sh: $*" >&2
  exit 2
}

local_kafka=false
state_dir=${XDG_DATA_HOME:-$HOME/.local/share}/walserver
state_dir_given=false
listen=127.0.0.1:50051
args=()
for arg in "$@"; do
  case "$arg" in
    --local-kafka | --local_kafka) local_kafka=true ;;
    --state_dir=* | --state-dir=*)
      state_dir=${arg#*=}
      state_dir_given=true
      [[ -n "$state_dir" ]] || usage_error "--state_dir needs a folder"
      ;;
    --state_dir | --state-dir) usage_error "write --state_dir=DIR" ;;
    *)
      case "$arg" in --listen=*) listen=${arg#--listen=} ;; esac
      args+=("$arg")
      ;;
  esac
done
if $local_kafka; then
  for arg in "${args[@]}"; do
    case "$arg" in
      --brokers | --brokers=*) usage_error "--local-kafka starts its own broker; leave out $arg" ;;
    esac
  done
  # Relative to where run.sh was started, before the cd below.
  state_dir=$(realpath -m -- "$state_dir")
elif $state_dir_given; then
  usage_error "--state_dir is where --local-kafka keeps Kafka's data; add --local-kafka"
fi
cd "$(dirname "$0")/.."

walserver=${WALSERVER:-}
if [[ -z "$walserver" ]]; then
  ./scripts/setup.sh
  ./scripts/build.sh walserver walctl
  walserver=./build/server/walserver
fi

cat <<TRY

walserver is starting on $listen (metrics on http://127.0.0.1:9464/metrics).
In another terminal, try:

  ./build/client/walctl --server=$listen create 1
  ./build/client/walctl --server=$listen append 1 hello world
  ./build/client/walctl --server=$listen read 1
  ./build/client/walctl --server=$listen truncate 1 1
  ./build/client/walctl --server=$listen info 1
  ./build/client/walctl --server=$listen ls

Stop it with Ctrl-C.

TRY
if ! $local_kafka; then
  exec "$walserver" --listen="$listen" "${args[@]}"
fi

kafka_dir=$state_dir/kafka
mkdir -p "$kafka_dir"
# One run.sh per state folder: a second one would share the broker and stop it under the first.
# The broker and walserver do not inherit the lock (9>&- below).
exec 9>"$kafka_dir/run.lock"
flock -n 9 || usage_error "another run.sh --local-kafka is using $kafka_dir"
kafka_start_pid=""
walserver_pid=""
# However run.sh ends (Ctrl-C while Kafka starts, a broker that never serves, walserver's exit,
# a closed terminal), walserver stops first and then Kafka, which runs in a session of its own.
# Neither a second Ctrl-C nor a closed terminal or pipe may cut this short.
stop_both() {
  set +e
  trap '' INT TERM HUP PIPE
  if [[ -n "$kafka_start_pid" ]]; then
    kill -TERM "$kafka_start_pid" 2>/dev/null
    wait "$kafka_start_pid" 2>/dev/null
  fi
  if [[ -n "$walserver_pid" ]]; then
    kill -TERM "$walserver_pid" 2>/dev/null
    wait "$walserver_pid" 2>/dev/null
  fi
  tests/kafka/kafka.sh stop "$kafka_dir" >>"$kafka_dir/stop.log" 2>&1
  echo "run.sh: Kafka stopped" >&2
}
trap stop_both EXIT
# Until walserver runs, a signal ends run.sh (with the shell's usual status for it).
on_signal() {
  if [[ -n "$walserver_pid" ]]; then
    kill -TERM "$walserver_pid" 2>/dev/null || true
  else
    exit "$1"
  fi
}
trap 'on_signal 130' INT
trap 'on_signal 143' TERM
trap 'on_signal 129' HUP

# The broker keeps its ports and data in $kafka_dir from one run to the next. It starts in the
# background so that a signal is handled at once, not after the start (up to two minutes).
tests/kafka/kafka.sh start "$kafka_dir" 9>&- &
kafka_start_pid=$!
wait "$kafka_start_pid"
kafka_start_pid=""
brokers=$(tests/kafka/kafka.sh bootstrap "$kafka_dir")
echo "Kafka at $brokers keeps the entries in $kafka_dir/data: run this again and they are there."
printf 'Start over with: rm -rf %q\n\n' "$kafka_dir"

# walserver runs as a child so that Kafka can be stopped after it. A Ctrl-C reaches both this
# script and walserver; other signals reach only the script, which passes them on. Replication
# 1 fits one broker; it comes first so that options given to run.sh win.
"$walserver" --brokers="$brokers" --replication_factor=1 --min_insync_replicas=1 \
  --listen="$listen" "${args[@]}" 9>&- &
walserver_pid=$!
while kill -0 "$walserver_pid" 2>/dev/null; do
  wait "$walserver_pid" || true  # returns early when a signal's trap runs
done
status=0
wait "$walserver_pid" || status=$?  # bash keeps the status of a child it has reaped
walserver_pid=""
echo "run.sh: walserver exited ($status)" >&2 || true
exit "$status"
