#include "core/endpoint_retirement.hpp"

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

const char* pause_reason_name(PauseReason reason) {
  switch (reason) {
    case PauseReason::Failing:
      return "FAILING";
    case PauseReason::Gone:
      return "GONE";
  }
  return "";
}

bool record_health(FailingStreak& streak, HealthInput input, int64_t now_ms) {
  switch (input) {
    case HealthInput::None:
      return false;
    case HealthInput::Delivered:
      if (streak.since_ms == 0) return false;
      streak.since_ms = 0;
      return true;
    case HealthInput::Failed:
      if (streak.since_ms != 0) return false;
      // A clock at the epoch would read as "not failing": one millisecond later is as true.
      streak.since_ms = now_ms > 0 ? now_ms : 1;
      return true;
  }
  return false;
}

bool forget_failures_before(FailingStreak& streak, int64_t resumed_ms) {
  if (streak.since_ms == 0 || streak.since_ms >= resumed_ms) return false;
  streak.since_ms = 0;
  return true;
}

bool failing_long_enough(const FailingStreak& streak, int64_t disable_after_ms, int64_t now_ms) {
  return disable_after_ms > 0 && streak.since_ms != 0 && now_ms - streak.since_ms >= disable_after_ms;
}

}  // namespace pg_outbox::core
