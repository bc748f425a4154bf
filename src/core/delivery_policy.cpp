#include "core/delivery_policy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "core/http_date.hpp"
#include "core/cpp_only.hpp"

namespace pg_outbox::core {

const char* reason_code(DeadReason reason) {
  switch (reason) {
    case DeadReason::None:
      return "";
    case DeadReason::HttpClientError:
      return "HTTP_CLIENT_ERROR";
    case DeadReason::PayloadTooLarge:
      return "PAYLOAD_TOO_LARGE";
    case DeadReason::RetryExhausted:
      return "RETRY_EXHAUSTED";
    case DeadReason::EndpointDropped:
      return "ENDPOINT_DROPPED";
    case DeadReason::InvalidMessage:
      return "INVALID_MESSAGE";
    case DeadReason::EgressDenied:
      return "EGRESS_DENIED";
    case DeadReason::RejectedByConsumer:
      return "REJECTED_BY_CONSUMER";
    case DeadReason::AbortedByReceiver:
      return "ABORTED_BY_RECEIVER";
  }
  return "";
}

Outcome classify_http_status(long status) {
  if (status >= 200 && status <= 299) return {Verdict::Sent, DeadReason::None};
  if (status == 408 || status == 425 || status == 429 || (status >= 500 && status <= 599))
    return {Verdict::Retry, DeadReason::None};
  if (status == 413) return {Verdict::Dead, DeadReason::PayloadTooLarge};
  return {Verdict::Dead, DeadReason::HttpClientError};
}

Outcome classify_transport_error() { return {Verdict::Retry, DeadReason::None}; }

bool honours_retry_after(long http_status) { return http_status == 429 || http_status == 503; }

std::optional<int64_t> parse_retry_after_ms(std::string_view value, int64_t now_unix_ms) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  if (value.empty()) return std::nullopt;

  if (std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    // Saturate far beyond any sensible backoff_max instead of overflowing.
    constexpr int64_t kMaxSeconds = std::numeric_limits<int64_t>::max() / 1000;
    int64_t seconds = 0;
    for (char c : value) {
      seconds = seconds * 10 + (c - '0');
      if (seconds >= kMaxSeconds / 10) return kMaxSeconds * 1000;
    }
    return seconds * 1000;
  }
  auto when = parse_http_date(value);
  if (!when) return std::nullopt;
  int64_t when_ms = *when * 1000;
  return when_ms > now_unix_ms ? when_ms - now_unix_ms : 0;
}

BackoffPolicy::BackoffPolicy(int64_t base_ms, int64_t max_ms) : base_ms_(base_ms), max_ms_(max_ms) {
  if (base_ms < 1) throw std::invalid_argument("backoff base must be at least 1 millisecond");
  if (max_ms < 1) throw std::invalid_argument("backoff maximum must be at least 1 millisecond");
  max_ms_ = std::max(max_ms, base_ms);
}

int64_t BackoffPolicy::ceiling_ms(int attempts) const {
  // Double until the cap; stopping there is what keeps huge attempt counts safe.
  int64_t ceiling = base_ms_;
  for (int n = 1; n < attempts && ceiling < max_ms_; ++n) ceiling = ceiling > max_ms_ / 2 ? max_ms_ : ceiling * 2;
  return std::min(ceiling, max_ms_);
}

int64_t BackoffPolicy::delay_ms(int attempts_made, double unit_random) const {
  const int64_t ceiling = ceiling_ms(attempts_made);
  if (!(unit_random >= 0.0)) unit_random = 0.0;  // also catches NaN
  if (unit_random >= 1.0) unit_random = std::nextafter(1.0, 0.0);
  const int64_t lower = ceiling - ceiling / 2;  // ceiling/2 rounded up, never 0
  const int64_t spread = ceiling - lower;
  // The min() only matters for ceilings near INT64_MAX, where the double product
  // can round up past spread.
  return lower + std::min(spread, static_cast<int64_t>(unit_random * static_cast<double>(spread)));
}

BackoffPolicy park_backoff() { return BackoffPolicy(kParkFirstMs, kParkMaxMs); }

int64_t park_delay_ms(int consecutive_parkings) { return park_backoff().ceiling_ms(consecutive_parkings); }

BackoffPolicy error_pause_backoff() { return BackoffPolicy(kErrorPauseFirstMs, kErrorPauseMaxMs); }

int64_t error_pause_ms(int error_streak) { return error_pause_backoff().ceiling_ms(error_streak); }

Settlement settle_attempt(Outcome outcome, int attempts_made, int max_attempts, const BackoffPolicy& backoff,
                          std::optional<int64_t> retry_after_ms, double unit_random) {
  switch (outcome.verdict) {
    case Verdict::Sent:
      return {Verdict::Sent, DeadReason::None, 0};
    case Verdict::Dead:
      return {Verdict::Dead, outcome.reason, 0};
    case Verdict::Retry:
      break;
  }
  if (attempts_made >= std::max(max_attempts, 1)) return {Verdict::Dead, DeadReason::RetryExhausted, 0};
  int64_t delay = retry_after_ms ? std::clamp<int64_t>(*retry_after_ms, 0, backoff.max_ms())
                                 : backoff.delay_ms(attempts_made, unit_random);
  return {Verdict::Retry, DeadReason::None, delay};
}

}  // namespace pg_outbox::core
