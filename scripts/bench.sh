#!/usr/bin/env bash
# Reproduces docs/BENCHMARKS.md: installs what is missing, builds (Release), starts a real Kafka
# broker, runs every walbench mode (walserver against direct librdkafka), then walpeer (bench/peer:
# walserver through the Rust walclient against rskafka, direct and behind a merging worker) on the
# same broker, then walpeer again on rskafka with TCP_NODELAY (scripts/walpeer_nodelay.sh), writes
# bench/results/walbench.csv, walpeer.csv, walpeer_nodelay.csv, the latency plot and the chart
# of every path (paths.png), and stops Kafka. Extra arguments go to walbench (e.g. --seconds=10), WALPEER_ARGS to both walpeers (e.g.
# "--payload=timeseries --compression=lz4"); WALBENCH=false, WALPEER=false or
# WALPEER_NODELAY=false skips one.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --test
dpkg-query -W -f='${Status}' python3-matplotlib 2>/dev/null | grep -q "install ok installed" ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-matplotlib >/dev/null
BUILD_DIR=${BUILD_DIR:-build-release} CMAKE_ARGS=-DCMAKE_BUILD_TYPE=Release \
  ./scripts/build.sh walserver walbench
build=${BUILD_DIR:-build-release}
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TARGET_DIR=$(realpath -m "${CARGO_TARGET_DIR:-$HOME/.cache/walserver/rust-target}")  # as test.sh
(cd bench/peer && cargo build --offline --locked --release)
peer=$CARGO_TARGET_DIR/release/walpeer

source tests/kafka/temporary_broker.sh
start_temporary_broker

mkdir -p bench/results
charted=()  # the chart's other CSV: walbench's, for direct librdkafka
if [[ "${WALBENCH:-}" != false ]]; then
  "$build/bench/walbench" --brokers="$KAFKA_BOOTSTRAP" --kafka_data_dir="$temporary_broker_dir/data" \
    --walserver="$build/server/walserver" --csv=bench/results/walbench.csv "$@" |
    tee bench/results/walbench.txt
  charted+=(bench/results/walbench.csv)
  /usr/bin/python3 bench/plot_latency.py bench/results/walbench.csv bench/results/latency.png
fi
if [[ "${WALPEER:-}" != false ]]; then
  # shellcheck disable=SC2086  # WALPEER_ARGS is a list of flags
  "$peer" --brokers="$KAFKA_BOOTSTRAP" --walserver="$build/server/walserver" \
    --broker_pid="$(cat "$temporary_broker_dir/pid")" \
    --csv=bench/results/walpeer.csv ${WALPEER_ARGS:-} | tee bench/results/walpeer.txt
fi
if [[ "${WALPEER_NODELAY:-}" != false ]]; then
  nodelay_peer=$(./scripts/walpeer_nodelay.sh)
  # shellcheck disable=SC2086  # WALPEER_ARGS is a list of flags
  "$nodelay_peer" --brokers="$KAFKA_BOOTSTRAP" --walserver="$build/server/walserver" \
    --broker_pid="$(cat "$temporary_broker_dir/pid")" --modes=regions,single,batched,replay \
    --rskafka_label=" (TCP_NODELAY)" --csv=bench/results/walpeer_nodelay.csv ${WALPEER_ARGS:-} |
    tee bench/results/walpeer_nodelay.txt
  # The chart at the top of docs/BENCHMARKS.md: walserver beside every path of this run.
  /usr/bin/python3 bench/plot_paths.py bench/results/paths.png bench/results/walpeer_nodelay.csv \
    ${charted[@]+"${charted[@]}"}
fi
echo "bench.sh: results in bench/results/"
