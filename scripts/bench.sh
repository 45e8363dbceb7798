#!/usr/bin/env bash
# Reproduces BENCHMARKS.md: installs what is missing, builds (Release), starts a real Kafka
# broker, runs every walbench mode, writes bench/results/walbench.csv and the latency plot, and
# stops Kafka. Extra arguments go to walbench (e.g. --seconds=10).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --test
dpkg-query -W -f='${Status}' python3-matplotlib 2>/dev/null | grep -q "install ok installed" ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-matplotlib >/dev/null
BUILD_DIR=${BUILD_DIR:-build-release} CMAKE_ARGS=-DCMAKE_BUILD_TYPE=Release \
  ./scripts/build.sh walserver walbench
build=${BUILD_DIR:-build-release}

source tests/kafka/temporary_broker.sh
start_temporary_broker

mkdir -p bench/results
"$build/bench/walbench" --brokers="$KAFKA_BOOTSTRAP" --kafka_data_dir="$temporary_broker_dir/data" \
  --walserver="$build/server/walserver" --csv=bench/results/walbench.csv "$@" |
  tee bench/results/walbench.txt
/usr/bin/python3 bench/plot_latency.py bench/results/walbench.csv bench/results/latency.png
echo "bench.sh: results in bench/results/"
