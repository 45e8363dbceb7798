// What every mode shares: the walserver, the two clients and one namespace per caller thread.
#include "bench/walbench/bench.h"

namespace walbench {

void Bench::Setup() {
  server.Start();
  client = Connect(server.address());
  unary = Connect(server.address(), /*stream=*/false);
  for (int t = 0; t < threads; ++t) {
    auto created = client->CreateNamespace(t + 1);
    Must(created.status(), "create");
    namespaces.push_back(created->ns);
  }
}

uint64_t ReadWhole(wal::Client& c, uint64_t ns) {
  wal::ReadOptions read;
  read.namespace_id = ns;
  uint64_t bytes = 0;
  Must(c.Read(read,
              [&](wal::v1::Entry& e) {
                bytes += e.data().size();
                return true;
              }),
       "read");
  return bytes;
}

}  // namespace walbench
