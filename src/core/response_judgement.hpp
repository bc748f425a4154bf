// What one HTTP response means for its message and its endpoint: how the message is
// settled (sent, retried later, dead-lettered), what the endpoint's circuit breaker
// learns from it, and what is recorded with the message. Decided here from the
// response alone; the worker applies the result to its own state.
#pragma once

#include "core/circuit_breaker.hpp"
#include "core/delivery_policy.hpp"
#include "core/endpoint_retirement.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pg_outbox::core {

// dlq.dead_letters.response_body keeps the first 1 KiB of the receiver's answer: enough
// to read the receiver's complaint, small enough that a DLQ of many messages stays small.
constexpr size_t kResponseBodyLimit = 1024;

// What the worker reads of a finished request.
struct ResponseFacts {
  // No complete answer: connection refused, DNS, TLS, timeout, closed early. The status
  // may still be set (the headers came, then the transfer failed): it is ignored then.
  bool transport_error = false;
  // An egress rule refused the address: nothing was sent (the response's egress_denied
  // text is non-empty).
  bool egress_denied = false;
  long status = 0;               // of the final response
  std::string_view retry_after;  // its Retry-After value as received, empty if none
  std::string_view error;        // the transport's error text
  std::string_view body_head;    // the start of the response body, as received
  // The final response carried the header "webhook-delivery: abort".
  bool delivery_abort = false;
};

// What the endpoint's circuit breaker learns from the response.
enum class BreakerInput {
  None,              // nothing: the receiver was never asked (egress denied)
  Success,           // it answered, alive (2xx, or a 4xx that dead-letters the message)
  RetryableFailure,  // 408/425/429/5xx or a transport error, also on the last attempt
};

struct ResponseJudgement {
  Settlement settlement;
  BreakerInput breaker = BreakerInput::None;
  // What the endpoint's failing streak learns (core/endpoint_retirement.hpp).
  HealthInput health = HealthInput::None;
  // 410 Gone: the endpoint is paused at once, and the message stays pending (settlement
  // Retry with no delay) without its attempt counting: it goes when an operator resumes.
  bool gone = false;
  // The status recorded with the message: 0 for a transport error or egress denial
  // (whatever status arrived before a transfer failed is not an answer).
  int32_t http_status = 0;
  // The error recorded with a retried or dead message: "HTTP <status>" for an answer,
  // the transport's text for a transport error or an egress denial. (Set for a sent
  // message too; nothing records it.)
  std::string error;
  // The response body kept with a dead letter: the body head as valid UTF-8, at most
  // kResponseBodyLimit bytes. Empty unless dead-lettered for the receiver's answer or
  // a transport error (an egress denial keeps no body).
  std::string dead_letter_body;
  // The same head of the body for any attempt that failed (retried or dead-lettered, not
  // egress-denied), kept in the attempt log; empty for a delivered message.
  std::string failure_body;
};

// Judges one response to the attempt_made-th attempt of a message allowed max_attempts.
//  - Egress denied: dead (EgressDenied) at once, whatever the attempts; retrying cannot
//    change it (the operator changes the policy or the URL, then requeues). The breaker
//    learns nothing.
//  - "webhook-delivery: abort" on an answer: dead (AbortedByReceiver) at once, whatever
//    the status; the breaker sees a live receiver, the failing streak nothing.
//  - 410 Gone: gone (see ResponseJudgement::gone); the breaker sees a live receiver (it
//    answered), the failing streak a failure.
//  - Otherwise the answer is classified (classify_http_status, or classify_transport_error)
//    and settled by settle_attempt: a Retry-After is honoured on a 429 or 503 only (parsed
//    against now_ms: it may be an HTTP date), else the backoff with unit_random as the
//    jitter. The breaker sees a retryable failure whenever the answer is retryable, also
//    when the message is dead-lettered because its attempts ran out: the receiver failed.
//    The failing streak sees Delivered for a 2xx, Failed for anything else.
// unit_random (uniform in [0, 1)) is used only when the message is retried by backoff.
ResponseJudgement judge_response(const ResponseFacts& response, int attempts_made, int max_attempts,
                                 const BackoffPolicy& backoff, int64_t now_ms, double unit_random);

// Applies a breaker input: record_success or record_retryable_failure; nullopt (and the
// breaker untouched) for BreakerInput::None. A returned Transition::None still means the
// breaker changed (its failure count) and must be saved.
std::optional<Transition> feed_breaker(BreakerInput input, Breaker& breaker, const BreakerConfig& config,
                                       int64_t now_ms);

}  // namespace pg_outbox::core
