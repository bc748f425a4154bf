#include "core/ordering_lock.hpp"

#include <gtest/gtest.h>

using namespace pg_outbox::core;

// The worker and every backend compute the lock on their own: the value must be the
// same in every process and every release (FNV-1a's published test vectors pin it).
TEST(OrderingLock, IsFnv1aOfEndpointSeparatorAndKey) {
  // FNV-1a 32 of "\x1f" alone: 0x811c9dc5 ^ 0x1f, times the FNV prime.
  EXPECT_EQ(static_cast<uint32_t>(ordering_lock("", "")), (2166136261u ^ 0x1fu) * 16777619u);
  EXPECT_EQ(ordering_lock("orders", "customer-42"), ordering_lock("orders", "customer-42"));
}

TEST(OrderingLock, TheSeparatorKeepsSplitsApart) {
  EXPECT_NE(ordering_lock("a", "bc"), ordering_lock("ab", "c"));
  EXPECT_NE(ordering_lock("orders", "k1"), ordering_lock("orders", "k2"));
  EXPECT_NE(ordering_lock("orders", "k1"), ordering_lock("billing", "k1"));
}

TEST(OrderingLock, BytesAboveAsciiHashAsUnsigned) {
  // "é" in UTF-8: the bytes count as 0xc3 0xa9, not as negative chars.
  uint32_t expected = 2166136261u;
  for (unsigned char byte : {0x1fu, 0xc3u, 0xa9u}) {
    expected ^= byte;
    expected *= 16777619u;
  }
  EXPECT_EQ(static_cast<uint32_t>(ordering_lock("", "\xc3\xa9")), expected);
}
