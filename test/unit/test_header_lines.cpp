#include "core/header_lines.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

using namespace pg_outbox::core;

namespace {

std::vector<std::string> as_vector(const HeaderLines& lines) { return {lines.begin(), lines.end()}; }

}  // namespace

TEST(HeaderLines, LinesInOrderInCurlsSpelling) {
  HeaderLines lines;
  EXPECT_TRUE(lines.empty());
  EXPECT_EQ(lines.begin(), lines.end());
  lines.add("Content-Type", "application/json");
  lines.add("X-Empty", "");
  lines.add("Expect:");
  EXPECT_EQ(lines.size(), 3u);
  EXPECT_EQ(as_vector(lines), (std::vector<std::string>{"Content-Type: application/json", "X-Empty;", "Expect:"}));
  EXPECT_EQ(lines, (HeaderLines{"Content-Type: application/json", "X-Empty;", "Expect:"}));
  EXPECT_NE(lines, (HeaderLines{"Content-Type: application/json", "X-Empty;"}));
}

TEST(HeaderLines, EachLineIsACStringWhereItLies) {
  const HeaderLines lines{"A: 1", "Bb: 22", "C;"};
  for (std::string_view line : lines) EXPECT_EQ(std::strlen(line.data()), line.size()) << line;
}

TEST(HeaderLines, ReplaceFirstChangesOneLineOfAnyLength) {
  HeaderLines lines{"X-A: 1", "webhook-timestamp: 1700000000", "X-B: webhook-timestamp: no", "webhook-timestamp: 2"};
  EXPECT_TRUE(lines.replace_first("webhook-timestamp: ", "webhook-timestamp: 1700000000123"));
  EXPECT_EQ(as_vector(lines), (std::vector<std::string>{"X-A: 1", "webhook-timestamp: 1700000000123",
                                                        "X-B: webhook-timestamp: no", "webhook-timestamp: 2"}));
  EXPECT_TRUE(lines.replace_first("X-A: ", "X-A;"));
  EXPECT_EQ(*lines.begin(), "X-A;");
  EXPECT_FALSE(lines.replace_first("webhook-signature: ", "webhook-signature: v1,x"));
  EXPECT_EQ(lines.size(), 4u);
}
