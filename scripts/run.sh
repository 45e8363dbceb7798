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
cd "$(dirname "$0")/.."

local_kafka=false
state_dir=${XDG_DATA_HOME:-$HOME/.local/share}/walserver
listen=127.0.0.1:50051
args=()
for arg in "$@"; do
  case "$arg" in
    --local-kafka | --local_kafka) local_kafka=true ;;
    --state_dir=* | --state-dir=*) state_dir=${arg#*=} ;;
    *)
      case "$arg" in --listen=*) listen=${arg#--listen=} ;; esac
      args+=("$arg")
      ;;
  esac
done

walserver=${WALSERVER:-}
if [[ -z "$walserver" ]]; then
  ./scripts/setup.sh
  ./scripts/build.sh walserver walctl
  walserver=./build/server/walserver
fi

kafka_dir=$state_dir/kafka
if $local_kafka; then
  for arg in "${args[@]}"; do
    case "$arg" in
      --brokers=*)
        echo "run.sh: --local-kafka starts its own broker; leave out $arg" >&2
        exit 2
        ;;
    esac
  done
  mkdir -p "$kafka_dir"
  # The broker keeps its ports and data in $kafka_dir from one run to the next.
  tests/kafka/kafka.sh start "$kafka_dir"
  # Replication 1 fits one broker; these come first so that options given to run.sh win.
  args=(--brokers="$(tests/kafka/kafka.sh bootstrap "$kafka_dir")" --replication_factor=1
    --min_insync_replicas=1 "${args[@]}")
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
  echo
  exec "$walserver" --listen="$listen" "${args[@]}"
fi
cat <<DURABLE
Kafka keeps the entries in $kafka_dir/data: run this again and they are there.
Start over with: rm -rf $kafka_dir

DURABLE

# walserver runs as a child so that Kafka can be stopped after it. A Ctrl-C reaches both this
# script and walserver (Kafka runs in a session of its own); a SIGTERM reaches only the script,
# which passes it on.
"$walserver" --listen="$listen" "${args[@]}" &
walserver_pid=$!
trap 'kill -TERM "$walserver_pid" 2>/dev/null || true' INT TERM
status=0
while true; do
  wait "$walserver_pid" && status=0 || status=$?
  kill -0 "$walserver_pid" 2>/dev/null || break  # else a signal interrupted the wait
done
trap - INT TERM
echo "run.sh: walserver exited ($status); stopping Kafka" >&2
tests/kafka/kafka.sh stop "$kafka_dir"
exit "$status"
