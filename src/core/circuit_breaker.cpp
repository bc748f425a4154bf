#include "core/circuit_breaker.hpp"

#include <algorithm>
#include <limits>

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

namespace {

// Failure counters only feed the threshold and the stats view; saturating keeps a
// very long outage from wrapping the counter back below the threshold.
void count_failure(Breaker& b) {
  if (b.consecutive_failures < std::numeric_limits<int>::max()) ++b.consecutive_failures;
}

void open(Breaker& b, int64_t cooldown_ms, int64_t now_ms) {
  cooldown_ms = std::max<int64_t>(cooldown_ms, 0);  // a misconfigured base must not overflow
  b.state = BreakerState::Open;
  b.cooldown_ms = cooldown_ms;
  b.open_until_ms = now_ms > std::numeric_limits<int64_t>::max() - cooldown_ms ? std::numeric_limits<int64_t>::max()
                                                                               : now_ms + cooldown_ms;
}

}  // namespace

const char* breaker_state_name(BreakerState state) {
  switch (state) {
    case BreakerState::Closed:
      return "closed";
    case BreakerState::Open:
      return "open";
    case BreakerState::HalfOpen:
      return "half_open";
  }
  return "closed";
}

std::optional<BreakerState> parse_breaker_state(std::string_view name) {
  if (name == "closed") return BreakerState::Closed;
  if (name == "open") return BreakerState::Open;
  if (name == "half_open") return BreakerState::HalfOpen;
  return std::nullopt;
}

Admission admission(const Breaker& breaker, int64_t now_ms) {
  switch (breaker.state) {
    case BreakerState::Closed:
      return Admission::Normal;
    case BreakerState::Open:
      return now_ms < breaker.open_until_ms ? Admission::None : Admission::ProbeOnly;
    case BreakerState::HalfOpen:
      return Admission::None;
  }
  return Admission::None;
}

void on_probe_claimed(Breaker& breaker) {
  if (breaker.state == BreakerState::Open) breaker.state = BreakerState::HalfOpen;
}

Transition record_success(Breaker& breaker, const BreakerConfig& /*config*/) {
  breaker.consecutive_failures = 0;
  if (breaker.state == BreakerState::Closed) return Transition::None;
  breaker.state = BreakerState::Closed;
  breaker.cooldown_ms = 0;
  breaker.open_until_ms = 0;
  return Transition::Closed;
}

Transition record_retryable_failure(Breaker& breaker, const BreakerConfig& config, int64_t now_ms) {
  count_failure(breaker);
  switch (breaker.state) {
    case BreakerState::Closed:
      if (breaker.consecutive_failures < std::max(config.threshold, 1)) return Transition::None;
      open(breaker, std::min(config.base_ms, config.max_ms), now_ms);
      return Transition::Opened;
    case BreakerState::HalfOpen: {
      int64_t next = breaker.cooldown_ms <= 0                  ? config.base_ms
                     : breaker.cooldown_ms > config.max_ms / 2 ? config.max_ms
                                                               : breaker.cooldown_ms * 2;
      open(breaker, std::min(next, config.max_ms), now_ms);
      return Transition::Reopened;
    }
    case BreakerState::Open:
      return Transition::None;
  }
  return Transition::None;
}

void restore_after_restart(Breaker& breaker, int64_t now_ms) { on_probe_lost(breaker, now_ms); }

void on_probe_lost(Breaker& breaker, int64_t now_ms) {
  if (breaker.state != BreakerState::HalfOpen) return;
  breaker.state = BreakerState::Open;
  breaker.open_until_ms = now_ms;
}

}  // namespace pg_outbox::core
