#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (AddressSanitizer and UndefinedBehaviorSanitizer on)
# into build-fuzz/ and runs each for FUZZ_SECONDS (default 30). Crashes are kept in
# build-fuzz/crashes/ and fail the script.
#   scripts/fuzz.sh                 # the short run CI does
#   FUZZ_SECONDS=3600 scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CC=clang CXX=clang++
BUILD_DIR=build-fuzz CMAKE_ARGS="-DWAL_FUZZ=ON -DWAL_SANITIZE=address,undefined" \
  ./scripts/build.sh record_fuzzer request_fuzzer
mkdir -p build-fuzz/crashes build-fuzz/corpus/record build-fuzz/corpus/request
for fuzzer in record request; do
  echo "== ${fuzzer}_fuzzer for ${FUZZ_SECONDS:-30} s"
  rc=0
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=0 \
    "build-fuzz/tests/${fuzzer}_fuzzer" -max_total_time="${FUZZ_SECONDS:-30}" \
    -artifact_prefix=build-fuzz/crashes/ -print_final_stats=1 \
    "build-fuzz/corpus/$fuzzer" >"build-fuzz/$fuzzer.log" 2>&1 || rc=$?
  grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "build-fuzz/$fuzzer.log" || true
  if ((rc != 0)); then
    tail -n 40 "build-fuzz/$fuzzer.log" >&2
    echo "fuzz: ${fuzzer}_fuzzer failed (exit $rc); inputs in build-fuzz/crashes/" >&2
    exit 1
  fi
done
