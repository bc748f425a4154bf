// BackoffPolicy as the one doubling formula: the retry delay's ceiling, parking, and
// the worker's pause after an error.
#include "core/delivery_policy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

using namespace pg_outbox::core;

namespace {

std::vector<int64_t> sequence(int64_t (*f)(int), int from, int to) {
  std::vector<int64_t> out;
  for (int n = from; n <= to; ++n) out.push_back(f(n));
  return out;
}

}  // namespace

TEST(BackoffCeiling, DoublesFromBaseUpToMax) {
  BackoffPolicy p(1000, 10000);
  std::vector<int64_t> got;
  for (int n = 1; n <= 7; ++n) got.push_back(p.ceiling_ms(n));
  EXPECT_EQ(got, (std::vector<int64_t>{1000, 2000, 4000, 8000, 10000, 10000, 10000}));
}

TEST(BackoffCeiling, AttemptsBelowOneCountAsOne) {
  BackoffPolicy p(300, 5000);
  EXPECT_EQ(p.ceiling_ms(0), 300);
  EXPECT_EQ(p.ceiling_ms(-7), 300);
  EXPECT_EQ(p.ceiling_ms(std::numeric_limits<int>::min()), 300);
}

TEST(BackoffCeiling, HugeAttemptsAndHugeMaximumDoNotOverflow) {
  BackoffPolicy p(1000, 3600000);
  EXPECT_EQ(p.ceiling_ms(std::numeric_limits<int>::max()), 3600000);
  const int64_t big = std::numeric_limits<int64_t>::max();
  BackoffPolicy q(1, big);
  EXPECT_EQ(q.ceiling_ms(std::numeric_limits<int>::max()), big);
  EXPECT_EQ(q.ceiling_ms(63), int64_t{1} << 62);
}

TEST(BackoffCeiling, MaxBelowBaseIsRaisedToBase) {
  BackoffPolicy p(1000, 10);
  EXPECT_EQ(p.ceiling_ms(1), 1000);
  EXPECT_EQ(p.ceiling_ms(9), 1000);
}

// delay_ms is the equal-jitter spread below ceiling_ms: [ceiling - ceiling/2, ceiling).
TEST(BackoffCeiling, DelayLiesInTheUpperHalfBelowTheCeiling) {
  for (auto [base, max] : {std::pair<int64_t, int64_t>{1000, 3600000}, {1, 1}, {3, 100}, {7, 7}}) {
    BackoffPolicy p(base, max);
    for (int n = 0; n <= 40; ++n) {
      const int64_t ceiling = p.ceiling_ms(n);
      const int64_t lower = ceiling - ceiling / 2;
      EXPECT_EQ(p.delay_ms(n, 0.0), lower) << base << " " << n;
      for (double r : {0.0, 0.25, 0.5, 0.999999}) {
        const int64_t d = p.delay_ms(n, r);
        EXPECT_GE(d, lower);
        EXPECT_LE(d, std::max<int64_t>(lower, ceiling - 1));
      }
    }
  }
}

TEST(ParkDelay, OneTwoFourEightThenTenSeconds) {
  EXPECT_EQ(sequence(park_delay_ms, 1, 6), (std::vector<int64_t>{1000, 2000, 4000, 8000, 10000, 10000}));
  EXPECT_EQ(park_backoff().base_ms(), kParkFirstMs);
  EXPECT_EQ(park_backoff().max_ms(), kParkMaxMs);
}

// The worker's parking today: the first parking waits 1 s, each further one twice the
// last, at most 10 s.
TEST(ParkDelay, EqualsTheDoublingOfThePreviousParking) {
  int64_t backoff = 0;
  for (int n = 1; n <= 100; ++n) {
    const bool fresh = backoff == 0;
    backoff = fresh ? 1000 : std::min<int64_t>(2 * backoff, 10000);
    EXPECT_EQ(park_delay_ms(n), backoff) << n;
  }
}

TEST(ErrorPause, TwoHundredMillisecondsDoublingToSixPointFourSeconds) {
  EXPECT_EQ(sequence(error_pause_ms, 1, 7), (std::vector<int64_t>{200, 400, 800, 1600, 3200, 6400, 6400}));
  EXPECT_EQ(error_pause_ms(0), 200);
  EXPECT_EQ(error_pause_ms(std::numeric_limits<int>::max()), 6400);
  EXPECT_EQ(error_pause_backoff().base_ms(), kErrorPauseFirstMs);
  EXPECT_EQ(error_pause_backoff().max_ms(), kErrorPauseMaxMs);
}

// The worker's error pause today: 100 << streak, the streak counting errors in a row and
// capped at 6.
TEST(ErrorPause, EqualsTheShiftOfTheCappedStreak) {
  int streak = 0;
  for (int errors = 1; errors <= 100; ++errors) {
    streak = std::min(streak + 1, 6);
    EXPECT_EQ(error_pause_ms(streak), 100 << streak) << errors;
    EXPECT_EQ(error_pause_ms(errors), 100 << streak) << errors;  // an uncapped streak: the same
  }
}
