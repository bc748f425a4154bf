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
  // A wake within the same millisecond: the gap has not passed.
  EXPECT_FALSE(wakes.should_claim(true, false, clock.now_ms(), next_claim));
  EXPECT_EQ(next_claim, kStart + WakeCoalescer::kMinGapMs);
  clock.advance(WakeCoalescer::kMinGapMs);  // the gap is over: the deferred claim is due, woken or not
  EXPECT_TRUE(wakes.should_claim(false, false, clock.now_ms(), next_claim));
  EXPECT_TRUE(wakes.should_claim(true, false, clock.now_ms(), next_claim));
}

namespace {

// A claim that found work, then one `ms` later that found nothing: the gap is ms / 4.
void idle_for(WakeCoalescer& wakes, ManualClock& clock, int64_t ms) {
  wakes.claim_started(clock.now_ms());
  wakes.claim_finished(1);
  clock.advance(ms);
  wakes.claim_started(clock.now_ms());
  wakes.claim_finished(0);
}

}  // namespace

TEST(WakeCoalescer, ADeferredWakeNeverPostponesAnEarlierClaim) {
  ManualClock clock(kStart);
  WakeCoalescer wakes;
  idle_for(wakes, clock, 128);
  ASSERT_EQ(wakes.gap_ms(), 32);
  const int64_t last = clock.now_ms();
  clock.advance(5);
  int64_t next_claim = last + 10;  // a retry comes due then
  EXPECT_FALSE(wakes.should_claim(true, false, clock.now_ms(), next_claim));
  EXPECT_EQ(next_claim, last + 10);
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

// Nothing claimable (a paused endpoint's commits): each claim goes at the end of the gap,
// which grows by a quarter of the time since work was last found, up to 50 ms.
TEST(WakeCoalescer, ClaimsThatFindNothingWidenTheGapUpToFiftyMilliseconds) {
  ManualClock clock(kStart);
  WakeCoalescer wakes;
  wakes.claim_started(clock.now_ms());
  wakes.claim_finished(1);
  std::vector<int> gaps;
  int64_t widest_after_ms = -1;  // when the gap first reached its maximum
  for (int i = 0; i < 40; ++i) {
    clock.advance(wakes.gap_ms());
    wakes.claim_started(clock.now_ms());
    wakes.claim_finished(0);
    gaps.push_back(wakes.gap_ms());
    if (widest_after_ms < 0 && gaps.back() == WakeCoalescer::kMaxGapMs) widest_after_ms = clock.now_ms() - kStart;
  }
  EXPECT_TRUE(std::is_sorted(gaps.begin(), gaps.end()));
  EXPECT_EQ(gaps.front(), WakeCoalescer::kMinGapMs);
  EXPECT_EQ(gaps.back(), WakeCoalescer::kMaxGapMs);
  EXPECT_GE(widest_after_ms, 0);
  EXPECT_LE(widest_after_ms, 300) << "the gap reaches 50 ms within a few hundred ms of empty claims";
  wakes.claim_started(clock.now_ms());
  wakes.claim_finished(1);  // work found: back to the minimum
  EXPECT_EQ(wakes.gap_ms(), WakeCoalescer::kMinGapMs);
}

// A steady flow of commits: claims every millisecond or two, most of them empty (their
// wakes came for messages an earlier claim took). The gap stays at its minimum, so no
// message waits more than that for its claim. (Doubling the gap on every empty claim
// made 1 % of the messages at 1,000/s wait 16 to 50 ms.)
TEST(WakeCoalescer, AFlowOfMessagesKeepsTheMinimumGap) {
  ManualClock clock(kStart);
  WakeCoalescer wakes;
  std::mt19937_64 random(11);
  int64_t next_claim = kFar;
  int most = 0;
  int claims = 0;
  for (int i = 0; i < 10000; ++i) {
    clock.advance(std::uniform_int_distribution<int>(1, 2)(random));
    if (!wakes.should_claim(true, false, clock.now_ms(), next_claim) && clock.now_ms() < next_claim) continue;
    next_claim = kFar;
    wakes.claim_started(clock.now_ms());
    wakes.claim_finished(claims++ % 4 == 0 ? 1 : 0);  // three claims in four come back empty
    most = std::max(most, wakes.gap_ms());
  }
  EXPECT_EQ(most, WakeCoalescer::kMinGapMs);
}

TEST(WakeCoalescer, AWideGapDefersWakesLonger) {
  ManualClock clock(kStart);
  WakeCoalescer wakes;
  idle_for(wakes, clock, 1000);
  ASSERT_EQ(wakes.gap_ms(), 50);
  const int64_t last = clock.now_ms();
  clock.advance(49);
  int64_t next_claim = kFar;
  EXPECT_FALSE(wakes.should_claim(true, false, clock.now_ms(), next_claim));
  EXPECT_EQ(next_claim, last + 50);
  clock.advance(1);
  EXPECT_TRUE(wakes.should_claim(true, false, clock.now_ms(), next_claim));
}

// A claim that failed (claim_started without claim_finished) still counts as the last
// claim, one that found nothing.
TEST(WakeCoalescer, AFailedClaimStillCountsAsTheLastOne) {
  ManualClock clock(kStart);
  WakeCoalescer wakes;
  wakes.claim_started(clock.now_ms());
  wakes.claim_finished(1);
  clock.advance(16);
  wakes.claim_started(clock.now_ms());  // fails
  EXPECT_EQ(wakes.last_claim_ms(), kStart + 16);
  EXPECT_EQ(wakes.gap_ms(), 4);
  clock.advance(3);
  int64_t next_claim = kFar;
  EXPECT_FALSE(wakes.should_claim(true, false, clock.now_ms(), next_claim));
  EXPECT_EQ(next_claim, kStart + 20);
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
  EXPECT_EQ(next_claim, kStart + WakeCoalescer::kMinGapMs);
  wakes.claim_started(clock.now_ms());  // before the last work: the minimum gap
  wakes.claim_finished(0);
  EXPECT_EQ(wakes.gap_ms(), WakeCoalescer::kMinGapMs);
}

// The loop's decision as it was written inside the worker, against WakeCoalescer on a
// random run of wakes and claims.
TEST(WakeCoalescer, MatchesTheWorkersLoopOnARandomRun) {
  std::mt19937_64 random(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(random); };
  ManualClock clock(kStart);
  WakeCoalescer wakes;
  int64_t last_claim_ms_ = 0;
  int64_t last_work_ms_ = 0;
  auto wake_gap_ms = [&] {
    return static_cast<int>(
        std::clamp<int64_t>((last_claim_ms_ - last_work_ms_) / 4, WakeCoalescer::kMinGapMs, WakeCoalescer::kMaxGapMs));
  };
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
    if (woken && !more_due_ && now < last_claim_ms_ + wake_gap_ms()) {
      next_claim_ref = std::min(next_claim_ref, last_claim_ms_ + wake_gap_ms());
      woken = false;
    }
    const bool ref_claims = (woken || more_due_ || now >= next_claim_ref) && room;
    if (ref_claims) {
      if (last_work_ms_ == 0) last_work_ms_ = now;
      last_claim_ms_ = now;
      if (claimed > 0) last_work_ms_ = now;
    }

    const bool claims = wakes.should_claim(was_woken, more_due_, now, next_claim) && room;
    ASSERT_EQ(claims, ref_claims) << step;
    ASSERT_EQ(next_claim, next_claim_ref) << step;
    if (claims) {
      wakes.claim_started(now);
      wakes.claim_finished(claimed);
    }
    ASSERT_EQ(wakes.gap_ms(), wake_gap_ms()) << step;
    ASSERT_EQ(wakes.last_claim_ms(), last_claim_ms_) << step;
  }
}
