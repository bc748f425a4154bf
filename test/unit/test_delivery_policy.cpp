#include "core/delivery_policy.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

using namespace pg_outbox::core;

namespace {

void expect_outcome(long status, Verdict v, DeadReason r) {
  Outcome o = classify_http_status(status);
  EXPECT_EQ(o.verdict, v) << status;
  EXPECT_EQ(o.reason, r) << status;
}

}  // namespace

TEST(ReasonCode, Names) {
  EXPECT_STREQ(reason_code(DeadReason::None), "");
  EXPECT_STREQ(reason_code(DeadReason::HttpClientError), "HTTP_CLIENT_ERROR");
  EXPECT_STREQ(reason_code(DeadReason::PayloadTooLarge), "PAYLOAD_TOO_LARGE");
  EXPECT_STREQ(reason_code(DeadReason::RetryExhausted), "RETRY_EXHAUSTED");
  EXPECT_STREQ(reason_code(DeadReason::EndpointDropped), "ENDPOINT_DROPPED");
  EXPECT_STREQ(reason_code(DeadReason::InvalidMessage), "INVALID_MESSAGE");
  EXPECT_STREQ(reason_code(DeadReason::RejectedByConsumer), "REJECTED_BY_CONSUMER");
}

TEST(ClassifyHttpStatus, SuccessIsEvery2xx) {
  for (long s : {200L, 201L, 202L, 204L, 299L}) expect_outcome(s, Verdict::Sent, DeadReason::None);
}

TEST(ClassifyHttpStatus, RetryableStatuses) {
  for (long s : {408L, 425L, 429L, 500L, 502L, 503L, 504L, 599L}) expect_outcome(s, Verdict::Retry, DeadReason::None);
}

TEST(ClassifyHttpStatus, PayloadTooLarge) { expect_outcome(413, Verdict::Dead, DeadReason::PayloadTooLarge); }

TEST(ClassifyHttpStatus, EverythingElseIsAClientError) {
  for (long s : {100L,
                 101L,
                 199L,
                 300L,
                 301L,
                 302L,
                 304L,
                 307L,
                 308L,
                 399L,
                 400L,
                 401L,
                 403L,
                 404L,
                 405L,
                 409L,
                 410L,
                 411L,
                 414L,
                 415L,
                 422L,
                 424L,
                 426L,
                 428L,
                 431L,
                 451L,
                 499L,
                 0L,
                 -1L,
                 99L,
                 600L,
                 999L,
                 std::numeric_limits<long>::max(),
                 std::numeric_limits<long>::min()})
    expect_outcome(s, Verdict::Dead, DeadReason::HttpClientError);
}

TEST(ClassifyTransportError, Retries) {
  EXPECT_EQ(classify_transport_error().verdict, Verdict::Retry);
  EXPECT_EQ(classify_transport_error().reason, DeadReason::None);
}

TEST(RetryAfter, HonouredOnlyFor429And503) {
  EXPECT_TRUE(honours_retry_after(429));
  EXPECT_TRUE(honours_retry_after(503));
  for (long s : {200L, 408L, 425L, 500L, 502L, 504L, 301L}) EXPECT_FALSE(honours_retry_after(s)) << s;
}

TEST(RetryAfter, DeltaSeconds) {
  EXPECT_EQ(parse_retry_after_ms("0", 0), 0);
  EXPECT_EQ(parse_retry_after_ms("120", 5), 120000);
  EXPECT_EQ(parse_retry_after_ms("  7\t", 5), 7000);
  EXPECT_EQ(parse_retry_after_ms("007", 5), 7000);
  // Huge values saturate rather than overflow (and settle_attempt caps them).
  auto huge = parse_retry_after_ms("99999999999999999999999999", 0);
  ASSERT_TRUE(huge);
  EXPECT_GT(*huge, int64_t(1) << 50);
}

