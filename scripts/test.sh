#!/usr/bin/env bash
# The whole suite: installs what is missing (Java and Maven artifacts for Kafka, the Rust
# client's crates), checks formatting, builds, starts a real Kafka broker, runs every test through
# ctest but the fault tests, runs the Rust client's cargo tests against walserver on that broker
# (also with TLS through aws-lc-rs, and with the oldest tonic and prost it allows) and a smoke run
# of walpeer (bench/peer), runs the contract suite and the Rust client's tests again on the other
# Kafka versions, runs the unit and integration tests again built with AddressSanitizer and
# UndefinedBehaviorSanitizer and again with ThreadSanitizer, runs the libFuzzer targets for 30 s
# each, runs the deploy files with podman (tests/deploy/deploy_test.sh), then starts a 3-node
# Kafka cluster and runs the fault tests one at a time on it, and stops Kafka. The sanitizer
# builds and the deploy test's images are made in the background, at idle priority, from the
# start (the plain build and its tests leave CPU idle: links, and tests that mostly wait on Kafka
# and timers); the deploy test's containers run beside the sanitizer suites, or after the fault
# tests when its images were not ready before them. A run ends with a table of its steps.
#   scripts/test.sh [ctest options]          the whole suite (CI runs this)
#   scripts/test.sh --quick [ctest options]  the inner loop: formatting, the plain build, every
#                                            ctest test but the fault tests and the Rust
#                                            client's tests, on real Kafka; no header check,
#                                            clippy, sanitizer builds, deploy test, cluster
#                                            or fuzzing
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=false
if [[ "${1:-}" == "--quick" ]]; then
  quick=true
  shift
fi

