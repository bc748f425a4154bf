#include "core/clock.hpp"

#include <gtest/gtest.h>

#include <chrono>

using namespace pg_outbox::core;

TEST(ManualClock, MovesOnlyWhenTold) {
  ManualClock clock(1700000000000);
  const Clock& as_clock = clock;
  EXPECT_EQ(as_clock.now_ms(), 1700000000000);
  EXPECT_EQ(as_clock.now_ms(), 1700000000000);
  clock.advance(250);
  EXPECT_EQ(as_clock.now_ms(), 1700000000250);
  clock.advance(-1000);  // the wall clock set back
  EXPECT_EQ(as_clock.now_ms(), 1699999999250);
  clock.set(42);
  EXPECT_EQ(as_clock.now_ms(), 42);
  EXPECT_EQ(ManualClock().now_ms(), 0);
}

TEST(SystemClock, IsUnixMilliseconds) {
  using namespace std::chrono;
  SystemClock clock;
  const Clock& as_clock = clock;
  const int64_t before = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  const int64_t now = as_clock.now_ms();
  const int64_t after = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  EXPECT_GE(now, before);
  EXPECT_LE(now, after);
  EXPECT_GT(now, 1577836800000);  // after 2020-01-01: milliseconds, not seconds
}
