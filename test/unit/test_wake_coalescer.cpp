#include "core/clock.hpp"
#include "core/wake_coalescer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <vector>

using namespace pg_outbox::core;

namespace {

constexpr int64_t kStart = 1700000000000;
constexpr int64_t kFar = std::numeric_limits<int64_t>::max();

}  // namespace

TEST(WakeCoalescer, TheFirstWakeClaims) {
  ManualClock clock(kStart);
  WakeCoalescer wakes;
  int64_t next_claim = kFar;
  EXPECT_TRUE(wakes.should_claim(true, false, clock.now_ms(), next_claim));
  EXPECT_EQ(next_claim, kFar);
  EXPECT_EQ(wakes.gap_ms(), WakeCoalescer::kMinGapMs);
}

TEST(WakeCoalescer, AWakeWithinTheGapIsDeferredToItsEnd) {
  ManualClock clock(kStart);
  WakeCoalescer wakes;
  int64_t next_claim = kFar;
  wakes.claim_started(clock.now_ms());
  wakes.claim_finished(10);
  clock.advance(1);
  EXPECT_FALSE(wakes.should_claim(true, false, clock.now_ms(), next_claim));
  EXPECT_EQ(next_claim, kStart + 2);
  clock.advance(1);  // the gap is over: the deferred claim is due, woken or not
  EXPECT_TRUE(wakes.should_claim(false, false, clock.now_ms(), next_claim));
  EXPECT_TRUE(wakes.should_claim(true, false, clock.now_ms(), next_claim));
}

TEST(WakeCoalescer, ADeferredWakeNeverPostponesAnEarlierClaim) {
  ManualClock clock(kStart);
  WakeCoalescer wakes;
  wakes.claim_started(clock.now_ms());
  wakes.claim_finished(0);                              // gap 4
  for (int i = 0; i < 3; ++i) wakes.claim_finished(0);  // gap 32
  ASSERT_EQ(wakes.gap_ms(), 32);
  clock.advance(5);
  int64_t next_claim = kStart + 10;  // a retry comes due then
  EXPECT_FALSE(wakes.should_claim(true, false, clock.now_ms(), next_claim));
  EXPECT_EQ(next_claim, kStart + 10);
  clock.advance(5);
  EXPECT_TRUE(wakes.should_claim(false, false, clock.now_ms(), next_claim));
}

TEST(WakeCoalescer, MoreDueClaimsAtOnce) {
  ManualClock clock(kStart);
  WakeCoalescer wakes;
  wakes.claim_started(clock.now_ms());
  wakes.claim_finished(500);
  int64_t next_claim = kFar;
  EXPECT_TRUE(wakes.should_claim(true, true, clock.now_ms(), next_claim));
  EXPECT_TRUE(wakes.should_claim(false, true, clock.now_ms(), next_claim));
  EXPECT_EQ(next_claim, kFar);  // nothing deferred
}

TEST(WakeCoalescer, WithoutAWakeOnlyADueTimeClaims) {
  ManualClock clock(kStart);
  WakeCoalescer wakes;
  int64_t next_claim = kStart + 100;
  EXPECT_FALSE(wakes.should_claim(false, false, clock.now_ms(), next_claim));
  clock.advance(99);
  EXPECT_FALSE(wakes.should_claim(false, false, clock.now_ms(), next_claim));
  clock.advance(1);
  EXPECT_TRUE(wakes.should_claim(false, false, clock.now_ms(), next_claim));
  EXPECT_EQ(next_claim, kStart + 100);
}

TEST(WakeCoalescer, EmptyClaimsWidenTheGapUpToFiftyMilliseconds) {
  WakeCoalescer wakes;
  std::vector<int> gaps;
  for (int i = 0; i < 7; ++i) {
    wakes.claim_finished(0);
    gaps.push_back(wakes.gap_ms());
  }
  EXPECT_EQ(gaps, (std::vector<int>{4, 8, 16, 32, 50, 50, 50}));
  wakes.claim_finished(1);  // work found: back to the minimum
  EXPECT_EQ(wakes.gap_ms(), WakeCoalescer::kMinGapMs);
}

