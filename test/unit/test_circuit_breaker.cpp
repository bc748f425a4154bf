#include "core/circuit_breaker.hpp"

#include <gtest/gtest.h>

#include <limits>

using namespace pg_outbox::core;

namespace {

const BreakerConfig kConfig{3, 1000, 8000};

// A breaker driven to Open at time `now` by threshold failures.
Breaker opened_at(int64_t now) {
  Breaker b;
  for (int i = 0; i < kConfig.threshold; ++i) record_retryable_failure(b, kConfig, now);
  return b;
}

}  // namespace

TEST(BreakerState, NamesRoundTrip) {
  EXPECT_STREQ(breaker_state_name(BreakerState::Closed), "closed");
  EXPECT_STREQ(breaker_state_name(BreakerState::Open), "open");
  EXPECT_STREQ(breaker_state_name(BreakerState::HalfOpen), "half_open");
  for (auto s : {BreakerState::Closed, BreakerState::Open, BreakerState::HalfOpen})
    EXPECT_EQ(parse_breaker_state(breaker_state_name(s)), s);
  for (const char* bad : {"", "Closed", "OPEN", "half-open", "halfopen", "closed "})
    EXPECT_FALSE(parse_breaker_state(bad).has_value()) << bad;
}

TEST(Breaker, DefaultIsClosedAndAdmitsNormally) {
  Breaker b;
  EXPECT_EQ(b.state, BreakerState::Closed);
  EXPECT_EQ(b.consecutive_failures, 0);
  EXPECT_EQ(admission(b, 0), Admission::Normal);
  EXPECT_EQ(admission(b, std::numeric_limits<int64_t>::max()), Admission::Normal);
}

TEST(Breaker, OpensExactlyAtThreshold) {
  Breaker b;
  EXPECT_EQ(record_retryable_failure(b, kConfig, 100), Transition::None);
  EXPECT_EQ(record_retryable_failure(b, kConfig, 100), Transition::None);
  EXPECT_EQ(b.state, BreakerState::Closed);
  EXPECT_EQ(b.consecutive_failures, 2);
  EXPECT_EQ(record_retryable_failure(b, kConfig, 100), Transition::Opened);
  EXPECT_EQ(b.state, BreakerState::Open);
  EXPECT_EQ(b.consecutive_failures, 3);
  EXPECT_EQ(b.cooldown_ms, 1000);
  EXPECT_EQ(b.open_until_ms, 1100);
}

TEST(Breaker, SuccessBelowThresholdResetsTheCount) {
  Breaker b;
  record_retryable_failure(b, kConfig, 0);
  record_retryable_failure(b, kConfig, 0);
  EXPECT_EQ(record_success(b, kConfig), Transition::None);
  EXPECT_EQ(b.consecutive_failures, 0);
  EXPECT_EQ(b.state, BreakerState::Closed);
  // Two more failures do not open it: the count started again.
  record_retryable_failure(b, kConfig, 0);
  EXPECT_EQ(record_retryable_failure(b, kConfig, 0), Transition::None);
  EXPECT_EQ(b.state, BreakerState::Closed);
}

TEST(Breaker, ThresholdOfOneAndNonsenseThresholds) {
  for (int threshold : {1, 0, -4}) {
    Breaker b;
    EXPECT_EQ(record_retryable_failure(b, {threshold, 500, 1000}, 10), Transition::Opened) << threshold;
    EXPECT_EQ(b.open_until_ms, 510);
  }
}

TEST(Breaker, AdmissionWhileOpen) {
  Breaker b = opened_at(100);  // open until 1100
  EXPECT_EQ(admission(b, 100), Admission::None);
  EXPECT_EQ(admission(b, 1099), Admission::None);
  EXPECT_EQ(admission(b, 1100), Admission::ProbeOnly);
  EXPECT_EQ(admission(b, 99999), Admission::ProbeOnly);
}

TEST(Breaker, ProbeClaimedGoesHalfOpenAndAdmitsNothing) {
  Breaker b = opened_at(0);
  on_probe_claimed(b);
  EXPECT_EQ(b.state, BreakerState::HalfOpen);
  EXPECT_EQ(admission(b, 0), Admission::None);
  EXPECT_EQ(admission(b, 1000000), Admission::None);
}

TEST(Breaker, ProbeClaimedIsANoOpOutsideOpen) {
  Breaker closed;
  on_probe_claimed(closed);
  EXPECT_EQ(closed.state, BreakerState::Closed);
  Breaker half = opened_at(0);
  on_probe_claimed(half);
  on_probe_claimed(half);
  EXPECT_EQ(half.state, BreakerState::HalfOpen);
}

TEST(Breaker, ProbeSuccessCloses) {
  Breaker b = opened_at(0);
  on_probe_claimed(b);
  EXPECT_EQ(record_success(b, kConfig), Transition::Closed);
  EXPECT_EQ(b.state, BreakerState::Closed);
  EXPECT_EQ(b.consecutive_failures, 0);
  EXPECT_EQ(b.cooldown_ms, 0);
  EXPECT_EQ(admission(b, 0), Admission::Normal);
}

