#include "core/quiet_endpoints.hpp"

#include <gtest/gtest.h>

#include <limits>

using namespace pg_outbox::core;

namespace {

constexpr int64_t kNow = 1700000000000;
constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

}  // namespace

TEST(QuietEndpoints, NotedOnesAreQuietUntilTheirEnd) {
  QuietEndpoints quiet;
  EXPECT_EQ(quiet.until_ms(kNow), kNever);
  quiet.note({"a", "b"}, kNow, kNow + 1000, 7);
  EXPECT_TRUE(quiet.is_quiet("a", kNow, 7));
  EXPECT_TRUE(quiet.is_quiet("b", kNow + 999, 7));
  EXPECT_FALSE(quiet.is_quiet("c", kNow, 7));
  EXPECT_EQ(quiet.until_ms(kNow), kNow + 1000);
  // At its end the quiet is over, and asks for no wake-up any more.
  EXPECT_FALSE(quiet.is_quiet("a", kNow + 1000, 7));
  EXPECT_EQ(quiet.until_ms(kNow + 1000), kNever);
}

TEST(QuietEndpoints, AnotherEndpointsVersionEndsIt) {
  QuietEndpoints quiet;
  quiet.note({"a"}, kNow, kNow + 1000, 7);
  EXPECT_FALSE(quiet.is_quiet("a", kNow, 8));
  // A note under the new version forgets those of the old one.
  quiet.note({"b"}, kNow, kNow + 1000, 8);
  EXPECT_TRUE(quiet.is_quiet("b", kNow, 8));
  EXPECT_FALSE(quiet.is_quiet("a", kNow, 8));
}

TEST(QuietEndpoints, TheEarliestEndHoldsForAll) {
  QuietEndpoints quiet;
  quiet.note({"a"}, kNow, kNow + 5000, 1);
  quiet.note({"b"}, kNow, kNow + 2000, 1);  // b has something due in 2 s
  EXPECT_EQ(quiet.until_ms(kNow), kNow + 2000);
  EXPECT_FALSE(quiet.is_quiet("a", kNow + 2000, 1));
  // A later note never extends an end that is still ahead.
  quiet.note({"c"}, kNow + 100, kNow + 9000, 1);
  EXPECT_EQ(quiet.until_ms(kNow + 100), kNow + 2000);
}

TEST(QuietEndpoints, ANoteAfterTheEndStartsAfresh) {
  QuietEndpoints quiet;
  quiet.note({"a"}, kNow, kNow + 1000, 1);
  quiet.note({"b"}, kNow + 1500, kNow + 4000, 1);
  EXPECT_FALSE(quiet.is_quiet("a", kNow + 1500, 1));  // its quiet ended at +1000
  EXPECT_TRUE(quiet.is_quiet("b", kNow + 1500, 1));
  EXPECT_EQ(quiet.until_ms(kNow + 1500), kNow + 4000);
}

TEST(QuietEndpoints, ForgettingEndsOneOrAll) {
  QuietEndpoints quiet;
  quiet.note({"a", "b"}, kNow, kNow + 1000, 1);
  quiet.forget("a");
  EXPECT_FALSE(quiet.is_quiet("a", kNow, 1));
  EXPECT_TRUE(quiet.is_quiet("b", kNow, 1));
  quiet.forget_all();
  EXPECT_FALSE(quiet.is_quiet("b", kNow, 1));
  EXPECT_TRUE(quiet.empty());
  EXPECT_EQ(quiet.until_ms(kNow), kNever);
  quiet.note({}, kNow, kNow + 1000, 1);  // nothing noted, nothing quiet
  EXPECT_TRUE(quiet.empty());
}

TEST(ClaimSawEverything, FewerThanItsLimitAndUnderItsBudget) {
  EXPECT_TRUE(claim_saw_everything(0, 500, 0, 1000));
  EXPECT_TRUE(claim_saw_everything(499, 500, 999, 1000));
  EXPECT_FALSE(claim_saw_everything(500, 500, 0, 1000));  // the limit may have cut it short
  // The budget stops a message once those before it reach the budget: at 1000 of 1000,
  // the next one may have been cut.
  EXPECT_FALSE(claim_saw_everything(3, 500, 1000, 1000));
  EXPECT_FALSE(claim_saw_everything(0, 0, 0, 1000));
}

TEST(QuietEndpoints, AClockSetBackEndsIt) {
  QuietEndpoints quiet;
  quiet.note({"a"}, kNow, kNow + 1000, 1);
  EXPECT_FALSE(quiet.is_quiet("a", kNow - 60000, 1));
  EXPECT_EQ(quiet.until_ms(kNow - 60000), kNever);
  quiet.note({"b"}, kNow - 60000, kNow - 59000, 1);  // a fresh quiet from the new time on
  EXPECT_FALSE(quiet.is_quiet("a", kNow - 60000, 1));
  EXPECT_TRUE(quiet.is_quiet("b", kNow - 60000, 1));
  EXPECT_EQ(quiet.until_ms(kNow - 60000), kNow - 59000);
}
