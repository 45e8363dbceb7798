#include "tests/support/kafka_mode.h"

namespace wal::testing {

bool OnRealKafka() {
#ifdef WAL_TEST_REAL_KAFKA
  return true;
#else
  return false;
#endif
}

}  // namespace wal::testing
