#include "core/wake_coalescer.hpp"

#include <algorithm>

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

bool WakeCoalescer::should_claim(bool woken, bool more_due, int64_t now_ms, int64_t& next_claim_ms) const {
  const int64_t gap_end = last_claim_ms_ + gap_ms_;
  if (woken && !more_due && now_ms < gap_end) {
    next_claim_ms = std::min(next_claim_ms, gap_end);
    woken = false;
  }
  return woken || more_due || now_ms >= next_claim_ms;
}

void WakeCoalescer::claim_started(int64_t now_ms) { last_claim_ms_ = now_ms; }

void WakeCoalescer::claim_finished(size_t claimed) {
  gap_ms_ = claimed > 0 ? kMinGapMs : std::min(2 * gap_ms_, kMaxGapMs);
}

}  // namespace pg_outbox::core
