// What to do after one delivery attempt: classify the receiver's answer, compute
// the retry delay, and settle the message as sent, retried or dead. Pure functions
// of their arguments, so the worker's decisions can be tested without a server.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace pg_outbox::core {

enum class Verdict { Sent, Retry, Dead };

enum class DeadReason {
  None,
  HttpClientError,
  PayloadTooLarge,
  RetryExhausted,
  EndpointDropped,
  InvalidMessage,
  EgressDenied,
  RejectedByConsumer,  // a pull consumer's outbox.nack(..., permanent => true)
  AbortedByReceiver    // the answer carried "webhook-delivery: abort"
};

// The dlq.dead_letters.reason_code text: "HTTP_CLIENT_ERROR", "PAYLOAD_TOO_LARGE",
// "RETRY_EXHAUSTED", "ENDPOINT_DROPPED", "INVALID_MESSAGE", "EGRESS_DENIED",
// "REJECTED_BY_CONSUMER", "ABORTED_BY_RECEIVER"; "" for None.
const char* reason_code(DeadReason reason);

struct Outcome {
  Verdict verdict;
  DeadReason reason;
};

// 2xx -> Sent. 408 (request timeout), 425 (too early), 429 (too many requests)
// and 5xx -> Retry: the receiver may accept the same request later. 413 ->
// Dead/PayloadTooLarge. Everything else (1xx, 3xx since we do not follow
// redirects, other 4xx, values outside 100..599) -> Dead/HttpClientError: sending
// the same request again cannot succeed.
Outcome classify_http_status(long status);

// Connection refused, DNS failure, TLS failure, timeout, connection closed early:
// all transient from our point of view -> Retry.
Outcome classify_transport_error();

// Whether a Retry-After header on a response with this status is honoured. Only
// 429 and 503 give Retry-After the meaning "come back then" (RFC 9110 10.2.3,
// RFC 6585 4); on other statuses it is ignored.
bool honours_retry_after(long http_status);

// Parses a Retry-After value into a delay in milliseconds from now_unix_ms:
// delta-seconds ("120") or an HTTP-date (any form parse_http_date accepts).
// Surrounding spaces and tabs are ignored. A date in the past gives 0; a huge
// delta saturates instead of overflowing. Anything else (negative numbers,
// fractions, garbage) gives nullopt, and the caller falls back to backoff.
std::optional<int64_t> parse_retry_after_ms(std::string_view header_value, int64_t now_unix_ms);

// Exponential backoff with "equal jitter" (the formula docs/delivery.md documents, Retries and backoff):
//
//   ceiling(n) = min(max_ms, base_ms * 2^(n-1))        n = attempts made so far (>= 1)
//   delay(n)   = ceiling/2 + unit_random * ceiling/2   unit_random uniform in [0, 1)
//
// so the delay lies in [ceiling/2, ceiling): never less than half the ceiling, so
// retries never collapse to zero, yet spread out so that many messages failing
// together do not come back in lock-step. In integers the lower bound is rounded
// up, so a 1 ms ceiling still waits 1 ms. Doubling stops at max_ms, so any number
// of attempts is safe from overflow. A max_ms below base_ms is raised to base_ms.
class BackoffPolicy {
 public:
  // Throws std::invalid_argument unless base_ms >= 1 and max_ms >= 1.
  BackoffPolicy(int64_t base_ms, int64_t max_ms);

  // The un-jittered value, min(max_ms, base_ms * 2^(n-1)) for the n-th attempt (or
  // the n-th consecutive pause): the upper bound of delay_ms, and the whole delay where
  // no jitter is wanted (parking, the worker's pause after an error). attempts < 1 is
  // treated as 1.
  int64_t ceiling_ms(int attempts) const;

  // attempts_made < 1 is treated as 1; unit_random outside [0, 1) (or NaN) is
  // clamped into it.
  int64_t delay_ms(int attempts_made, double unit_random) const;

  int64_t base_ms() const { return base_ms_; }
  int64_t max_ms() const { return max_ms_; }

 private:
  int64_t base_ms_;
  int64_t max_ms_;
};

// The worker's two un-jittered pauses are this same doubling, without the jitter: there
// is one waiting thing (the worker itself, or one endpoint's write), nothing to spread.
//
// Parking: an endpoint whose results cannot be written alone (a lock held by someone
// else outlasts the short lock timeout), or whose NOTIFY round fails alone, is left out
// of the claims and tried again after 1 s, then 2, 4, 8, and 10 s for as long as it
// stays held up. A long-held lock costs the other endpoints one short failed write per
// 10 s; a released one is noticed soon.
constexpr int64_t kParkFirstMs = 1000;
constexpr int64_t kParkMaxMs = 10000;
BackoffPolicy park_backoff();
// How long the n-th consecutive parking of one endpoint lasts (n counts from 1 and
// starts again once the endpoint goes on: its results written, or its NOTIFY round
// committed): 1000, 2000, 4000, 8000, 10000, 10000... ms (< 1 is treated as 1).
int64_t park_delay_ms(int consecutive_parkings);

// The error pause: after an error of the worker's loop (the database refused a
// statement, disk full...) it rolls back and waits before the next round, 200 ms after
// the first error, doubling with each further error in a row up to 6.4 s: a passing
// hiccup costs little, a lasting failure is not retried in a tight loop that floods
// the log. streak counts the errors in a row including this one (>= 1; < 1 is treated
// as 1): 200, 400, 800, 1600, 3200, 6400, 6400... ms. A streak need not be capped by the
// caller (the doubling stops at the maximum), though capping it at 6 changes nothing.
constexpr int64_t kErrorPauseFirstMs = 200;
constexpr int64_t kErrorPauseMaxMs = 6400;
BackoffPolicy error_pause_backoff();
int64_t error_pause_ms(int error_streak);

struct Settlement {
  Verdict verdict;
  DeadReason reason;       // None unless verdict == Dead
  int64_t retry_delay_ms;  // only meaningful when verdict == Retry, else 0
};

// Settles one attempt. attempts_made counts this attempt (attempts are counted at
// claim time). Sent -> Sent. Dead -> Dead with its reason. Retry -> Dead/
// RetryExhausted once attempts_made >= max_attempts (max_attempts < 1 counts as
// 1), else Retry after retry_after_ms clamped to [0, backoff.max_ms()] when given,
// else after backoff.delay_ms(attempts_made, unit_random).
//
// The caller decides whether a Retry-After applies: it passes the parsed value
// only when honours_retry_after(status) is true, and nullopt otherwise.
Settlement settle_attempt(Outcome outcome, int attempts_made, int max_attempts, const BackoffPolicy& backoff,
                          std::optional<int64_t> retry_after_ms, double unit_random);

}  // namespace pg_outbox::core
