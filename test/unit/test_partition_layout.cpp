#include "core/partition_layout.hpp"

#include <gtest/gtest.h>

#include <climits>

using namespace pg_outbox::core;

TEST(PartitionLayout, QuarterOfTheRetentionOnTheLadder) {
  EXPECT_EQ(partition_width_s(86400), 21600);      // 1 day: 6 h partitions
  EXPECT_EQ(partition_width_s(7 * 86400), 86400);  // a week: daily
  EXPECT_EQ(partition_width_s(3600), 900);         // 1 h: 15 min
  EXPECT_EQ(partition_width_s(60), 10);            // 1 min: 10 s
  EXPECT_EQ(partition_width_s(600), 60);           // 10 min: 1 min
  EXPECT_EQ(partition_width_s(1200), 300);         // 20 min: 5 min
}

TEST(PartitionLayout, NeverBelowTenSecondsNorAboveADay) {
  EXPECT_EQ(partition_width_s(1), 10);
  EXPECT_EQ(partition_width_s(39), 10);
  EXPECT_EQ(partition_width_s(INT_MAX), 86400);
}

TEST(PartitionLayout, WidthDividesEveryLargerWidth) {
  // Partitions of a new width start where the old ones end: each width is a multiple
  // of the smaller ones, so aligned ranges never overlap.
  int previous = 0;
  for (int retention = 1; retention < 40 * 86400; retention += 997) {
    int width = partition_width_s(retention);
    if (previous) {
      EXPECT_EQ(width % previous == 0 || previous % width == 0, true) << retention;
    }
    EXPECT_LE(width, retention < 40 ? 10 : retention / 4) << retention;
    previous = width;
  }
}
