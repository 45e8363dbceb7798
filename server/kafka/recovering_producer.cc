#include "server/kafka/recovering_producer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace wal {

absl::StatusOr<std::unique_ptr<RecoveringProducer>> RecoveringProducer::Create(
    KafkaProperties properties, std::string name) {
  std::unique_ptr<RecoveringProducer> self(
      new RecoveringProducer(std::move(properties), std::move(name)));
  auto producer = Producer::Create(self->properties_, self->name_);
  if (!producer.ok()) return producer.status();
  self->current_ = std::move(*producer);
  return self;
}

RecoveringProducer::~RecoveringProducer() {
  std::lock_guard<std::mutex> lock(mu_);
  current_.reset();
  retired_.clear();
}

absl::StatusOr<Producer*> RecoveringProducer::Live() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!current_->fatal()) return current_.get();
  auto fresh = Producer::Create(properties_, absl::StrCat(name_, "-", replacements_ + 1));
  if (!fresh.ok()) return fresh.status();
  // Topic metadata is fetched on the first produce; no need to wait for it here.
  current_->Purge();
  spdlog::warn("replaced Kafka producer {} after a fatal error", current_->name());
  retired_.push_back(std::move(current_));
  current_ = std::move(*fresh);
  ++replacements_;
  return current_.get();
}

void RecoveringProducer::ReleaseDrained() {
  std::vector<std::unique_ptr<Producer>> drained;  // destroyed after the lock is released
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = retired_.begin(); it != retired_.end();) {
    if ((*it)->queue_length() == 0) {
      drained.push_back(std::move(*it));
      it = retired_.erase(it);
    } else {
      ++it;
    }
  }
}

Producer* RecoveringProducer::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_.get();
}

uint64_t RecoveringProducer::replacements() const {
  std::lock_guard<std::mutex> lock(mu_);
  return replacements_;
}

size_t RecoveringProducer::retired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return retired_.size();
}

}  // namespace wal
