// The Kafka key that names a namespace in both kinds of topic: its data records in the slot
// topics and its records in the meta topic. 8 bytes, big-endian.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace wal {

inline constexpr size_t kNamespaceKeyBytes = 8;
// Never a namespace's id (requests with it are refused): the key of the records in the slots
// that are no namespace's, such as the one that begins an empty slot (WalCore::BeginEmptySlots).
inline constexpr uint64_t kNoNamespace = 0;

inline std::string EncodeKey(uint64_t namespace_id) {
  std::string key(kNamespaceKeyBytes, '\0');
  for (size_t i = 0; i < kNamespaceKeyBytes; ++i) {
    key[kNamespaceKeyBytes - 1 - i] = static_cast<char>((namespace_id >> (8 * i)) & 0xff);
  }
  return key;
}

// The namespace id of a key, or nullopt for a key that is not 8 bytes (a record walserver did not
// write, or a meta record of another kind such as the pruner's).
inline std::optional<uint64_t> DecodeKey(const void* key, size_t size) {
  if (key == nullptr || size != kNamespaceKeyBytes) return std::nullopt;
  const auto* bytes = static_cast<const unsigned char*>(key);
  uint64_t id = 0;
  for (size_t i = 0; i < kNamespaceKeyBytes; ++i) id = (id << 8) | bytes[i];
  return id;
}

}  // namespace wal
