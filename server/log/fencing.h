// AcquireNamespace's protocol: how a new writer epoch takes effect for every server and reader
// (docs/ARCHITECTURE.md, "Fencing").
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "server/common/deadline.h"
#include "server/log/entry_writer.h"
#include "server/meta/meta_store.h"

namespace wal {

// Raises the namespace's epoch in three steps: the new epoch in the metadata topic (from then on
// this server refuses older epochs, and every other one once it has read that far), a fence
// record in the slot (readers drop records of older epochs behind it, which a server that has
// not read the new epoch yet may still write), and where that fence lies (so that reads starting
// after it know the epoch it set).
//
// Blocks until done or `deadline`: run it on a thread that may wait. A failure after the first
// step says the call took effect in part (DEADLINE_EXCEEDED, never a code that promises nothing
// changed): the caller acquires again.
struct Acquired {
  NamespaceState state;  // after the last step
  uint64_t epoch = 0;
  int64_t fence_offset = 0;
};
absl::StatusOr<Acquired> AcquireAndFence(MetaStore& meta, EntryWriter& writer,
                                         uint64_t namespace_id, Clock::time_point deadline);

}  // namespace wal
