#!/usr/bin/env bash
# The whole suite: installs what is missing (Java and Maven artifacts for Kafka, the Rust
# client's crates), checks formatting, builds, starts a real Kafka broker, runs every test through
# ctest but the fault tests, runs the Rust client's cargo tests against walserver on that broker
# (also with TLS through aws-lc-rs, and with the oldest tonic and prost it allows) and a smoke run
# of walpeer (bench/peer),
# runs the contract suite and the Rust client's tests again on the other Kafka versions, runs the
# unit and integration tests again built with AddressSanitizer and
# UndefinedBehaviorSanitizer and again with ThreadSanitizer, then starts a 3-node Kafka cluster
# and runs the fault tests one at a time on it, runs the libFuzzer targets for 30 s each, stops
# Kafka.
#   scripts/test.sh [ctest options]          the whole suite (CI runs this)
#   scripts/test.sh --quick [ctest options]  the inner loop: formatting, the plain build, every
#                                            ctest test but the fault tests and the Rust
#                                            client's tests, on real Kafka; no header check,
#                                            clippy, sanitizer builds, cluster or fuzzing
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=false
if [[ "${1:-}" == "--quick" ]]; then
  quick=true
  shift
fi

# Each step's heading says when it began, so that a slow run shows where its time went.
step() { printf '== %s  [%s, %d min %02d s into the run]\n' "$1" "$(date +%T)" $((SECONDS / 60)) $((SECONDS % 60)); }

step "setup: packages, toolchains and sources that are missing"
./scripts/setup.sh --test
export PATH="$HOME/.cargo/bin:$PATH:$HOME/go/bin"  # rustup's cargo before any older one
# The Rust client's build outlives the clone, as ccache's objects do: a fresh clone rebuilds
# only the crate itself.
export CARGO_TARGET_DIR=$(realpath -m "${CARGO_TARGET_DIR:-$HOME/.cache/walserver/rust-target}")

step "format check (clang-format, .clang-format)"
mapfile -t sources < <(git ls-files '*.cc' '*.h' 2>/dev/null || find server client tests -name '*.cc' -o -name '*.h')
clang-format --dry-run --Werror "${sources[@]}"
(cd client/rust && cargo fmt --check)

step "build"
./scripts/build.sh
if ! $quick; then
  step "every header compiles on its own"
  ninja -C "${BUILD_DIR:-build}" header_check
fi

step "Kafka"
source tests/kafka/temporary_broker.sh
start_temporary_broker
export WAL_TEST_BROKERS=$KAFKA_BOOTSTRAP WAL_TEST_SASL_BROKERS=$KAFKA_SASL_BOOTSTRAP
export WAL_TEST_KAFKA_DATA_DIR=$KAFKA_DATA_DIR

step "tests (Kafka at $WAL_TEST_BROKERS)"
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j2 -LE fault "$@")

step "Rust client (client/rust): cargo test against walserver on the same Kafka"
walserver_binary=$(realpath "${BUILD_DIR:-build}/server/walserver")
(cd client/rust && WALSERVER=$walserver_binary cargo test --offline --locked -- --test-threads=2)
if ! $quick; then
  (cd client/rust && cargo clippy --offline --locked --all-targets -- -D warnings &&
    cargo clippy --offline --locked --no-default-features --all-targets -- -D warnings &&
    RUSTDOCFLAGS="-D warnings" cargo doc --offline --locked --no-deps)
  step "Rust client: TLS through aws-lc-rs, and the oldest tonic and prost its Cargo.toml allows"
  # Each must run its test: a feature name gone wrong would compile the test out and pass.
  run_one_test() {
    local out
    out=$(cd client/rust && WALSERVER=$walserver_binary cargo test --offline --locked "$@")
    printf '%s\n' "$out"
    grep -q '^test result: ok. 1 passed' <<<"$out"
  }
  run_one_test --no-default-features --features tls-aws-lc --test walserver -- --exact tls
  run_one_test --no-default-features --lib -- --exact \
    client::tests::without_a_tls_feature_tls_targets_are_refused
  WALSERVER=$walserver_binary scripts/rust_minimal_versions.sh
  step "walpeer (bench/peer, the path walserver replaces): checks, build, smoke run on the same Kafka"
  (cd bench/peer && cargo fmt --check && cargo clippy --offline --locked --release -- -D warnings &&
    cargo build --offline --locked --release)
  # Outside ctest, so its own time limit (a smoke run takes about 10 s).
  WALPEER=$CARGO_TARGET_DIR/release/walpeer WALSERVER=$walserver_binary \
    WAL_TEST_BROKER_PID=$(cat "$temporary_broker_dir/pid") WALCTL=$(realpath "${BUILD_DIR:-build}/client/walctl") timeout 600 tests/scripts/walpeer_smoke_test.sh
