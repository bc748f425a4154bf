#include "core/clock.hpp"
#include "core/response_judgement.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace pg_outbox::core;

namespace {

constexpr int64_t kNow = 1700000000000;  // 2023-11-14T22:13:20Z
const BackoffPolicy kBackoff(1000, 3600000);

ResponseFacts answer(long status, std::string_view body = {}, std::string_view retry_after = {}) {
  ResponseFacts r;
  r.status = status;
  r.body_head = body;
  r.retry_after = retry_after;
  return r;
}

ResponseFacts transport_failure(std::string_view error, long status = 0) {
  ResponseFacts r;
  r.transport_error = true;
  r.error = error;
  r.status = status;
  return r;
}

}  // namespace

TEST(JudgeResponse, SuccessIsSent) {
  ResponseJudgement j = judge_response(answer(204, "ok"), 1, 10, kBackoff, kNow, 0.5);
  EXPECT_EQ(j.settlement.verdict, Verdict::Sent);
  EXPECT_EQ(j.settlement.reason, DeadReason::None);
  EXPECT_EQ(j.breaker, BreakerInput::Success);
  EXPECT_EQ(j.http_status, 204);
  EXPECT_EQ(j.error, "HTTP 204");
  EXPECT_EQ(j.dead_letter_body, "");
  EXPECT_EQ(j.failure_body, "");  // the attempt log keeps no body of a delivery
}

TEST(JudgeResponse, ServerErrorIsRetriedByBackoff) {
  ResponseJudgement j = judge_response(answer(500, "oops"), 3, 10, kBackoff, kNow, 0.0);
  EXPECT_EQ(j.settlement.verdict, Verdict::Retry);
  EXPECT_EQ(j.settlement.retry_delay_ms, 2000);  // ceiling 4000, lower half
  EXPECT_EQ(j.breaker, BreakerInput::RetryableFailure);
  EXPECT_EQ(j.http_status, 500);
  EXPECT_EQ(j.error, "HTTP 500");
  EXPECT_EQ(j.dead_letter_body, "");  // kept only with a dead letter
  EXPECT_EQ(j.failure_body, "oops");  // ... but in the attempt log of every failure
  j = judge_response(answer(500), 3, 10, kBackoff, kNow, 0.5);
  EXPECT_EQ(j.settlement.retry_delay_ms, 3000);
}

TEST(JudgeResponse, TheLastAttemptDeadLettersYetTellsTheBreakerOfTheFailure) {
  ResponseJudgement j = judge_response(answer(503, "down"), 10, 10, kBackoff, kNow, 0.5);
  EXPECT_EQ(j.settlement.verdict, Verdict::Dead);
  EXPECT_EQ(j.settlement.reason, DeadReason::RetryExhausted);
  EXPECT_EQ(j.breaker, BreakerInput::RetryableFailure);
  EXPECT_EQ(j.http_status, 503);
  EXPECT_EQ(j.error, "HTTP 503");
  EXPECT_EQ(j.dead_letter_body, "down");
  EXPECT_EQ(j.failure_body, "down");
  // Attempts beyond the maximum, and a maximum below 1, dead-letter too.
  EXPECT_EQ(judge_response(answer(503), 12, 10, kBackoff, kNow, 0.5).settlement.reason, DeadReason::RetryExhausted);
  EXPECT_EQ(judge_response(answer(503), 1, 0, kBackoff, kNow, 0.5).settlement.reason, DeadReason::RetryExhausted);
}

TEST(JudgeResponse, ClientErrorsDeadLetterAndCountAsTheReceiverAlive) {
  ResponseJudgement j = judge_response(answer(404, "no such hook"), 1, 10, kBackoff, kNow, 0.5);
  EXPECT_EQ(j.settlement.verdict, Verdict::Dead);
  EXPECT_EQ(j.settlement.reason, DeadReason::HttpClientError);
  EXPECT_EQ(j.breaker, BreakerInput::Success);
  EXPECT_EQ(j.http_status, 404);
  EXPECT_EQ(j.error, "HTTP 404");
  EXPECT_EQ(j.dead_letter_body, "no such hook");
  j = judge_response(answer(413, "too big"), 1, 10, kBackoff, kNow, 0.5);
  EXPECT_EQ(j.settlement.reason, DeadReason::PayloadTooLarge);
  EXPECT_EQ(j.breaker, BreakerInput::Success);
  j = judge_response(answer(302), 1, 10, kBackoff, kNow, 0.5);
  EXPECT_EQ(j.settlement.reason, DeadReason::HttpClientError);
}

TEST(JudgeResponse, RetryAfterSecondsOn429And503) {
  for (long status : {429L, 503L}) {
    ResponseJudgement j = judge_response(answer(status, "", " 7 "), 1, 10, kBackoff, kNow, 0.99);
    EXPECT_EQ(j.settlement.verdict, Verdict::Retry) << status;
    EXPECT_EQ(j.settlement.retry_delay_ms, 7000) << status;
  }
}

