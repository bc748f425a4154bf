// The per-endpoint circuit breaker. While a receiver is down, its messages must
// wait without spending attempts (or they would all end in the DLQ) and the worker
// must not hammer it (a retry storm). After `threshold` consecutive retryable
// failures the circuit opens; after a cool-down one probe message is let through;
// its success closes the circuit, its failure reopens it with a doubled cool-down
// (capped at max_ms).
//
//   Closed --threshold failures--> Open --cool-down over, probe claimed--> HalfOpen
//   HalfOpen --probe succeeds--> Closed      HalfOpen --probe fails--> Open (x2)
//
// Breaker is plain data so that the worker can persist it in outbox.endpoints and
// restore it after a restart; all functions here are pure state transitions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace pg_outbox::core {

enum class BreakerState { Closed, Open, HalfOpen };

// "closed", "open", "half_open" (the text stored in the endpoints table).
const char* breaker_state_name(BreakerState state);
// The inverse of breaker_state_name; nullopt for any other text.
std::optional<BreakerState> parse_breaker_state(std::string_view name);

struct Breaker {
  BreakerState state = BreakerState::Closed;
  int consecutive_failures = 0;
  int64_t open_until_ms = 0;  // unix ms; meaningful while Open
  int64_t cooldown_ms = 0;    // the current cool-down; 0 while Closed

  bool operator==(const Breaker& o) const {
    return state == o.state && consecutive_failures == o.consecutive_failures && open_until_ms == o.open_until_ms &&
           cooldown_ms == o.cooldown_ms;
  }
  bool operator!=(const Breaker& o) const { return !(*this == o); }
};

struct BreakerConfig {
  int threshold;    // consecutive retryable failures that open the circuit (< 1 counts as 1)
  int64_t base_ms;  // first cool-down
  int64_t max_ms;   // cap of the doubling cool-down
};

// What the worker may claim for the endpoint right now.
enum class Admission {
  Normal,     // claim as usual
  ProbeOnly,  // claim exactly one message, then call on_probe_claimed
  None        // claim nothing
};

// Closed -> Normal; Open before open_until -> None; Open at or after open_until
// -> ProbeOnly; HalfOpen -> None (the probe is still in flight).
Admission admission(const Breaker& breaker, int64_t now_ms);

// The worker claimed the probe: Open -> HalfOpen (no-op in other states).
void on_probe_claimed(Breaker& breaker);

enum class Transition { None, Opened, Closed, Reopened };

// The receiver answered with a non-retryable result (2xx, or a 4xx that
// dead-letters the message): it is alive, so failures reset to 0, and an Open or
// HalfOpen circuit closes (cool-down reset) -> Transition::Closed.
Transition record_success(Breaker& breaker, const BreakerConfig& config);

// A retryable failure (408/425/429/5xx, transport error).
//  Closed:   failures++; reaching threshold opens the circuit for base_ms -> Opened.
//  HalfOpen: the probe failed; cool-down doubles (capped at max_ms; base_ms if it
//            was 0), Open again until now + cool-down -> Reopened.
//  Open:     a late result of a message claimed before the circuit opened:
//            failures++ only -> None.
Transition record_retryable_failure(Breaker& breaker, const BreakerConfig& config, int64_t now_ms);

// Called on a breaker loaded from disk when the worker starts: a HalfOpen state
// means the worker that sent the probe died before recording its result, so the
// circuit becomes Open with open_until = now (one new probe may go at once).
void restore_after_restart(Breaker& breaker, int64_t now_ms);

// The probe ended without an answer of the receiver: it was not sendable (dead-lettered
// as invalid, too large, out of attempts) or was taken back before it started (its
// endpoint altered or paused, the lease). It said nothing about the receiver, so
// HalfOpen -> Open with open_until = now: the next message goes as the probe at once.
// A breaker is never left half-open without a probe in flight.
void on_probe_lost(Breaker& breaker, int64_t now_ms);

}  // namespace pg_outbox::core