TEST(Breaker, SuccessWhileOpenCloses) {
  // A message claimed before the circuit opened comes back 2xx: the receiver is up.
  Breaker b = opened_at(0);
  EXPECT_EQ(record_success(b, kConfig), Transition::Closed);
  EXPECT_EQ(b.state, BreakerState::Closed);
  EXPECT_EQ(b.cooldown_ms, 0);
}

TEST(Breaker, LateFailureWhileOpenOnlyCounts) {
  Breaker b = opened_at(0);
  const Breaker before = b;
  EXPECT_EQ(record_retryable_failure(b, kConfig, 500), Transition::None);
  EXPECT_EQ(b.state, BreakerState::Open);
  EXPECT_EQ(b.consecutive_failures, before.consecutive_failures + 1);
  EXPECT_EQ(b.open_until_ms, before.open_until_ms);
  EXPECT_EQ(b.cooldown_ms, before.cooldown_ms);
}

TEST(Breaker, FailedProbesDoubleTheCooldownUpToTheCap) {
  Breaker b = opened_at(0);
  int64_t now = 0;
  const int64_t expected[] = {2000, 4000, 8000, 8000, 8000};
  for (int64_t cooldown : expected) {
    now = b.open_until_ms;
    ASSERT_EQ(admission(b, now), Admission::ProbeOnly);
    on_probe_claimed(b);
    now += 37;  // the probe's answer arrives a little later
    EXPECT_EQ(record_retryable_failure(b, kConfig, now), Transition::Reopened);
    EXPECT_EQ(b.state, BreakerState::Open);
    EXPECT_EQ(b.cooldown_ms, cooldown);
    EXPECT_EQ(b.open_until_ms, now + cooldown);
    EXPECT_EQ(admission(b, now + cooldown - 1), Admission::None);
  }
  // And a successful probe closes it from there.
  on_probe_claimed(b);
  EXPECT_EQ(record_success(b, kConfig), Transition::Closed);
  // Opening again starts over from the base cool-down.
  for (int i = 0; i < kConfig.threshold; ++i) record_retryable_failure(b, kConfig, 10);
  EXPECT_EQ(b.cooldown_ms, 1000);
}

TEST(Breaker, CooldownDoublingNeverOverflows) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  BreakerConfig config{1, big / 2 + 1, big};
  Breaker b;
  record_retryable_failure(b, config, 0);
  on_probe_claimed(b);
  EXPECT_EQ(record_retryable_failure(b, config, 5), Transition::Reopened);
  EXPECT_EQ(b.cooldown_ms, big);
  EXPECT_EQ(b.open_until_ms, big);  // saturated, not wrapped
  EXPECT_EQ(admission(b, big - 1), Admission::None);
}

TEST(Breaker, HalfOpenWithZeroCooldownUsesBase) {
  // E.g. a row edited by hand: half_open with no cool-down recorded.
  Breaker b{BreakerState::HalfOpen, 0, 0, 0};
  EXPECT_EQ(record_retryable_failure(b, kConfig, 50), Transition::Reopened);
  EXPECT_EQ(b.cooldown_ms, 1000);
  EXPECT_EQ(b.open_until_ms, 1050);
}

TEST(Breaker, BaseAboveMaxIsCapped) {
  Breaker b;
  record_retryable_failure(b, {1, 9000, 4000}, 0);
  EXPECT_EQ(b.cooldown_ms, 4000);
}

TEST(Breaker, FailureCounterSaturates) {
  Breaker b{BreakerState::Open, std::numeric_limits<int>::max(), 10, 1000};
  record_retryable_failure(b, kConfig, 0);
  EXPECT_EQ(b.consecutive_failures, std::numeric_limits<int>::max());
}

TEST(Breaker, RestoreAfterRestartReleasesAStuckProbe) {
  Breaker b = opened_at(0);
  on_probe_claimed(b);
  restore_after_restart(b, 123456);
  EXPECT_EQ(b.state, BreakerState::Open);
  EXPECT_EQ(b.open_until_ms, 123456);
  EXPECT_EQ(b.cooldown_ms, 1000);  // kept, so a failing probe still doubles it
  EXPECT_EQ(admission(b, 123456), Admission::ProbeOnly);
}

TEST(Breaker, RestoreAfterRestartLeavesOtherStatesAlone) {
  Breaker closed;
  closed.consecutive_failures = 2;
  restore_after_restart(closed, 99);
  EXPECT_EQ(closed.state, BreakerState::Closed);
  EXPECT_EQ(closed.consecutive_failures, 2);
  Breaker open = opened_at(0);
  restore_after_restart(open, 99);
  EXPECT_EQ(open.state, BreakerState::Open);
  EXPECT_EQ(open.open_until_ms, 1000);
}

TEST(Breaker, ALostProbeLetsTheNextOneGoAtOnce) {
  Breaker b;
  b.state = BreakerState::HalfOpen;
  b.cooldown_ms = 4000;
  on_probe_lost(b, 123456);
  EXPECT_EQ(b.state, BreakerState::Open);
  EXPECT_EQ(b.open_until_ms, 123456);
  EXPECT_EQ(b.cooldown_ms, 4000);  // not doubled: the probe said nothing about the receiver
  EXPECT_EQ(admission(b, 123456), Admission::ProbeOnly);
  Breaker closed;
  on_probe_lost(closed, 1);
  EXPECT_EQ(closed.state, BreakerState::Closed);
}