TEST(WakeCoalescer, AWideGapDefersWakesLonger) {
  ManualClock clock(kStart);
  WakeCoalescer wakes;
  for (int i = 0; i < 10; ++i) wakes.claim_finished(0);  // 50 ms
  wakes.claim_started(clock.now_ms());
  wakes.claim_finished(0);
  clock.advance(49);
  int64_t next_claim = kFar;
  EXPECT_FALSE(wakes.should_claim(true, false, clock.now_ms(), next_claim));
  EXPECT_EQ(next_claim, kStart + 50);
  clock.advance(1);
  EXPECT_TRUE(wakes.should_claim(true, false, clock.now_ms(), next_claim));
}

// A claim that failed (claim_started without claim_finished) still counts as the last
// claim; its gap stays.
TEST(WakeCoalescer, AFailedClaimStillCountsAsTheLastOne) {
  ManualClock clock(kStart);
  WakeCoalescer wakes;
  wakes.claim_finished(0);  // gap 4
  wakes.claim_started(clock.now_ms());
  EXPECT_EQ(wakes.last_claim_ms(), kStart);
  EXPECT_EQ(wakes.gap_ms(), 4);
  clock.advance(3);
  int64_t next_claim = kFar;
  EXPECT_FALSE(wakes.should_claim(true, false, clock.now_ms(), next_claim));
  EXPECT_EQ(next_claim, kStart + 4);
}

// A wall clock set back: the wake is deferred to the end of the gap measured from the
// last claim; the claim follows at that time.
TEST(WakeCoalescer, AClockSetBackDefersToTheGapsEnd) {
  ManualClock clock(kStart);
  WakeCoalescer wakes;
  wakes.claim_started(clock.now_ms());
  wakes.claim_finished(1);
  clock.advance(-1000);
  int64_t next_claim = kFar;
  EXPECT_FALSE(wakes.should_claim(true, false, clock.now_ms(), next_claim));
  EXPECT_EQ(next_claim, kStart + 2);
}

// The loop's decision as it was written inside the worker, against WakeCoalescer on a
// random run of wakes and claims.
TEST(WakeCoalescer, MatchesTheWorkersLoopOnARandomRun) {
  std::mt19937_64 random(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(random); };
  ManualClock clock(kStart);
  WakeCoalescer wakes;
  int64_t last_claim_ms_ = 0;
  int wake_gap_ms_ = 2;
  int64_t next_claim_ref = kStart, next_claim = kStart;
  for (int step = 0; step < 20000; ++step) {
    clock.advance(pick(0, 12));
    const int64_t now = clock.now_ms();
    const bool was_woken = pick(0, 2) != 0;
    const bool more_due_ = pick(0, 5) == 0;
    const bool room = pick(0, 4) != 0;
    const size_t claimed = pick(0, 1) == 0 ? 0 : static_cast<size_t>(pick(1, 500));
    if (pick(0, 20) == 0) next_claim_ref = next_claim = now + pick(0, 1000);  // a claim set its next time

    bool woken = was_woken;
    if (woken && !more_due_ && now < last_claim_ms_ + wake_gap_ms_) {
      next_claim_ref = std::min(next_claim_ref, last_claim_ms_ + wake_gap_ms_);
      woken = false;
    }
    const bool ref_claims = (woken || more_due_ || now >= next_claim_ref) && room;
    if (ref_claims) {
      last_claim_ms_ = now;
      wake_gap_ms_ = claimed > 0 ? 2 : std::min(2 * wake_gap_ms_, 50);
    }

    const bool claims = wakes.should_claim(was_woken, more_due_, now, next_claim) && room;
    ASSERT_EQ(claims, ref_claims) << step;
    ASSERT_EQ(next_claim, next_claim_ref) << step;
    if (claims) {
      wakes.claim_started(now);
      wakes.claim_finished(claimed);
    }
    ASSERT_EQ(wakes.gap_ms(), wake_gap_ms_) << step;
    ASSERT_EQ(wakes.last_claim_ms(), last_claim_ms_) << step;
  }
}