TEST(RetryAfter, HttpDate) {
  const int64_t now_ms = 784111777LL * 1000;  // Sun, 06 Nov 1994 08:49:37 GMT
  EXPECT_EQ(parse_retry_after_ms("Sun, 06 Nov 1994 08:50:37 GMT", now_ms), 60000);
  EXPECT_EQ(parse_retry_after_ms("Sun, 06 Nov 1994 08:50:37 GMT", now_ms + 250), 59750);
  EXPECT_EQ(parse_retry_after_ms("Sunday, 06-Nov-94 08:49:47 GMT", now_ms), 10000);
  EXPECT_EQ(parse_retry_after_ms("Sun Nov  6 08:49:38 1994", now_ms), 1000);
  EXPECT_EQ(parse_retry_after_ms(" Sun, 06 Nov 1994 08:50:37 GMT ", now_ms), 60000);
  // Dates in the past (or now) mean "retry at once".
  EXPECT_EQ(parse_retry_after_ms("Sun, 06 Nov 1994 08:49:37 GMT", now_ms), 0);
  EXPECT_EQ(parse_retry_after_ms("Thu, 01 Jan 1970 00:00:00 GMT", now_ms), 0);
}

TEST(RetryAfter, GarbageIsNullopt) {
  for (const char* bad : {"", "   ", "-1", "+5", "1.5", "1e3", "soon", "12 s", "0x10", "Sun, 06 Nov 1994 08:49:37",
                          "Sun, 31 Feb 1994 08:49:37 GMT"})
    EXPECT_FALSE(parse_retry_after_ms(bad, 0).has_value()) << bad;
}

TEST(Backoff, ConstructorValidates) {
  EXPECT_THROW(BackoffPolicy(0, 1000), std::invalid_argument);
  EXPECT_THROW(BackoffPolicy(-5, 1000), std::invalid_argument);
  EXPECT_THROW(BackoffPolicy(1000, 0), std::invalid_argument);
  BackoffPolicy raised(1000, 10);  // max below base is raised to base
  EXPECT_EQ(raised.max_ms(), 1000);
  EXPECT_EQ(raised.delay_ms(5, 0.999), 999);
}

TEST(Backoff, EqualJitterBoundsDoubleUpToTheCap) {
  BackoffPolicy p(1000, 3600000);
  // unit_random = 0 gives half the ceiling; just below 1 gives just below the ceiling.
  EXPECT_EQ(p.delay_ms(1, 0.0), 500);
  EXPECT_EQ(p.delay_ms(1, 0.5), 750);
  EXPECT_EQ(p.delay_ms(1, 0.999999), 999);
  EXPECT_EQ(p.delay_ms(2, 0.0), 1000);
  EXPECT_EQ(p.delay_ms(3, 0.0), 2000);
  EXPECT_EQ(p.delay_ms(4, 0.5), 6000);
  EXPECT_EQ(p.delay_ms(12, 0.0), 1024000);
  // 1000 * 2^12 = 4096000 > 3600000: capped.
  EXPECT_EQ(p.delay_ms(13, 0.0), 1800000);
  EXPECT_EQ(p.delay_ms(13, 0.5), 2700000);
  EXPECT_EQ(p.delay_ms(1000, 0.0), 1800000);
  EXPECT_EQ(p.delay_ms(std::numeric_limits<int>::max(), 0.999999), 3599998);
}

TEST(Backoff, AlwaysWithinHalfCeilingAndCeiling) {
  BackoffPolicy p(250, 60000);
  for (int n = 1; n <= 40; ++n) {
    int64_t ceiling = std::min<int64_t>(60000, n > 20 ? 60000 : 250LL << (n - 1));
    for (double r : {0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.999999}) {
      int64_t d = p.delay_ms(n, r);
      EXPECT_GE(d, ceiling / 2) << n << " " << r;
      EXPECT_LE(d, ceiling) << n << " " << r;
    }
  }
}

