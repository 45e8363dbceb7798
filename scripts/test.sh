#!/usr/bin/env bash
# The whole suite: installs what is missing (Java and Maven artifacts for Kafka included),
# checks formatting, builds, starts a real Kafka broker, runs every test through ctest, stops
# Kafka. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

./scripts/setup.sh --test
export PATH="$PATH:$HOME/go/bin"

echo "== format check (clang-format, .clang-format)"
mapfile -t sources < <(git ls-files '*.cc' '*.h' 2>/dev/null || find server client tests -name '*.cc' -o -name '*.h')
clang-format --dry-run --Werror "${sources[@]}"

echo "== build"
./scripts/build.sh

echo "== Kafka"
tests/kafka/kafka.sh fetch
kafka_dir=$(mktemp -d /tmp/walserver-kafka.XXXXXX)
cleanup() {
  "$root/tests/kafka/kafka.sh" stop "$kafka_dir" || true
  rm -rf "$kafka_dir"
}
trap cleanup EXIT
tests/kafka/kafka.sh start "$kafka_dir"
WAL_TEST_BROKERS=$(tests/kafka/kafka.sh bootstrap "$kafka_dir")
export WAL_TEST_BROKERS

echo "== tests (Kafka at $WAL_TEST_BROKERS)"
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j2 "$@"
