// How long a claimed message may wait for its request to start. A request waits in the
// delivery thread's queue (behind a slow endpoint, or its endpoint's concurrency window)
// at most pg_outbox.lease: it is better given back, its attempt uncounted, and claimed
// afresh than sent minutes late (with a signature timestamp minutes old). A request that
// has started is bounded by its own timeout instead.
#pragma once

#include <cstdint>

namespace pg_outbox::core {

// Whether a request claimed at claimed_ms has waited past its lease of lease_s seconds
// at now_ms: claimed strictly before now - lease (a request claimed exactly one lease
// ago is still within it).
inline bool lease_expired(int64_t claimed_ms, int64_t now_ms, int lease_s) {
  return claimed_ms < now_ms - 1000LL * lease_s;
}

}  // namespace pg_outbox::core
