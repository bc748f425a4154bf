#include "core/clock.hpp"
#include "core/wait_timeout.hpp"

#include <gtest/gtest.h>

using namespace pg_outbox::core;

namespace {

constexpr int64_t kNow = 1700000000000;

LoopState idle() {
  LoopState s;
  s.ready = true;
  s.enabled = true;
  s.poll_interval_ms = 1000;
  s.next_claim_ms = kNow + 5000;
  s.next_housekeeping_ms = kNow + 5000;
  return s;
}

}  // namespace

TEST(WaitTimeout, AnErrorPauseIsWaitedOutWhateverElse) {
  LoopState s = idle();
  s.error_pause_until_ms = kNow + 6400;
  s.more_due = true;
  s.settle_at_ms = kNow;
  EXPECT_EQ(wait_timeout_ms(s, kNow), 6400);  // beyond the poll interval
  EXPECT_EQ(wait_timeout_ms(s, kNow + 6399), 1);
  s.more_due = false;
  s.settle_at_ms = INT64_MAX;
  EXPECT_EQ(wait_timeout_ms(s, kNow + 6400), 0);  // over, and the claim due at +5000 waits no more
}

TEST(WaitTimeout, NotReadyOrDisabledPolls) {
  LoopState s = idle();
  s.more_due = true;
  s.ready = false;
  EXPECT_EQ(wait_timeout_ms(s, kNow), 1000);
  s.ready = true;
  s.enabled = false;
  EXPECT_EQ(wait_timeout_ms(s, kNow), 1000);
}

TEST(WaitTimeout, MoreDueDoesNotWait) {
  LoopState s = idle();
  s.more_due = true;
  EXPECT_EQ(wait_timeout_ms(s, kNow), 0);
}

TEST(WaitTimeout, ReplayedMessagesAreMovedAtTheirTime) {
  LoopState s = idle();
  EXPECT_EQ(wait_timeout_ms(s, kNow), 1000);  // none wait
  s.replays_at_ms = kNow;                     // more to move: at once
  EXPECT_EQ(wait_timeout_ms(s, kNow), 0);
  s.replays_at_ms = kNow + 700;  // after a failed move: not before its retry
  EXPECT_EQ(wait_timeout_ms(s, kNow), 700);
}

TEST(WaitTimeout, WaitingResultsAreWrittenAtTheirTime) {
  LoopState s = idle();
  s.settle_at_ms = kNow + 2;
  EXPECT_EQ(wait_timeout_ms(s, kNow), 2);
  s.settle_at_ms = kNow - 5;  // due already (or urgent): at once
  EXPECT_EQ(wait_timeout_ms(s, kNow), 0);
  s.settle_at_ms = 0;
  EXPECT_EQ(wait_timeout_ms(s, kNow), 0);
}

TEST(WaitTimeout, UntilTheEarliestDeadlineWithinThePollInterval) {
  ManualClock clock(kNow);
  LoopState s = idle();
  EXPECT_EQ(wait_timeout_ms(s, clock.now_ms()), 1000);
  s.next_claim_ms = kNow + 300;
  EXPECT_EQ(wait_timeout_ms(s, clock.now_ms()), 300);
  s.next_housekeeping_ms = kNow + 200;
  EXPECT_EQ(wait_timeout_ms(s, clock.now_ms()), 200);
  clock.advance(250);  // housekeeping overdue: at once, never negative
  EXPECT_EQ(wait_timeout_ms(s, clock.now_ms()), 0);
}

TEST(WaitTimeout, ParkedEndpointsStillAheadShortenTheWait) {
  LoopState s = idle();
  s.parked_until_ms = {kNow + 700, kNow + 400, kNow - 10};  // the last one is tried now, not waited for
  EXPECT_EQ(wait_timeout_ms(s, kNow), 400);
  s.parked_until_ms = {kNow - 10, kNow};
  EXPECT_EQ(wait_timeout_ms(s, kNow), 1000);
}