TEST(JudgeResponse, RetryAfterIsIgnoredOnOtherStatuses) {
  ResponseJudgement j = judge_response(answer(500, "", "7"), 1, 10, kBackoff, kNow, 0.0);
  EXPECT_EQ(j.settlement.retry_delay_ms, 500);  // the backoff's
  j = judge_response(answer(408, "", "7"), 1, 10, kBackoff, kNow, 0.0);
  EXPECT_EQ(j.settlement.retry_delay_ms, 500);
}

TEST(JudgeResponse, RetryAfterDateCountsFromNow) {
  ManualClock clock(kNow);
  const char* date = "Tue, 14 Nov 2023 22:14:00 GMT";  // 40 s after kNow
  ResponseJudgement j = judge_response(answer(429, "", date), 1, 10, kBackoff, clock.now_ms(), 0.0);
  EXPECT_EQ(j.settlement.retry_delay_ms, 40000);
  clock.advance(30000);
  j = judge_response(answer(429, "", date), 1, 10, kBackoff, clock.now_ms(), 0.0);
  EXPECT_EQ(j.settlement.retry_delay_ms, 10000);
  clock.advance(60000);  // in the past: at once
  j = judge_response(answer(429, "", date), 1, 10, kBackoff, clock.now_ms(), 0.0);
  EXPECT_EQ(j.settlement.verdict, Verdict::Retry);
  EXPECT_EQ(j.settlement.retry_delay_ms, 0);
}

TEST(JudgeResponse, RetryAfterIsCappedAtTheBackoffMaximumAndGarbageFallsBack) {
  ResponseJudgement j = judge_response(answer(503, "", "999999999"), 1, 10, BackoffPolicy(1000, 60000), kNow, 0.0);
  EXPECT_EQ(j.settlement.retry_delay_ms, 60000);
  j = judge_response(answer(503, "", "soon"), 1, 10, kBackoff, kNow, 0.0);
  EXPECT_EQ(j.settlement.retry_delay_ms, 500);
  j = judge_response(answer(503, "", "-5"), 2, 10, kBackoff, kNow, 0.0);
  EXPECT_EQ(j.settlement.retry_delay_ms, 1000);
}

TEST(JudgeResponse, TransportErrorsRecordNoStatusAndIgnoreAPartialAnswer) {
  // The headers of a 503 with Retry-After came, then the connection broke.
  ResponseFacts r = transport_failure("Operation timed out after 5000 milliseconds", 503);
  r.retry_after = "60";
  r.body_head = "partial";
  ResponseJudgement j = judge_response(r, 2, 10, kBackoff, kNow, 0.0);
  EXPECT_EQ(j.settlement.verdict, Verdict::Retry);
  EXPECT_EQ(j.settlement.retry_delay_ms, 1000);  // the backoff's, not Retry-After's
  EXPECT_EQ(j.breaker, BreakerInput::RetryableFailure);
  EXPECT_EQ(j.http_status, 0);
  EXPECT_EQ(j.error, "Operation timed out after 5000 milliseconds");
  EXPECT_EQ(j.dead_letter_body, "");
  EXPECT_EQ(j.failure_body, "partial");
  j = judge_response(r, 10, 10, kBackoff, kNow, 0.0);  // out of attempts
  EXPECT_EQ(j.settlement.reason, DeadReason::RetryExhausted);
  EXPECT_EQ(j.http_status, 0);
  EXPECT_EQ(j.dead_letter_body, "partial");
}

TEST(JudgeResponse, EgressDeniedDeadLettersAtOnceWithoutTellingTheBreaker) {
  ResponseFacts r = transport_failure("address 10.0.0.5 refused by pg_outbox.egress_deny");
  r.egress_denied = true;
  r.body_head = "ignored";
  ResponseJudgement j = judge_response(r, 1, 10, kBackoff, kNow, 0.5);
  EXPECT_EQ(j.settlement.verdict, Verdict::Dead);
  EXPECT_EQ(j.settlement.reason, DeadReason::EgressDenied);
  EXPECT_EQ(j.settlement.retry_delay_ms, 0);
  EXPECT_EQ(j.breaker, BreakerInput::None);
  EXPECT_EQ(j.http_status, 0);
  EXPECT_EQ(j.error, "address 10.0.0.5 refused by pg_outbox.egress_deny");
  EXPECT_EQ(j.dead_letter_body, "");
  EXPECT_EQ(j.failure_body, "");
}

TEST(JudgeResponse, TheDeadLetterBodyIsSanitizedToOneKibibyte) {
  std::string body(3000, 'x');
  ResponseJudgement j = judge_response(answer(400, body), 1, 10, kBackoff, kNow, 0.5);
  EXPECT_EQ(j.dead_letter_body, std::string(kResponseBodyLimit, 'x'));
  j = judge_response(answer(503, body), 1, 10, kBackoff, kNow, 0.5);  // retried: the attempt log's copy
  EXPECT_EQ(j.failure_body, std::string(kResponseBodyLimit, 'x'));
  // A multi-byte character across the limit is left out whole, never cut.
  body = std::string(kResponseBodyLimit - 1, 'x') + "\xC3\xA9";
  j = judge_response(answer(400, body), 1, 10, kBackoff, kNow, 0.5);
  EXPECT_EQ(j.dead_letter_body, std::string(kResponseBodyLimit - 1, 'x'));
  // Invalid UTF-8 and NUL become U+FFFD.
  j = judge_response(answer(400, std::string_view("a\xFF"
                                                  "b\0c",
                                                  5)),
                     1, 10, kBackoff, kNow, 0.5);
  EXPECT_EQ(j.dead_letter_body,
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD"
            "c");
}