TEST(Backoff, OddInputsAreClamped) {
  BackoffPolicy p(1000, 60000);
  EXPECT_EQ(p.delay_ms(0, 0.0), 500);  // attempts < 1 behaves as 1
  EXPECT_EQ(p.delay_ms(-7, 0.0), 500);
  EXPECT_EQ(p.delay_ms(1, -3.0), 500);  // random below 0 -> 0
  EXPECT_EQ(p.delay_ms(1, 1.0), 999);   // random at or above 1 -> just below 1
  EXPECT_EQ(p.delay_ms(1, 42.0), 999);
  EXPECT_EQ(p.delay_ms(1, std::nan("")), 500);
  // A tiny base never yields a zero delay.
  BackoffPolicy tiny(1, 1);
  EXPECT_EQ(tiny.delay_ms(1, 0.0), 1);
  EXPECT_EQ(tiny.delay_ms(50, 0.999), 1);
  // The largest possible cap does not overflow.
  const int64_t big = std::numeric_limits<int64_t>::max();
  BackoffPolicy huge(big / 3, big);
  EXPECT_EQ(huge.delay_ms(100, 0.0), big - big / 2);
}

TEST(Settle, SentAndDeadPassThrough) {
  BackoffPolicy p(1000, 60000);
  Settlement s = settle_attempt({Verdict::Sent, DeadReason::None}, 10, 10, p, 5000, 0.5);
  EXPECT_EQ(s.verdict, Verdict::Sent);
  EXPECT_EQ(s.reason, DeadReason::None);
  EXPECT_EQ(s.retry_delay_ms, 0);
  s = settle_attempt({Verdict::Dead, DeadReason::PayloadTooLarge}, 1, 10, p, std::nullopt, 0.5);
  EXPECT_EQ(s.verdict, Verdict::Dead);
  EXPECT_EQ(s.reason, DeadReason::PayloadTooLarge);
  s = settle_attempt(classify_http_status(404), 1, 10, p, std::nullopt, 0.5);
  EXPECT_EQ(s.verdict, Verdict::Dead);
  EXPECT_EQ(s.reason, DeadReason::HttpClientError);
}

TEST(Settle, RetryUsesBackoffUntilAttemptsRunOut) {
  BackoffPolicy p(1000, 60000);
  const Outcome retry = classify_http_status(500);
  for (int n = 1; n < 5; ++n) {
    Settlement s = settle_attempt(retry, n, 5, p, std::nullopt, 0.0);
    EXPECT_EQ(s.verdict, Verdict::Retry) << n;
    EXPECT_EQ(s.reason, DeadReason::None);
    EXPECT_EQ(s.retry_delay_ms, p.delay_ms(n, 0.0)) << n;
  }
  Settlement last = settle_attempt(retry, 5, 5, p, std::nullopt, 0.0);
  EXPECT_EQ(last.verdict, Verdict::Dead);
  EXPECT_EQ(last.reason, DeadReason::RetryExhausted);
  EXPECT_EQ(settle_attempt(retry, 6, 5, p, std::nullopt, 0.0).reason, DeadReason::RetryExhausted);
  // max_attempts below 1 behaves as 1: the first retryable failure is final.
  EXPECT_EQ(settle_attempt(retry, 1, 0, p, std::nullopt, 0.0).reason, DeadReason::RetryExhausted);
  EXPECT_EQ(settle_attempt(classify_transport_error(), 1, 1, p, std::nullopt, 0.0).verdict, Verdict::Dead);
}

TEST(Settle, RetryAfterIsUsedAndCapped) {
  BackoffPolicy p(1000, 60000);
  const Outcome retry = classify_http_status(429);
  EXPECT_EQ(settle_attempt(retry, 1, 10, p, 30000, 0.9).retry_delay_ms, 30000);
  EXPECT_EQ(settle_attempt(retry, 1, 10, p, 0, 0.9).retry_delay_ms, 0);
  EXPECT_EQ(settle_attempt(retry, 1, 10, p, 3600000, 0.9).retry_delay_ms, 60000);
  EXPECT_EQ(settle_attempt(retry, 1, 10, p, -5, 0.9).retry_delay_ms, 0);
  // Retry-After does not rescue a message whose attempts are used up.
  EXPECT_EQ(settle_attempt(retry, 10, 10, p, 1000, 0.9).verdict, Verdict::Dead);
}
