#include "core/clock.hpp"
#include "core/lease.hpp"

#include <gtest/gtest.h>

using namespace pg_outbox::core;

TEST(Lease, ExpiresStrictlyAfterTheLease) {
  ManualClock clock(1700000000000);
  const int64_t claimed = clock.now_ms();
  const int lease_s = 300;
  EXPECT_FALSE(lease_expired(claimed, clock.now_ms(), lease_s));
  clock.advance(300 * 1000 - 1);
  EXPECT_FALSE(lease_expired(claimed, clock.now_ms(), lease_s));
  clock.advance(1);  // exactly one lease ago: still within it
  EXPECT_FALSE(lease_expired(claimed, clock.now_ms(), lease_s));
  clock.advance(1);
  EXPECT_TRUE(lease_expired(claimed, clock.now_ms(), lease_s));
}

TEST(Lease, LongLeasesDoNotOverflow) {
  // 1000 * lease_s is computed in 64 bits.
  const int64_t now = 1700000000000;
  EXPECT_FALSE(lease_expired(now - 2147483647LL * 1000, now, 2147483647));
  EXPECT_TRUE(lease_expired(now - 2147483647LL * 1000 - 1, now, 2147483647));
}

TEST(Lease, ZeroLeaseGivesBackWhatWasClaimedBeforeNow) {
  EXPECT_FALSE(lease_expired(1000, 1000, 0));
  EXPECT_TRUE(lease_expired(999, 1000, 0));
}
