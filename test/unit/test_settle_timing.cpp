#include "core/settle_timing.hpp"

#include <gtest/gtest.h>

#include <limits>

using namespace pg_outbox::core;

namespace {

constexpr int64_t kLast = 1700000000000;
const LastSettle kDraining{kLast, 100};  // the last write had 100 results

}  // namespace

TEST(SettleTiming, NothingWaitingIsNeverDue) {
  EXPECT_EQ(settle_at_ms(0, false, kDraining, kLast), std::numeric_limits<int64_t>::max());
}

TEST(SettleTiming, PlainResultsOfADrainWaitForTheNextWrite) {
  EXPECT_EQ(settle_at_ms(1, false, kDraining, kLast + 1), kLast + kSettleEveryMs);
  EXPECT_EQ(settle_at_ms(kSettleAtOnce - 1, false, kDraining, kLast + 1), kLast + kSettleEveryMs);
}

TEST(SettleTiming, ALightFlowIsWrittenAtOnce) {
  EXPECT_EQ(settle_at_ms(1, false, LastSettle{kLast, kSettleLight - 1}, kLast), 0);
  EXPECT_EQ(settle_at_ms(1, false, LastSettle{kLast, kSettleLight}, kLast), kLast + kSettleEveryMs);
  EXPECT_EQ(settle_at_ms(1, false, LastSettle{}, kLast), 0);  // the first write
}

TEST(SettleTiming, ManyOrUrgentOnesGoAtOnce) {
  EXPECT_EQ(settle_at_ms(kSettleAtOnce, false, kDraining, kLast), 0);
  EXPECT_EQ(settle_at_ms(1, true, kDraining, kLast), 0);
}

TEST(SettleTiming, AClockSetBackDoesNotHoldThemBack) {
  EXPECT_EQ(settle_at_ms(1, false, kDraining, kLast - 3600 * 1000), 0);
}
