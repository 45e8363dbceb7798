#!/usr/bin/env bash
# Builds the libFuzzer targets in the AddressSanitizer build (scripts/build.sh --asan: clang,
# AddressSanitizer and UndefinedBehaviorSanitizer, into build-asan/) and runs each for
# FUZZ_SECONDS (default 30). Crashes are kept in build-asan/fuzz/crashes/ and fail the script.
#   scripts/fuzz.sh                 # the short run CI does
#   FUZZ_SECONDS=3600 scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh --asan record_fuzzer request_fuzzer
work=build-asan/fuzz
mkdir -p $work/crashes $work/corpus/record $work/corpus/request
for fuzzer in record request; do
  echo "== ${fuzzer}_fuzzer for ${FUZZ_SECONDS:-30} s"
  rc=0
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=0 \
    "build-asan/tests/${fuzzer}_fuzzer" -max_total_time="${FUZZ_SECONDS:-30}" \
    -artifact_prefix=$work/crashes/ -print_final_stats=1 \
    "$work/corpus/$fuzzer" >"$work/$fuzzer.log" 2>&1 || rc=$?
  grep -E '^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$work/$fuzzer.log" || true
  if ((rc != 0)); then
    tail -n 40 "$work/$fuzzer.log" >&2
    echo "fuzz: ${fuzzer}_fuzzer failed (exit $rc); inputs in $work/crashes/" >&2
    exit 1
  fi
done
