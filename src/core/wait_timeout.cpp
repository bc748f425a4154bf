#include "core/wait_timeout.hpp"

#include <algorithm>

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

int wait_timeout_ms(const LoopState& state, int64_t now_ms) {
  if (now_ms < state.error_pause_until_ms) return static_cast<int>(state.error_pause_until_ms - now_ms);
  if (!state.ready || !state.enabled) return state.poll_interval_ms;
  if (state.more_due) return 0;
  int64_t until = std::min({state.next_claim_ms, state.next_housekeeping_ms, state.settle_at_ms, state.replays_at_ms});
  for (int64_t parked_until : state.parked_until_ms)
    if (parked_until > now_ms) until = std::min(until, parked_until);
  return static_cast<int>(std::clamp<int64_t>(until - now_ms, 0, state.poll_interval_ms));
}

}  // namespace pg_outbox::core