fi
if $quick; then
  step "quick run passed (the whole suite adds the Kafka versions, sanitizer builds, fault tests and fuzzers)"
  exit 0
fi

# The suite's broker ($WAL_KAFKA_VERSION, default in tests/kafka/pom.xml) ran everything above;
# the contract suite and the Rust client's tests run again on each other version docs/OPERATIONS.md lists.
for kafka_version in ${WAL_COMPAT_KAFKA_VERSIONS:-3.9.1 4.4.0}; do
  step "compatibility: the contract suite and the Rust client's tests on Kafka $kafka_version"
  (
    export WAL_KAFKA_VERSION=$kafka_version
    unset WAL_KAFKA_CACHE  # a cache of one version's jars each (kafka.sh)
    temporary_kafka_cleanup=()
    trap stop_temporary_kafka EXIT
    start_temporary_broker
    export WAL_TEST_BROKERS=$KAFKA_BOOTSTRAP WAL_TEST_SASL_BROKERS=$KAFKA_SASL_BOOTSTRAP
    export WAL_TEST_KAFKA_DATA_DIR=$KAFKA_DATA_DIR
    (cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j2 -R '^integration_contract_test[.]')
    # The datanode workload (20 s) ran on the suite's broker above.
    (cd client/rust && WALSERVER=$walserver_binary cargo test --offline --locked -- --test-threads=2 \
      --skip a_datanode_of_1000_regions)
  )
done

step "unit and integration tests under AddressSanitizer and UndefinedBehaviorSanitizer"
BUILD_DIR=build-asan CMAKE_ARGS=-DWAL_SANITIZE=address,undefined ./scripts/build.sh
# The flood and read-memory tests measure resident memory, which ASan's shadow and quarantine
# inflate; they run in the plain build above.
(cd build-asan && UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest -L 'unit|integration' -E 'Flood|read_memory' --output-on-failure -j2)

step "unit and integration tests under ThreadSanitizer"
# tests/tsan.supp says what is suppressed and why (Debian's gRPC is not instrumented).
# ignore_noninstrumented_modules: likewise for the atomics inside librdkafka; its mutexes are
# seen (server/kafka/tsan_c11_threads.cc). tests/core/ drives the core without gRPC.
BUILD_DIR=build-tsan CMAKE_ARGS=-DWAL_SANITIZE=thread ./scripts/build.sh
(cd build-tsan &&
  TSAN_OPTIONS="halt_on_error=1:ignore_noninstrumented_modules=1:second_deadlock_stack=1:suppressions=$PWD/../tests/tsan.supp" \
  ctest -L 'unit|integration' -E 'Flood|read_memory' --output-on-failure -j2)

step "fault tests (3-node Kafka cluster, each node in a network namespace of its own)"
"$temporary_kafka_sh" stop "$temporary_broker_dir"  # room for three JVMs
# The partition tests cut links between the nodes and walserver (tests/kafka/network.sh, root
# only); without namespaces they fail, saying so.
WAL_KAFKA_NETNS=1 start_temporary_cluster
(cd "${BUILD_DIR:-build}" && WAL_TEST_CLUSTER=$KAFKA_CLUSTER_DIR ctest --output-on-failure -L fault "$@")
"$temporary_kafka_sh" cluster-stop "$KAFKA_CLUSTER_DIR"

step "fuzzers, a short run (clang, AddressSanitizer and UndefinedBehaviorSanitizer)"
FUZZ_SECONDS=${FUZZ_SECONDS:-30} ./scripts/fuzz.sh
step "the whole suite passed"
