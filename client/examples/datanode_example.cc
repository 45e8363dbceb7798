// A datanode's cycle with walclient, for the regions it serves:
//   open:   create each region's namespace (idempotent), acquire it (fencing any datanode that
//           held the region before), then replay every region into its memtable on one
//           ReadMany stream, as a datanode does at start-up;
//   write:  append each mutation before applying it (synchronously, or asynchronously);
//   flush:  after a memtable is persisted elsewhere, truncate the region's log up to the first
//           entry that was not flushed;
//   reopen: replay again, which now yields only what was not flushed.
//
// Usage: datanode_example [walserver address] [region id...]   (default: region 1)
// Exits non-zero if the log does not behave as the example expects.
#include <condition_variable>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

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

// Replays the whole log of every region into its memtable, on one stream.
absl::Status ReplayAll(wal::Client& client, std::map<uint64_t, Region>& regions) {
  wal::ReadManyOptions read;
  for (auto& [id, region] : regions) {
    region.memtable.clear();
    read.namespaces.push_back({id, /*start_entry_id=*/0, /*limit=*/0});
  }
  absl::Status failed;
  absl::Status status = client.ReadMany(
      read,
      [&](wal::v1::Entry& entry) {
        regions[entry.namespace_id()].memtable[entry.entry_id()] = entry.data();
        return true;
      },
      [&](const wal::v1::ReadEnd& end) {
        // A region that cannot be replayed cannot open; the others could, but this example
        // stops at the first.
        if (end.code() == 0) return true;
        failed =
            absl::Status(static_cast<absl::StatusCode>(end.code()),
                         "region " + std::to_string(end.namespace_id()) + ": " + end.message());
        return false;
      });
  return failed.ok() ? status : failed;
}

// Appends one batch synchronously and three single entries asynchronously to `region`.
absl::Status Write(wal::Client& client, Region& region) {
  auto ids = client.Append(region.id, {"put a=1", "put b=2", "put c=3"});
  if (!ids.ok()) return ids.status();
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
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return pending == 0; });
  return async_error;
}

}  // namespace

int main(int argc, char** argv) {
  wal::ClientOptions options;
  options.target = argc > 1 ? argv[1] : "127.0.0.1:50051";
  options.timeout = std::chrono::seconds(10);
  std::map<uint64_t, Region> regions;
  for (int i = 2; i < argc; ++i) regions[std::stoull(argv[i])].id = std::stoull(argv[i]);
  if (regions.empty()) regions[1].id = 1;
  auto connected = wal::Client::Connect(options);
  if (!connected.ok()) return Fail("connect", connected.status());
  wal::Client& client = **connected;

  // Open: a namespace may exist from an earlier life of its region. Acquire before replaying:
  // from here on an earlier holder of the region can add nothing the replay would miss. The
  // client sends the epoch with every append to the region.
  std::map<uint64_t, std::string> opened;
  for (auto& [id, region] : regions) {
    auto created = client.CreateNamespace(id);
    if (!created.ok()) return Fail("create", created.status());
    auto acquired = client.AcquireNamespace(id);
    if (!acquired.ok()) return Fail("acquire", acquired.status());
    opened[id] = std::string(created->created ? "new" : "existing") + ", writer epoch " +
                 std::to_string(acquired->epoch);
  }
  if (absl::Status s = ReplayAll(client, regions); !s.ok()) return Fail("replay", s);
  for (auto& [id, region] : regions) {
    std::cout << "opened region " << id << " (" << opened[id] << "), replayed "
              << region.memtable.size() << " entries\n";
  }

  // Write, then flush: pretend everything but each region's newest entry reached durable
  // storage, and truncate the log before that entry.
  std::map<uint64_t, uint64_t> keep_from;
  for (auto& [id, region] : regions) {
    if (absl::Status s = Write(client, region); !s.ok()) return Fail("append", s);
    keep_from[id] = region.memtable.rbegin()->first;
    auto truncated = client.Truncate(id, keep_from[id]);
    if (!truncated.ok()) return Fail("truncate", truncated.status());
    std::cout << "flushed region " << id << "; its log now starts at entry "
              << truncated->first_entry_id() << "\n";
  }

  // Reopen: only the unflushed entries come back.
  if (absl::Status s = ReplayAll(client, regions); !s.ok()) return Fail("replay", s);
  for (auto& [id, region] : regions) {
    if (region.memtable.size() != 1 || region.memtable.begin()->first != keep_from[id]) {
      std::cerr << "datanode_example: expected region " << id << " to replay exactly entry "
                << keep_from[id] << ", got " << region.memtable.size() << " entries\n";
      return 1;
    }
    std::cout << "reopened region " << id << ", replayed 1 entry (id " << keep_from[id] << ")\n";
  }
  return 0;
}
