#include "core/response_judgement.hpp"

#include "core/string_object.hpp"

#include <string>

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

namespace {
constexpr long kGone = 410;
}  // namespace

ResponseJudgement judge_response(const ResponseFacts& response, int attempts_made, int max_attempts,
                                 const BackoffPolicy& backoff, int64_t now_ms, double unit_random) {
  ResponseJudgement judgement;
  if (response.egress_denied) {
    judgement.settlement = {Verdict::Dead, DeadReason::EgressDenied, 0};
    judgement.breaker = BreakerInput::None;
    judgement.http_status = 0;
    judgement.error = std::string(response.error);
    return judgement;
  }
  if (!response.transport_error && response.delivery_abort) {
    judgement.settlement = {Verdict::Dead, DeadReason::AbortedByReceiver, 0};
    judgement.breaker = BreakerInput::Success;
    judgement.health = HealthInput::None;
    judgement.http_status = static_cast<int32_t>(response.status);
    judgement.error = "HTTP " + std::to_string(response.status) + " with webhook-delivery: abort";
    judgement.dead_letter_body = sanitize_utf8(response.body_head, kResponseBodyLimit);
    return judgement;
  }
  if (!response.transport_error && response.status == kGone) {
    judgement.settlement = {Verdict::Retry, DeadReason::None, 0};
    judgement.breaker = BreakerInput::Success;
    judgement.health = HealthInput::Failed;
    judgement.gone = true;
    judgement.http_status = kGone;
    judgement.error = "HTTP 410: the receiver says the endpoint is gone";
    return judgement;
  }
  const Outcome outcome = response.transport_error ? classify_transport_error() : classify_http_status(response.status);
  std::optional<int64_t> retry_after;
  if (!response.transport_error && honours_retry_after(response.status) && !response.retry_after.empty())
    retry_after = parse_retry_after_ms(response.retry_after, now_ms);
  judgement.settlement = settle_attempt(outcome, attempts_made, max_attempts, backoff, retry_after, unit_random);
  // From the outcome, before running out of attempts turns a Retry into a dead letter.
  judgement.breaker = outcome.verdict == Verdict::Retry ? BreakerInput::RetryableFailure : BreakerInput::Success;
  judgement.health = judgement.settlement.verdict == Verdict::Sent ? HealthInput::Delivered : HealthInput::Failed;
  judgement.http_status = response.transport_error ? 0 : static_cast<int32_t>(response.status);
  judgement.error = response.transport_error ? std::string(response.error) : "HTTP " + std::to_string(response.status);
  if (judgement.settlement.verdict != Verdict::Sent)
    judgement.failure_body = sanitize_utf8(response.body_head, kResponseBodyLimit);
  if (judgement.settlement.verdict == Verdict::Dead) judgement.dead_letter_body = judgement.failure_body;
  return judgement;
}

std::optional<Transition> feed_breaker(BreakerInput input, Breaker& breaker, const BreakerConfig& config,
                                       int64_t now_ms) {
  switch (input) {
    case BreakerInput::None:
      return std::nullopt;
    case BreakerInput::Success:
      return record_success(breaker, config);
    case BreakerInput::RetryableFailure:
      return record_retryable_failure(breaker, config, now_ms);
  }
  return std::nullopt;
}

}  // namespace pg_outbox::core
