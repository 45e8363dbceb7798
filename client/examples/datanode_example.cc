// A datanode's cycle with walclient, for one region:
//   open:   create the region's namespace (idempotent), acquire it (fencing any datanode that
//           held the region before) and replay it into the memtable;
//   write:  append each mutation before applying it (synchronously, or asynchronously);
//   flush:  after the memtable is persisted elsewhere, truncate the log up to the first entry
//           that was not flushed;
//   reopen: replay again, which now yields only what was not flushed.
//
// Usage: datanode_example [walserver address] [region id]
// Exits non-zero if the log does not behave as the example expects.
#include <condition_variable>
#include <iostream>
#include <map>
#include <mutex>
#include <string>

#include "client/wal_client.h"

namespace {

struct Region {
  uint64_t id = 0;
  std::map<uint64_t, std::string> memtable;  // entry id -> mutation, stands in for real data
};

int Fail(const std::string& what, const absl::Status& status) {
  std::cerr << "datanode_example: " << what << ": " << status << "\n";
  return 1;
}

// Replays the whole log of the region into its memtable.
absl::Status Replay(wal::Client& client, Region& region) {
  region.memtable.clear();
  wal::ReadOptions read;
  read.namespace_id = region.id;
  std::unique_ptr<wal::ReadStream> stream = client.OpenRead(read);
  wal::v1::Entry entry;
  while (stream->Next(&entry)) region.memtable[entry.entry_id()] = entry.data();
  return stream->status();
}

}  // namespace

int main(int argc, char** argv) {
  wal::ClientOptions options;
  options.target = argc > 1 ? argv[1] : "127.0.0.1:50051";
  options.timeout = std::chrono::seconds(10);
  Region region;
  region.id = argc > 2 ? std::stoull(argv[2]) : 1;
  auto connected = wal::Client::Connect(options);
  if (!connected.ok()) return Fail("connect", connected.status());
  wal::Client& client = **connected;

  // Open: the namespace may exist from an earlier life of this region.
  auto created = client.CreateNamespace(region.id);
  if (!created.ok()) return Fail("create", created.status());
  // Acquire before replaying: from here on an earlier holder of the region can add nothing the
  // replay would miss. The client sends the epoch with every append to the region.
  auto acquired = client.AcquireNamespace(region.id);
  if (!acquired.ok()) return Fail("acquire", acquired.status());
  if (absl::Status s = Replay(client, region); !s.ok()) return Fail("replay", s);
  const size_t replayed_at_open = region.memtable.size();
  std::cout << "opened region " << region.id << " (" << (created->created ? "new" : "existing")
            << ", writer epoch " << acquired->epoch << "), replayed " << replayed_at_open
            << " entries\n";

  // Write: one synchronous append of a batch, then asynchronous single appends.
  auto ids = client.Append(region.id, {"put a=1", "put b=2", "put c=3"});
  if (!ids.ok()) return Fail("append", ids.status());
  for (size_t i = 0; i < ids->size(); ++i) region.memtable[(*ids)[i]] = "batch";
  std::mutex mu;
  std::condition_variable cv;
  int pending = 3;
  absl::Status async_error;
  for (int i = 0; i < 3; ++i) {
    wal::v1::AppendRequest request;
    auto* e = request.add_entries();
    e->set_namespace_id(region.id);
    e->set_data("put async=" + std::to_string(i));
    client.AppendAsync(std::move(request), [&](absl::StatusOr<std::vector<uint64_t>> result) {
      std::lock_guard<std::mutex> lock(mu);
      if (result.ok()) {
        region.memtable[result->front()] = "async";
      } else {
        async_error = result.status();
      }
      if (--pending == 0) cv.notify_one();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return pending == 0; });
  }
  if (!async_error.ok()) return Fail("async append", async_error);

  // Flush: pretend everything but the newest entry reached durable storage, and truncate the
  // log before that entry.
  const uint64_t keep_from = region.memtable.rbegin()->first;
  auto truncated = client.Truncate(region.id, keep_from);
  if (!truncated.ok()) return Fail("truncate", truncated.status());
  std::cout << "flushed; log now starts at entry " << truncated->first_entry_id() << "\n";

  // Reopen: only the unflushed entry comes back.
  if (absl::Status s = Replay(client, region); !s.ok()) return Fail("replay", s);
  if (region.memtable.size() != 1 || region.memtable.begin()->first != keep_from) {
    std::cerr << "datanode_example: expected to replay exactly entry " << keep_from << ", got "
              << region.memtable.size() << " entries\n";
    return 1;
  }
  std::cout << "reopened region " << region.id << ", replayed 1 entry (id " << keep_from << ")\n";
  return 0;
}
