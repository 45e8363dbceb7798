# Sourced by scripts/test.sh and scripts/bench.sh. start_temporary_broker starts a single-node
# Kafka in a new temporary directory and sets KAFKA_BOOTSTRAP to its HOST:PORT (and
# KAFKA_SASL_BOOTSTRAP to its SASL_PLAINTEXT listener's, KAFKA_DATA_DIR to its log.dirs);
# start_temporary_cluster starts a 3-node cluster and sets KAFKA_CLUSTER_DIR. Both are stopped
# and their directories removed when the script exits.
temporary_kafka_sh="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/kafka.sh"
temporary_kafka_cleanup=()

stop_temporary_kafka() {
  local step
  for step in "${temporary_kafka_cleanup[@]}"; do eval "$step" || true; done
}
trap stop_temporary_kafka EXIT

start_temporary_broker() {
  "$temporary_kafka_sh" fetch
  temporary_broker_dir=$(mktemp -d /tmp/walserver-kafka.XXXXXX)
  temporary_kafka_cleanup+=("'$temporary_kafka_sh' stop '$temporary_broker_dir'; rm -rf '$temporary_broker_dir'")
  "$temporary_kafka_sh" start "$temporary_broker_dir"
  KAFKA_BOOTSTRAP=$("$temporary_kafka_sh" bootstrap "$temporary_broker_dir")
  KAFKA_SASL_BOOTSTRAP=$("$temporary_kafka_sh" sasl-bootstrap "$temporary_broker_dir")
  KAFKA_DATA_DIR=$temporary_broker_dir/data
}

start_temporary_cluster() {
  "$temporary_kafka_sh" fetch
  KAFKA_CLUSTER_DIR=$(mktemp -d /tmp/walserver-cluster.XXXXXX)
  temporary_kafka_cleanup+=("'$temporary_kafka_sh' cluster-stop '$KAFKA_CLUSTER_DIR'; rm -rf '$KAFKA_CLUSTER_DIR'")
  "$temporary_kafka_sh" cluster-start "$KAFKA_CLUSTER_DIR"
}
