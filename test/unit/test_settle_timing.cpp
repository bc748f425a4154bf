#include "core/settle_timing.hpp"

#include <gtest/gtest.h>

#include <limits>

using namespace pg_outbox::core;

namespace {

constexpr int64_t kLast = 1700000000000;
const LastSettle kDraining{kLast, 100};  // the last write had 100 results

}  // namespace

TEST(SettleTiming, NothingWaitingIsNeverDue) {
  EXPECT_EQ(settle_at_ms(0, false, kDraining), std::numeric_limits<int64_t>::max());
}

TEST(SettleTiming, PlainResultsOfADrainWaitForTheNextWrite) {
  EXPECT_EQ(settle_at_ms(1, false, kDraining), kLast + kSettleEveryMs);
  EXPECT_EQ(settle_at_ms(kSettleAtOnce - 1, false, kDraining), kLast + kSettleEveryMs);
}

TEST(SettleTiming, ALightFlowIsWrittenAtOnce) {
  EXPECT_EQ(settle_at_ms(1, false, LastSettle{kLast, kSettleLight - 1}), 0);
  EXPECT_EQ(settle_at_ms(1, false, LastSettle{kLast, kSettleLight}), kLast + kSettleEveryMs);
  EXPECT_EQ(settle_at_ms(1, false, LastSettle{}), 0);  // the first write
}

TEST(SettleTiming, ManyOrUrgentOnesGoAtOnce) {
  EXPECT_EQ(settle_at_ms(kSettleAtOnce, false, kDraining), 0);
  EXPECT_EQ(settle_at_ms(1, true, kDraining), 0);
  EXPECT_EQ(settle_at_ms(0, true, kDraining), 0);  // a breaker to write, no result
}
