// Which Kafka the suites built from shared objects run on (the contract and core tests): each of
// their executables links kafka_mode.cc compiled with or without WAL_TEST_REAL_KAFKA
// (tests/CMakeLists.txt), so that the files both run compile once.
#pragma once

namespace wal::testing {

// True in integration_contract_test and integration_core_test (the real broker of
// $WAL_TEST_BROKERS), false in unit_contract_test and unit_core_test (the mock cluster).
bool OnRealKafka();

}  // namespace wal::testing
