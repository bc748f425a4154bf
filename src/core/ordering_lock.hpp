// The lock that puts one ordering key's commits in order (docs/delivery.md, Ordering). Every
// party that decides who comes next in a key (a producer's commit, the worker's settle,
// an operator's DELETE) takes the same transaction-level advisory lock, one of
// kOrderingLocks named by a hash of the endpoint and the key. Keys that share a lock
// only wait for each other a little longer (it is held from a commit's ordering step to
// the commit's end); the lock never decides the order itself. A bounded number of
// locks keeps a transaction of 100,000 keys within PostgreSQL's lock table.
#pragma once

#include <cstdint>
#include <string_view>

namespace pg_outbox::core {

// The advisory lock's first key: keeps our locks apart from an application's own
// two-key advisory locks ("obxo").
constexpr int32_t kOrderingLockSpace = 0x6f62786f;

constexpr uint32_t kOrderingLocks = 1024;

// FNV-1a over the endpoint, a unit separator and the key: the separator keeps
// ("a", "bc") and ("ab", "c") apart. Stable across processes and releases, since the
// worker and every backend must agree on it.
inline uint32_t ordering_hash(std::string_view endpoint, std::string_view key) {
  uint32_t hash = 2166136261u;
  auto mix = [&hash](unsigned char byte) {
    hash ^= byte;
    hash *= 16777619u;
  };
  for (char c : endpoint) mix(static_cast<unsigned char>(c));
  mix(0x1f);
  for (char c : key) mix(static_cast<unsigned char>(c));
  return hash;
}

// The advisory lock's second key, 0 to kOrderingLocks - 1.
inline int32_t ordering_lock(std::string_view endpoint, std::string_view key) {
  return static_cast<int32_t>(ordering_hash(endpoint, key) % kOrderingLocks);
}

}  // namespace pg_outbox::core
