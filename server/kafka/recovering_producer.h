// A producer that recovers from fatal errors by being replaced. After a fatal error (the
// idempotent producer lost its sequence state, for example) a librdkafka producer produces
// nothing more; the writer, the meta store and the slot index store hold their producers through
// this wrapper and ask it for a live one before producing.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "server/kafka/client.h"
#include "server/kafka/producer.h"

namespace wal {

class RecoveringProducer {
 public:
  // A producer named `name` (replacements are named `name`-1, -2, ...).
  static absl::StatusOr<std::unique_ptr<RecoveringProducer>> Create(KafkaProperties properties,
                                                                    std::string name);
  // The current producer first (it flushes for a bounded time, then purges), then the ones it
  // replaced: every delivery handler hears back before its producer goes.
  ~RecoveringProducer();

  // The producer to use now: the current one, or, when it had a fatal error, a new one that
  // replaces it. The old one is purged at once (its records fail with _PURGE_*, so nothing it
  // held is sent after the fatal error) and kept until this wrapper goes (or ReleaseDrained), so
  // that a pointer taken from current() stays valid. Callers that must keep their records in
  // order across the switch produce under a lock of their own, as before.
  absl::StatusOr<Producer*> Live();
  // Destroys the replaced producers that have reported every record, so that a Kafka that keeps
  // breaking producers does not leave one more behind each time. Only for an owner that keeps
  // no pointer from current() or Live() across a replacement.
  void ReleaseDrained();
  Producer* current() const;
  uint64_t replacements() const;
  // Replaced producers still held.
  size_t retired() const;

 private:
  RecoveringProducer(KafkaProperties properties, std::string name)
      : properties_(std::move(properties)), name_(std::move(name)) {}

  const KafkaProperties properties_;
  const std::string name_;
  mutable std::mutex mu_;
  std::unique_ptr<Producer> current_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Producer>> retired_ ABSL_GUARDED_BY(mu_);
  uint64_t replacements_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace wal
