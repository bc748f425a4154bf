// The failing streak that retires an endpoint after pg_outbox.disable_after of nothing
// but failures (core/endpoint_retirement.hpp).
#include "core/endpoint_retirement.hpp"

#include <gtest/gtest.h>

using namespace pg_outbox::core;

namespace {
constexpr int64_t kNow = 1700000000000;
constexpr int64_t kDay = 86400000;
}  // namespace

TEST(FailingStreak, StartsAtTheFirstFailureOnly) {
  FailingStreak s;
  EXPECT_TRUE(record_health(s, HealthInput::Failed, kNow));
  EXPECT_EQ(s.since_ms, kNow);
  EXPECT_FALSE(record_health(s, HealthInput::Failed, kNow + 1000));  // no write per failure
  EXPECT_EQ(s.since_ms, kNow);
  EXPECT_FALSE(record_health(s, HealthInput::None, kNow + 2000));
  EXPECT_EQ(s.since_ms, kNow);
}

TEST(FailingStreak, ASuccessEndsIt) {
  FailingStreak s;
  EXPECT_FALSE(record_health(s, HealthInput::Delivered, kNow));  // nothing to save
  record_health(s, HealthInput::Failed, kNow);
  EXPECT_TRUE(record_health(s, HealthInput::Delivered, kNow + 1));
  EXPECT_EQ(s.since_ms, 0);
  EXPECT_FALSE(failing_long_enough(s, 1, kNow + kDay));
  record_health(s, HealthInput::Failed, kNow + 5);
  EXPECT_EQ(s.since_ms, kNow + 5);  // a new streak starts afresh
}

TEST(FailingStreak, LongEnoughAfterDisableAfter) {
  FailingStreak s;
  record_health(s, HealthInput::Failed, kNow);
  EXPECT_FALSE(failing_long_enough(s, 5 * kDay, kNow + 5 * kDay - 1));
  EXPECT_TRUE(failing_long_enough(s, 5 * kDay, kNow + 5 * kDay));
  EXPECT_FALSE(failing_long_enough(s, 0, kNow + 50 * kDay));  // 0: never
  EXPECT_FALSE(failing_long_enough(FailingStreak{}, 1, kNow));
}

TEST(FailingStreak, AResumeForgetsFailuresBeforeIt) {
  FailingStreak s;
  record_health(s, HealthInput::Failed, kNow);
  EXPECT_FALSE(forget_failures_before(s, kNow));  // a failure at the resume's moment stays
  EXPECT_TRUE(forget_failures_before(s, kNow + 1));
  EXPECT_EQ(s.since_ms, 0);
  EXPECT_FALSE(forget_failures_before(s, kNow + 2));
}

TEST(PauseReason, Names) {
  EXPECT_STREQ(pause_reason_name(PauseReason::Failing), "FAILING");
  EXPECT_STREQ(pause_reason_name(PauseReason::Gone), "GONE");
}
