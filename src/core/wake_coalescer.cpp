#include "core/wake_coalescer.hpp"

#include <algorithm>

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

bool WakeCoalescer::should_claim(bool woken, bool more_due, int64_t now_ms, int64_t& next_claim_ms) const {
  const int64_t gap_end = last_claim_ms_ + gap_ms();
  if (woken && !more_due && now_ms < gap_end) {
    next_claim_ms = std::min(next_claim_ms, gap_end);
    woken = false;
  }
  return woken || more_due || now_ms >= next_claim_ms;
}

int WakeCoalescer::gap_ms() const {
  // A clock set back makes the time without work negative: the minimum then.
  const int64_t without_work_ms = last_claim_ms_ - last_work_ms_;
  return static_cast<int>(std::clamp<int64_t>(without_work_ms / kIdleShare, kMinGapMs, kMaxGapMs));
}

void WakeCoalescer::claim_started(int64_t now_ms) {
  if (last_work_ms_ == 0) last_work_ms_ = now_ms;  // a worker starts at the minimum gap
  last_claim_ms_ = now_ms;
}

void WakeCoalescer::claim_finished(size_t claimed) {
  if (claimed > 0) last_work_ms_ = last_claim_ms_;
}

}  // namespace pg_outbox::core
