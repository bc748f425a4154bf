#include "core/event_patterns.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using pg_outbox::core::patterns_matching;
using Patterns = std::vector<std::string>;

TEST(EventPatterns, AnExactNameMatchesItself) { EXPECT_EQ(patterns_matching("created"), Patterns({"created"})); }

TEST(EventPatterns, EveryPrefixBeforeADot) {
  EXPECT_EQ(patterns_matching("order.created"), Patterns({"order.created", "order.*"}));
  EXPECT_EQ(patterns_matching("order.line.added"), Patterns({"order.line.added", "order.*", "order.line.*"}));
}

TEST(EventPatterns, TheBarePrefixIsNotMatchedByItsPattern) {
  // "order.*" subscribes to what comes after "order.", not to "order" itself.
  EXPECT_EQ(patterns_matching("order"), Patterns({"order"}));
}

TEST(EventPatterns, DotsWithNothingBeforeThem) {
  // ".*" is not a valid pattern (outbox._check_event_patterns): never looked up.
  EXPECT_EQ(patterns_matching(".hidden"), Patterns({".hidden"}));
  EXPECT_EQ(patterns_matching("a..b"), Patterns({"a..b", "a.*", "a..*"}));
  EXPECT_EQ(patterns_matching("a."), Patterns({"a.", "a.*"}));
}