TEST(FeedBreaker, AppliesTheInput) {
  const BreakerConfig config{2, 1000, 8000};
  Breaker b;
  EXPECT_EQ(feed_breaker(BreakerInput::None, b, config, kNow), std::nullopt);
  EXPECT_EQ(b.consecutive_failures, 0);
  EXPECT_EQ(feed_breaker(BreakerInput::RetryableFailure, b, config, kNow), Transition::None);
  EXPECT_EQ(b.consecutive_failures, 1);
  EXPECT_EQ(feed_breaker(BreakerInput::RetryableFailure, b, config, kNow), Transition::Opened);
  EXPECT_EQ(b.state, BreakerState::Open);
  EXPECT_EQ(b.open_until_ms, kNow + 1000);
  EXPECT_EQ(feed_breaker(BreakerInput::None, b, config, kNow), std::nullopt);
  EXPECT_EQ(b.state, BreakerState::Open);
  EXPECT_EQ(feed_breaker(BreakerInput::Success, b, config, kNow), Transition::Closed);
  EXPECT_EQ(b.state, BreakerState::Closed);
  EXPECT_EQ(b.consecutive_failures, 0);
}

namespace {

ResponseFacts aborted(long status, std::string_view body = {}) {
  ResponseFacts r = answer(status, body);
  r.delivery_abort = true;
  return r;
}

}  // namespace

TEST(JudgeResponse, AbortHeaderDeadLettersWhateverTheStatus) {
  for (long status : {200L, 410L, 500L, 503L}) {
    ResponseJudgement j = judge_response(aborted(status, "no thanks"), 1, 10, kBackoff, kNow, 0.5);
    EXPECT_EQ(j.settlement.verdict, Verdict::Dead) << status;
    EXPECT_EQ(j.settlement.reason, DeadReason::AbortedByReceiver) << status;
    EXPECT_EQ(j.breaker, BreakerInput::Success) << status;  // it answered on purpose
    EXPECT_EQ(j.health, HealthInput::None) << status;
    EXPECT_FALSE(j.gone) << status;
    EXPECT_EQ(j.http_status, status);
    EXPECT_EQ(j.dead_letter_body, "no thanks");
  }
  EXPECT_STREQ(reason_code(DeadReason::AbortedByReceiver), "ABORTED_BY_RECEIVER");
}

TEST(JudgeResponse, AbortOnATransportErrorIsATransportError) {
  ResponseFacts r = transport_failure("Operation timed out", 200);
  r.delivery_abort = true;
  ResponseJudgement j = judge_response(r, 1, 10, kBackoff, kNow, 0.5);
  EXPECT_EQ(j.settlement.verdict, Verdict::Retry);
  EXPECT_EQ(j.health, HealthInput::Failed);
}

TEST(JudgeResponse, GoneKeepsTheMessagePendingAndPausesTheEndpoint) {
  // Even on its last attempt: a 410 is about the endpoint, not the message.
  ResponseJudgement j = judge_response(answer(410, "gone"), 10, 10, kBackoff, kNow, 0.5);
  EXPECT_TRUE(j.gone);
  EXPECT_EQ(j.settlement.verdict, Verdict::Retry);
  EXPECT_EQ(j.settlement.retry_delay_ms, 0);
  EXPECT_EQ(j.breaker, BreakerInput::Success);
  EXPECT_EQ(j.health, HealthInput::Failed);
  EXPECT_EQ(j.http_status, 410);
  EXPECT_EQ(j.dead_letter_body, "");
}

TEST(JudgeResponse, HealthSeesDeliveredOnlyFor2xx) {
  EXPECT_EQ(judge_response(answer(200), 1, 10, kBackoff, kNow, 0.5).health, HealthInput::Delivered);
  EXPECT_EQ(judge_response(answer(500), 1, 10, kBackoff, kNow, 0.5).health, HealthInput::Failed);
  EXPECT_EQ(judge_response(answer(404), 1, 10, kBackoff, kNow, 0.5).health, HealthInput::Failed);
  EXPECT_EQ(judge_response(answer(503), 10, 10, kBackoff, kNow, 0.5).health, HealthInput::Failed);
  EXPECT_EQ(judge_response(transport_failure("refused"), 1, 10, kBackoff, kNow, 0.5).health, HealthInput::Failed);
  ResponseFacts denied = transport_failure("egress denied");
  denied.egress_denied = true;
  EXPECT_EQ(judge_response(denied, 1, 10, kBackoff, kNow, 0.5).health, HealthInput::None);
}
