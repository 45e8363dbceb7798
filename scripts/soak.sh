#!/usr/bin/env bash
# Soak, on a real broker, each part for SOAK_SECONDS (default 600), then its checker over
# everything acknowledged. Not part of CI.
#  1. The random-schedule test: 4 datanodes on 2 walservers, appends, acquisitions, truncations,
#     lost answers and retries, a walserver kill -9 every 3-6 s.
#  2. Readers that stall for up to 3 s, readers that follow and plain reads with deadlines, while
#     entries split over 3 records are appended and walserver is killed every 2-4 s.
#   scripts/soak.sh            # 10 minutes
#   SOAK_SECONDS=3600 scripts/soak.sh
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh --test
./scripts/build.sh integration_test soak_test walserver

source tests/kafka/temporary_broker.sh
start_temporary_broker
export WAL_TEST_BROKERS=$KAFKA_BOOTSTRAP
export WAL_FENCING_SECONDS=${SOAK_SECONDS:-600}
echo "== soak: ${WAL_FENCING_SECONDS} s on Kafka at $WAL_TEST_BROKERS"
"${BUILD_DIR:-build}/tests/integration_test" \
  --gtest_filter='FencingTest.RandomSchedulesKeepEveryAcknowledgedEntryExactlyOnce' 2>&1 |
  grep -E '^(seed|RESULT|\[)' 
echo "== soak: stalling and following readers, crashes inside split entries, ${WAL_FENCING_SECONDS} s"
WAL_SOAK_SECONDS=$WAL_FENCING_SECONDS "${BUILD_DIR:-build}/tests/soak_test" 2>&1 |
  grep -E '^(RESULT|\[)'
