#include "server/log/fencing.h"

#include <future>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace wal {

absl::StatusOr<Acquired> AcquireAndFence(MetaStore& meta, EntryWriter& writer,
                                         uint64_t namespace_id, Clock::time_point deadline) {
  // 1. The new epoch, in the metadata topic.
  absl::StatusOr<NamespaceState> state = meta.Acquire(namespace_id, deadline);
  if (!state.ok()) return state.status();
  const uint64_t epoch = state->epoch;
  // 2. The fence in the slot.
  std::promise<absl::StatusOr<std::vector<uint64_t>>> fenced;
  AppendItem fence{state->slot, namespace_id, {}, EntryStamp{epoch, 0, 0}, /*fence=*/true};
  writer.Append({fence}, deadline, [&fenced](absl::StatusOr<std::vector<uint64_t>> ids) {
    fenced.set_value(std::move(ids));
  });
  absl::StatusOr<std::vector<uint64_t>> fence_at = fenced.get_future().get();
  if (!fence_at.ok()) {
    return absl::DeadlineExceededError(absl::StrCat("epoch ", epoch, " of namespace ", namespace_id,
                                                    " was recorded but its fence was not written (",
                                                    fence_at.status().ToString(),
                                                    "); acquire again"));
  }
  // 3. Where the fence lies.
  const auto fence_offset = static_cast<int64_t>((*fence_at)[0]);
  state = meta.RecordFence(namespace_id, Fence{epoch, fence_offset}, deadline);
  if (!state.ok()) {
    return absl::DeadlineExceededError(
        absl::StrCat("epoch ", epoch, " of namespace ", namespace_id,
                     " and its fence were written, but not where the fence lies (",
                     state.status().ToString(), "); acquire again"));
  }
  return Acquired{*std::move(state), epoch, fence_offset};
}

}  // namespace wal
