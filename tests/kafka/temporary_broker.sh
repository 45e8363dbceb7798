# Sourced by scripts/test.sh and scripts/bench.sh: start_temporary_broker starts a single-node
# Kafka in a new temporary directory, stops it and removes the directory when the script exits,
# and sets KAFKA_BOOTSTRAP to its HOST:PORT.
start_temporary_broker() {
  local kafka_sh
  kafka_sh="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/kafka.sh"
  "$kafka_sh" fetch
  temporary_broker_dir=$(mktemp -d /tmp/walserver-kafka.XXXXXX)
  # shellcheck disable=SC2064  # expand now: the paths are fixed
  trap "'$kafka_sh' stop '$temporary_broker_dir' || true; rm -rf '$temporary_broker_dir'" EXIT
  "$kafka_sh" start "$temporary_broker_dir"
  KAFKA_BOOTSTRAP=$("$kafka_sh" bootstrap "$temporary_broker_dir")
}
