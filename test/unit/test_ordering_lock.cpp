#include "core/ordering_lock.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

using namespace pg_outbox::core;

// The worker and every backend compute the lock on their own: the value must be the
// same in every process and every release (FNV-1a's published constants pin it).
TEST(OrderingLock, HashIsFnv1aOfEndpointSeparatorAndKey) {
  EXPECT_EQ(ordering_hash("", ""), (2166136261u ^ 0x1fu) * 16777619u);
  EXPECT_EQ(ordering_hash("orders", "customer-42"), ordering_hash("orders", "customer-42"));
}

TEST(OrderingLock, TheSeparatorKeepsSplitsApart) {
  EXPECT_NE(ordering_hash("a", "bc"), ordering_hash("ab", "c"));
  EXPECT_NE(ordering_hash("orders", "k1"), ordering_hash("billing", "k1"));
}

TEST(OrderingLock, BytesAboveAsciiHashAsUnsigned) {
  // "é" in UTF-8: the bytes count as 0xc3 0xa9, not as negative chars.
  uint32_t expected = 2166136261u;
  for (unsigned char byte : {0x1fu, 0xc3u, 0xa9u}) {
    expected ^= byte;
    expected *= 16777619u;
  }
  EXPECT_EQ(ordering_hash("", "\xc3\xa9"), expected);
}

// A transaction of 100,000 keys takes at most kOrderingLocks locks, and keys spread
// over all of them.
TEST(OrderingLock, LocksAreBoundedAndSpread) {
  std::set<int32_t> locks;
  for (int i = 0; i < 100000; ++i) {
    int32_t lock = ordering_lock("orders", "customer-" + std::to_string(i));
    ASSERT_GE(lock, 0);
    ASSERT_LT(lock, static_cast<int32_t>(kOrderingLocks));
    locks.insert(lock);
  }
  EXPECT_EQ(locks.size(), kOrderingLocks);
  EXPECT_EQ(ordering_lock("orders", "k1"), static_cast<int32_t>(ordering_hash("orders", "k1") % kOrderingLocks));
}
