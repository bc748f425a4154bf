#include "core/concurrency_window.hpp"

#include <gtest/gtest.h>

using namespace pg_outbox::core;

TEST(ClassifyLoad, OverloadIsTimeoutsConnectionErrors429And503) {
  EXPECT_EQ(classify_load(true, false, 0, 5000), LoadSignal::kOverloaded);
  EXPECT_EQ(classify_load(true, false, 200, 10), LoadSignal::kOverloaded);  // headers came, then the reset
  EXPECT_EQ(classify_load(false, false, 429, 10), LoadSignal::kOverloaded);
  EXPECT_EQ(classify_load(false, false, 503, 10), LoadSignal::kOverloaded);
  EXPECT_EQ(classify_load(false, false, 200, 999), LoadSignal::kPrompt);
  EXPECT_EQ(classify_load(false, false, 204, 1000), LoadSignal::kPrompt);
  EXPECT_EQ(classify_load(false, false, 200, 4000), LoadSignal::kSlow);
  EXPECT_EQ(classify_load(false, false, 500, 10), LoadSignal::kNeutral);
  EXPECT_EQ(classify_load(false, false, 400, 10), LoadSignal::kNeutral);
  EXPECT_EQ(classify_load(true, true, 0, 0), LoadSignal::kNeutral);  // an egress rule refused it
}

TEST(ConcurrencyWindow, StartsWithAFewAndNeverAboveTheCap) {
  EXPECT_EQ(ConcurrencyWindow(32).limit(), kInitialWindow);
  EXPECT_EQ(ConcurrencyWindow(2).limit(), 2);
  EXPECT_EQ(ConcurrencyWindow(0).limit(), 1);
  ConcurrencyWindow w(6);
  for (int i = 0; i < 1000; ++i) w.on_result(LoadSignal::kPrompt);
  EXPECT_EQ(w.limit(), 6);
}

TEST(ConcurrencyWindow, GrowsByAboutOnePerWindowOfPromptAnswers) {
  ConcurrencyWindow w(32);
  for (int i = 0; i < 4; ++i) w.on_result(LoadSignal::kPrompt);
  EXPECT_EQ(w.limit(), 4);  // 4 + 4 * 1/4.x: just under 5
  for (int i = 0; i < 2; ++i) w.on_result(LoadSignal::kPrompt);
  EXPECT_EQ(w.limit(), 5);
  // From 4 to 32 takes about (4 + ... + 31) answers: a few hundred, a fraction of a second.
  int answers = 6;
  while (w.limit() < 32 && answers < 10000) {
    w.on_result(LoadSignal::kPrompt);
    ++answers;
  }
  EXPECT_EQ(w.limit(), 32);
  EXPECT_LT(answers, 600);
}

TEST(ConcurrencyWindow, SlowAndNeutralAnswersHoldIt) {
  ConcurrencyWindow w(32);
  for (int i = 0; i < 1000; ++i) w.on_result(LoadSignal::kSlow);
  for (int i = 0; i < 1000; ++i) w.on_result(LoadSignal::kNeutral);
  EXPECT_EQ(w.limit(), kInitialWindow);
}

TEST(ConcurrencyWindow, OverloadHalvesItOncePerBurst) {
  ConcurrencyWindow w(32);
  while (w.limit() < 16) w.on_result(LoadSignal::kPrompt);
  // Sixteen requests in flight together all time out: one halving, not sixteen.
  for (int i = 0; i < 16; ++i) w.on_result(LoadSignal::kOverloaded);
  EXPECT_EQ(w.limit(), 8);
  w.on_result(LoadSignal::kOverloaded);  // a request of the next round: halves again
  EXPECT_EQ(w.limit(), 4);
  for (int i = 0; i < 100; ++i) w.on_result(LoadSignal::kOverloaded);
  EXPECT_EQ(w.limit(), 1);  // never below one
}

TEST(ConcurrencyWindow, ALowerCapAppliesAtOnce) {
  ConcurrencyWindow w(32);
  while (w.limit() < 20) w.on_result(LoadSignal::kPrompt);
  w.set_cap(3);
  EXPECT_EQ(w.limit(), 3);
  w.set_cap(32);
  EXPECT_EQ(w.limit(), 3);  // grows back from there, not at once
}

TEST(ConcurrencyWindow, GrowsOnlyWhenItWasFull) {
  ConcurrencyWindow w(32);
  for (int i = 0; i < 1000; ++i) w.on_result(LoadSignal::kPrompt, false);
  EXPECT_EQ(w.limit(), kInitialWindow);
  for (int i = 0; i < 1000; ++i) w.on_result(LoadSignal::kPrompt, true);
  EXPECT_EQ(w.limit(), 32);
}