# Each step's heading says when it began. Steps run one after another; jobs (job, finish) run in
# the background beside them, each in a process group of its own with its output in a log of its
# own, printed whole when it is finished. The run ends, passed or not, with a table of the steps
# and jobs, how long each took and the CPU time its processes used, so that a slow run shows
# where its time went (docs/TESTING.md keeps the latest). The CPU time is what the processes a
# row started used once they ended; it leaves out what runs detached from them: the Kafka
# brokers, and the containers of podman (their builds included).
logs=$(mktemp -d /tmp/walserver-test.XXXXXX)
rows=() began=() ended=() cpu=()
open_step=""      # the row of the step running now
step_cpu_began=0  # steps_cpu when the open step began
jobs_cpu=0        # the CPU milliseconds of the jobs ended so far
declare -A job_pid job_row job_rc
minutes() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }
# Sets own_cpu and children_cpu to the CPU milliseconds of this shell and of its ended children
# (and theirs): the two lines of `times`, which must run in this shell (a pipe or $(...) would ask a
# subshell, whose counts start at 0).
read_cpu() {
  local file=$logs/times.$BASHPID
  times >"$file"
  read -r own_cpu children_cpu < <(awk '{ split($1 " " $2, t, /[ms ]+/); s[NR] = (t[1] * 60 + t[2] + t[3] * 60 + t[4]) * 1000 }
    END { printf "%d %d\n", s[1], s[2] }' "$file")
}
# account_job NAME RC: the ended job's row (its end, its CPU) and exit code.
account_job() {
  local row=${job_row[$1]}
  job_rc[$1]=$2
  ended[row]=$(cat "$logs/$1.ended" 2>/dev/null || echo "$SECONDS")
  cpu[row]=$(cat "$logs/$1.cpu" 2>/dev/null || echo 0)
  jobs_cpu=$((jobs_cpu + cpu[row]))
}
# Accounts the jobs that ended (wrote their CPU) since last asked; fails if there were none.
account_ended_jobs() {
  local name rc any=1
  for name in "${!job_pid[@]}"; do
    [[ -z "${job_rc[$name]:-}" && -e "$logs/$name.cpu" ]] || continue
    rc=0
    wait "${job_pid[$name]}" || rc=$?
    account_job "$name" "$rc"
    any=0
  done
  return "$any"
}
# Sets steps_cpu to the CPU milliseconds of the steps so far: the children's less the jobs'. Bash
# counts a job as soon as it reaps it, long before finish may ask, so the jobs that ended are
# accounted first, until none ended between that and reading the count.
read_steps_cpu() {
  read_cpu
  while account_ended_jobs; do read_cpu; done
  steps_cpu=$((children_cpu - jobs_cpu))
}
add_row() {
  rows+=("$1")
  began+=("$SECONDS")
  ended+=("")
  cpu+=("")
}
# Ends the open step's row: its time and its CPU.
close_step() {
  [[ -n "$open_step" ]] || return 0
  ended[open_step]=${ended[open_step]:-$SECONDS}
  read_steps_cpu
  cpu[open_step]=$((steps_cpu - step_cpu_began))
  open_step=""
}
# step NAME [WHAT]: NAME in the table, NAME and WHAT in the heading.
step() {
  close_step
  open_step=${#rows[@]}
  read_steps_cpu
  step_cpu_began=$steps_cpu
  add_row "$1"
  printf '== %s%s  [%s, %s into the run]\n' "$1" "${2:+: $2}" "$(date +%T)" "$(minutes "$SECONDS")"
}
# job NAME COMMAND...: runs COMMAND in the background.
job() {
  local name=$1
  shift
  job_row[$name]=${#rows[@]}
  add_row "$name (beside)"
  set -m  # a process group of its own, which stop_jobs can end whole
  # The job notes when it ended and its CPU itself (its own and its children's): finish may wait
  # for it much later. The CPU file, written last, says it ended.
  (
    trap 'trap "" TERM; echo "$SECONDS" >"$logs/$name.ended"; read_cpu
      echo $((own_cpu + children_cpu)) >"$logs/$name.cpu.part"; mv "$logs/$name.cpu.part" "$logs/$name.cpu"' EXIT
    trap 'exit 143' TERM  # so that stop_jobs waits for the cleanup of what it runs
    "$@" </dev/null >"$logs/$name.log" 2>&1
  ) &
  job_pid[$name]=$!
  set +m
  printf '== %s starts beside the steps  [%s, %s into the run]\n' "$name" "$(date +%T)" "$(minutes "$SECONDS")"
}
# finish NAME: waits for the job, prints its output, and fails if it failed.
finish() {
  local name=$1 rc=0
  if [[ -z "${job_rc[$name]:-}" ]]; then
    wait "${job_pid[$name]}" || rc=$?
    account_job "$name" "$rc"
  fi
  rc=${job_rc[$name]}
  unset -v 'job_pid[$name]'
  printf '== %s ended (exit %d)  [%s, %s into the run]; its output:\n' "$name" "$rc" "$(date +%T)" "$(minutes "$SECONDS")"
  cat "$logs/$name.log"
  if ((rc != 0)); then
    echo "test.sh: $name failed (exit $rc)" >&2
    return "$rc"
  fi
}
# On exit: ends the jobs still running (each stops the Kafka it started) and shows the end of
# what each unfinished job had said.
stop_jobs() {
  local name rc
  for name in "${!job_pid[@]}"; do
    [[ -n "${job_rc[$name]:-}" ]] || kill -- "-${job_pid[$name]}" 2>/dev/null || true
  done
  for name in "${!job_pid[@]}"; do
    if [[ -n "${job_rc[$name]:-}" ]]; then
      echo "== $name ended (exit ${job_rc[$name]}) before the run asked; the end of its output:"
    else
      rc=0
      wait "${job_pid[$name]}" 2>/dev/null || rc=$?
      account_job "$name" "$rc"
      echo "== $name was ended unfinished; the end of its output:"
    fi
    tail -n 80 "$logs/$name.log"
  done
}
step_table() {
  local i end
  close_step
  echo "| step | began | took | CPU |"
  echo "|---|---|---|---|"
  for i in "${!rows[@]}"; do
    end=${ended[i]:-$SECONDS}
    echo "| ${rows[i]} | $(minutes "${began[i]}") | $(minutes $((end - began[i]))) | $(minutes $((${cpu[i]:-0} / 1000))) |"
  done
  read_cpu
  echo "| the whole run | | $(minutes "$SECONDS") | $(minutes $((children_cpu / 1000))) |"
}
# A job that starts Kafka stops it when it ends, also when stop_jobs ends it.
kafka_job_traps() {
  temporary_kafka_cleanup=()
  trap stop_temporary_kafka EXIT
  trap 'exit 143' TERM
}

step "setup" "packages, toolchains and sources that are missing"
./scripts/setup.sh --test
export PATH="$HOME/.cargo/bin:$PATH:$HOME/go/bin"  # rustup's cargo before any older one
# The Rust client's build outlives the clone, as ccache's objects do: a fresh clone rebuilds
# only the crate itself.
export CARGO_TARGET_DIR=$(realpath -m "${CARGO_TARGET_DIR:-$HOME/.cache/walserver/rust-target}")

source tests/kafka/temporary_broker.sh
# On any exit: no job left running, Kafka stopped, and the table of what ran.
trap 'stop_jobs; stop_temporary_kafka; step_table; rm -rf "$logs"' EXIT

step "format" "clang-format (.clang-format) and rustfmt"
mapfile -t sources < <(git ls-files '*.cc' '*.h' 2>/dev/null || find server client tests -name '*.cc' -o -name '*.h')
clang-format --dry-run --Werror "${sources[@]}"
(cd client/rust && cargo fmt --check)

# The sanitizer builds (scripts/build.sh --asan, --tsan; the AddressSanitizer build holds the
# fuzzers too) compile beside the plain build and its tests, as SCHED_IDLE processes: they get
# only the CPU that those leave idle (the links, and most of it once the tests run: they mostly
# wait on Kafka and timers), so the plain build and its tests run as if alone. One build at a
# time, so that the first is ready as early as it can be.
# The deploy test (tests/deploy/) makes its images likewise (base images once, downloads
# mostly; walserver's each run, its compile through ccache), and starts its containers once the
# plain ctest is over and never beside the fault tests (a lock they share): beside the sanitizer
# suites when its images are ready by then, else after the fault tests.
plain_ctest_over=$logs/plain-ctest-over
timed_alone=$logs/timed-alone.lock
deploy() {
  chrt --idle 0 tests/deploy/images.sh --walserver
  while [[ ! -e "$plain_ctest_over" ]]; do
    kill -0 $$ 2>/dev/null || return 1  # test.sh was killed without its EXIT trap
    sleep 1
  done
  flock "$timed_alone" tests/deploy/deploy_test.sh
}
if ! $quick; then
  job "ASan build" chrt --idle 0 ./scripts/build.sh --asan unit_and_integration_tests \
    record_fuzzer request_fuzzer
  job "TSan build (after the ASan build)" bash -c 'tail --pid="$1" -f /dev/null &&
    exec chrt --idle 0 ./scripts/build.sh --tsan unit_and_integration_tests' - "${job_pid[ASan build]}"
  job "deploy images, deploy test" deploy
fi

step "build" "the plain build"
./scripts/build.sh

if ! $quick; then
  step "headers" "every header compiles on its own"
  ./scripts/build.sh header_check  # through build.sh: its ccache settings let clones share objects
fi

step "Kafka" "a single broker for the tests"
start_temporary_broker
export WAL_TEST_BROKERS=$KAFKA_BOOTSTRAP WAL_TEST_SASL_BROKERS=$KAFKA_SASL_BOOTSTRAP
export WAL_TEST_KAFKA_DATA_DIR=$KAFKA_DATA_DIR
walserver_binary=$(realpath "${BUILD_DIR:-build}/server/walserver")

# The Rust client's tests (client/rust) against walserver on the same Kafka; the whole suite adds
# clippy, its docs, TLS through aws-lc-rs, the oldest tonic and prost it allows, and walpeer.
rust_client() {
  (cd client/rust && WALSERVER=$walserver_binary cargo test --offline --locked -- --test-threads=2)
  ! $quick || return 0
  (cd client/rust && cargo clippy --offline --locked --all-targets -- -D warnings &&
    cargo clippy --offline --locked --no-default-features --all-targets -- -D warnings &&
    RUSTDOCFLAGS="-D warnings" cargo doc --offline --locked --no-deps)
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
  echo "== walpeer (bench/peer, the path walserver replaces): checks, build, smoke run on the same Kafka"
  # The dev profile: the smoke run measures nothing, and its dependencies are mostly the client
  # tests' (built already); release builds of them took 2:50 of a run on a new machine.
  # scripts/bench.sh builds it in release for the benchmarks.
  (cd bench/peer && cargo fmt --check && cargo clippy --offline --locked -- -D warnings &&
    cargo build --offline --locked)
  # Outside ctest, so its own time limit (a smoke run takes about 10 s).
  WALPEER=$CARGO_TARGET_DIR/debug/walpeer WALSERVER=$walserver_binary \
    WAL_TEST_BROKER_PID=$(cat "$temporary_broker_dir/pid") \
    WALCTL=$(realpath "${BUILD_DIR:-build}/client/walctl") timeout 600 tests/scripts/walpeer_smoke_test.sh
}

if $quick; then
  step "ctest" "every test but the fault tests (Kafka at $WAL_TEST_BROKERS)"
  (cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j4 -LE fault "$@")
  step "Rust client" "cargo test (client/rust) against walserver on the same Kafka"
  rust_client
  step "quick run passed" "the whole suite adds the Kafka versions, sanitizer builds, fuzzers, deploy and fault tests"
  exit 0
fi

# The suite's broker ($WAL_KAFKA_VERSION, default in tests/kafka/pom.xml) runs everything else;
# the contract suite and the Rust client's tests run again on each other version
# docs/OPERATIONS.md lists, each on a broker of its own.
other_kafka_versions() {
  local kafka_version
  for kafka_version in ${WAL_COMPAT_KAFKA_VERSIONS:-3.9.1 4.4.0}; do
    echo "== the contract suite and the Rust client's tests on Kafka $kafka_version"
    (
      export WAL_KAFKA_VERSION=$kafka_version
      unset WAL_KAFKA_CACHE  # a cache of one version's jars each (kafka.sh)
      kafka_job_traps
      start_temporary_broker
      export WAL_TEST_BROKERS=$KAFKA_BOOTSTRAP WAL_TEST_SASL_BROKERS=$KAFKA_SASL_BOOTSTRAP
      export WAL_TEST_KAFKA_DATA_DIR=$KAFKA_DATA_DIR
      (cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j2 -R '^integration_contract_test[.]')
      # The datanode workload (30 s) ran on the suite's broker, and so did the test of entries
      # Kafka lost, which sets a topic's retention with the broker's own ConfigCommand: Kafka 4.4
      # moved it out of the jars kafka.sh fetches.
      (cd client/rust && WALSERVER=$walserver_binary cargo test --offline --locked -- --test-threads=2 \
        --skip a_datanode_of_1000_regions --skip a_read_over_entries_kafka_lost)
    )
  done
}

# The fault tests, one at a time, on a 3-node Kafka cluster of their own, each node in a network
# namespace of its own: the partition tests cut links between the nodes and walserver
# (tests/kafka/network.sh, root only); without namespaces they fail, saying so.
fault_tests() {
  (
    kafka_job_traps
    WAL_KAFKA_NETNS=1 start_temporary_cluster
    (cd "${BUILD_DIR:-build}" && WAL_TEST_CLUSTER=$KAFKA_CLUSTER_DIR ctest --output-on-failure -L fault "$@")
  )
}

# The sanitizers' unit and integration tests, on the suite's broker. The flood and read-memory
# tests measure resident memory, which the sanitizers' shadow memory inflates; they run in the
# plain build.
asan_tests() {
  (cd build-asan && UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    ctest -L 'unit|integration' -E 'Flood|read_memory' --output-on-failure -j3)
}
# tests/tsan.supp says what is suppressed and why (Debian's gRPC is not instrumented).
# ignore_noninstrumented_modules: likewise for the atomics inside librdkafka; its mutexes are
# seen (server/kafka/tsan_c11_threads.cc). tests/core/ drives the core without gRPC.
tsan_tests() {
  (cd build-tsan &&
    TSAN_OPTIONS="halt_on_error=1:ignore_noninstrumented_modules=1:second_deadlock_stack=1:suppressions=$PWD/../tests/tsan.supp" \
    ctest -L 'unit|integration' -E 'Flood|read_memory' --output-on-failure -j3)
}

# The suites run a few at once: none keeps a core busy (they wait on Kafka, timers and restarts),
# so two or three together keep the CPU about as busy as one compile, and the sanitizer builds
# take what is left. The plain ctest runs beside the Rust client's tests and the other Kafka
# versions; each sanitizer suite starts once its build is ready and the plain ctest is over.
# The fault tests run last, alone, as they always did: their cluster's recovery is what they
# time.
rust_client_and_kafka_versions() {
  rust_client
  other_kafka_versions
}
job "Rust client, Kafka versions" rust_client_and_kafka_versions
step "ctest" "every test but the fault tests (Kafka at $WAL_TEST_BROKERS)"
# Four at a time: three used 2:40 of CPU in 7:50 (caches warm, the Rust client's tests beside).
(cd "${BUILD_DIR:-build}" && ctest --output-on-failure -j4 -LE fault "$@")
touch "$plain_ctest_over"
step "ASan build" "waiting for the rest of the AddressSanitizer build"
finish "ASan build"
job "ASan tests" asan_tests
# A short run of each (clang, AddressSanitizer and UndefinedBehaviorSanitizer).
job "fuzzers" env FUZZ_SECONDS="${FUZZ_SECONDS:-30}" ./scripts/fuzz.sh
step "TSan build" "waiting for the rest of the ThreadSanitizer build"
finish "TSan build (after the ASan build)"
step "TSan tests" "unit and integration tests under ThreadSanitizer"
tsan_tests
step "the other jobs" "waiting for the suites on the suite's broker"
finish "ASan tests"
finish "fuzzers"
finish "Rust client, Kafka versions"
step "fault tests" "a 3-node Kafka cluster, each node in a network namespace of its own"
"$temporary_kafka_sh" stop "$temporary_broker_dir"  # every other suite is done
exec 9>"$timed_alone"
flock 9  # not while the deploy test's containers run
fault_tests "$@"
flock -u 9
step "deploy test" "waiting for the deploy job (its images may still have been made beside the fault tests)"
finish "deploy images, deploy test"

step "the whole suite passed"
