#include "core/string_object.hpp"

#include <gtest/gtest.h>

using pg_outbox::core::parse_string_object;
using pg_outbox::core::sanitize_utf8;

TEST(StringObject, ParsesCanonicalJsonbText) {
  auto r = parse_string_object(R"({"X-A": "1", "x-b": "two words"})");
  ASSERT_TRUE(r.pairs.has_value());
  ASSERT_EQ(r.pairs->size(), 2u);
  EXPECT_EQ((*r.pairs)[0].first, "X-A");
  EXPECT_EQ((*r.pairs)[1].second, "two words");
}

TEST(StringObject, EmptyObjectIsValid) {
  auto r = parse_string_object(" { } ");
  ASSERT_TRUE(r.pairs.has_value());
  EXPECT_TRUE(r.pairs->empty());
}

TEST(StringObject, UnescapesSoCrLfBecomeVisibleToHeaderChecks) {
  auto r = parse_string_object(R"({"a": "x\r\ny", "b": "\u00e9\ud83d\ude00\/"})");
  ASSERT_TRUE(r.pairs.has_value());
  EXPECT_EQ((*r.pairs)[0].second, "x\r\ny");
  EXPECT_EQ((*r.pairs)[1].second, "\xC3\xA9\xF0\x9F\x98\x80/");
}

TEST(StringObject, LastDuplicateWins) {
  auto r = parse_string_object(R"({"a": "1", "a": "2"})");
  ASSERT_TRUE(r.pairs.has_value());
  ASSERT_EQ(r.pairs->size(), 1u);
  EXPECT_EQ((*r.pairs)[0].second, "2");
}

TEST(StringObject, RejectsEverythingElse) {
  for (const char* bad : {"[]", "\"s\"", "42", "null", R"({"a": 1})", R"({"a": null})", R"({"a": {"b": "c"}})",
                          R"({"a": ["x"]})", R"({"a": "1",})", R"({"a" "1"})", R"({"a": "1"} x)", R"({"a": "\q"})",
                          R"({"a": "\ud800"})", "{\"a\": \"raw\ncontrol\"}", "", "{"}) {
    auto r = parse_string_object(bad);
    EXPECT_FALSE(r.pairs.has_value()) << bad;
    EXPECT_FALSE(r.error.empty()) << bad;
  }
}

TEST(StringObject, NonStringValueErrorNamesTheHeader) {
  auto r = parse_string_object(R"({"x-count": 3})");
  EXPECT_NE(r.error.find("x-count"), std::string::npos);
}

TEST(SanitizeUtf8, KeepsValidTextAndCutsOnCharacterBoundary) {
  EXPECT_EQ(sanitize_utf8("hello", 1024), "hello");
  EXPECT_EQ(sanitize_utf8("h\xC3\xA9llo", 2), "h");  // never half of é
  EXPECT_EQ(sanitize_utf8(std::string(2000, 'a'), 1024).size(), 1024u);
}

// The HTTP client keeps 1024 + 3 bytes of a body (http::kBodyHeadLimit), so a
// character that straddles the 1 KiB mark arrives whole and is left out whole: the
// DLQ keeps a prefix of the body, never a replacement for a character it cut.
TEST(SanitizeUtf8, ACharacterAcrossTheLimitIsLeftOutWhole) {
  const std::string head = std::string(1021, 'a') + "\xF0\x9F\x98\x80" + "zz";  // 1027 bytes
  EXPECT_EQ(sanitize_utf8(head, 1024), std::string(1021, 'a'));
  EXPECT_EQ(sanitize_utf8(std::string(1023, 'a') + "\xC3\xA9" + "z", 1024), std::string(1023, 'a'));
}

TEST(SanitizeUtf8, ReplacesNulAndInvalidBytes) {
  EXPECT_EQ(sanitize_utf8(std::string("a\0b", 3), 100),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(sanitize_utf8("\xFF\xC3", 100), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80", 100), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate is not UTF-8
}
