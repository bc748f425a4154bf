// Endpoints that retire themselves (docs/operations.md, Endpoints that retire themselves):
// an endpoint that has answered nothing but failures for pg_outbox.disable_after is
// paused, and so, at once, is one whose receiver answered 410 Gone.
//
// "Nothing but failures for D" means: the endpoint's first failure after its last
// success (or after it was created or resumed, if none since) happened at least D ago,
// and nothing succeeded since. That first failure is the streak's start; a success ends
// the streak. While the circuit breaker is open the endpoint is still failing (the
// probes fail), so the worker judges it also between answers. A paused endpoint is not
// judged.
//
// FailingStreak is plain data that the worker keeps in outbox.endpoints.failing_since
// for its next start; it changes only when a streak starts or ends, not per message.
#pragma once

#include <cstdint>
#include <optional>

namespace pg_outbox::core {

// What one answer tells about the endpoint's health.
enum class HealthInput {
  None,       // nothing: the receiver was never asked, or it aborted this one message
  Delivered,  // a 2xx: the endpoint works
  Failed,     // a retryable failure, a status that dead-letters the message, or 410
};

struct FailingStreak {
  int64_t since_ms = 0;  // unix ms of the streak's first failure; 0: not failing
};

// Why the worker paused an endpoint (the text in outbox.endpoints.paused_reason).
enum class PauseReason {
  Failing,  // nothing but failures for pg_outbox.disable_after
  Gone,     // the receiver answered 410 Gone
};

// "FAILING", "GONE".
const char* pause_reason_name(PauseReason reason);

// Applies one answer's input. Returns whether since_ms changed (a streak started or
// ended), which is when it must be saved.
bool record_health(FailingStreak& streak, HealthInput input, int64_t now_ms);

// An operator resumed the endpoint at resumed_ms (or created it then): failures before
// that are forgotten. Returns whether since_ms changed.
bool forget_failures_before(FailingStreak& streak, int64_t resumed_ms);

// Whether the streak has lasted disable_after_ms by now_ms (never when disable_after_ms
// is 0 or less, or when not failing).
bool failing_long_enough(const FailingStreak& streak, int64_t disable_after_ms, int64_t now_ms);

}  // namespace pg_outbox::core
