#include "core/http_date.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

using namespace pg_outbox::core;

// RFC 9110's example instant, Sun, 06 Nov 1994 08:49:37 GMT.
constexpr int64_t kExample = 784111777;

TEST(HttpDate, ThreeFormsOfTheRfcExample) {
  EXPECT_EQ(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), kExample);
  EXPECT_EQ(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), kExample);
  EXPECT_EQ(parse_http_date("Sun Nov  6 08:49:37 1994"), kExample);
  EXPECT_EQ(parse_http_date("Sun Nov 06 08:49:37 1994"), kExample);
}

TEST(HttpDate, EpochLeapDayAndTwoDigitYears) {
  EXPECT_EQ(parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"), 0);
  EXPECT_EQ(parse_http_date("Thu, 29 Feb 2024 12:00:00 GMT"), 1709208000);
  EXPECT_EQ(parse_http_date("Thursday, 29-Feb-24 12:00:00 GMT"), 1709208000);
  EXPECT_EQ(parse_http_date("Thursday, 01-Jan-70 00:00:00 GMT"), 0);
  EXPECT_EQ(parse_http_date("Sat, 31 Dec 2022 23:59:60 GMT"), 1672531200);  // leap second
}

TEST(HttpDate, DoesNotDependOnTimeZone) {
  const char* old = std::getenv("TZ");
  std::string saved = old ? old : "";
  setenv("TZ", "America/New_York", 1);
  tzset();
  EXPECT_EQ(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), kExample);
  if (old)
    setenv("TZ", saved.c_str(), 1);
  else
    unsetenv("TZ");
  tzset();
}

TEST(HttpDate, RejectsGarbage) {
  for (const char* bad : {"",
                          "120",
                          "Sun, 06 Nov 1994 08:49:37",
                          "Sun, 06 Nov 1994 08:49:37 UTC",
                          "Sun, 6 Nov 1994 08:49:37 GMT",
                          "sun, 06 nov 1994 08:49:37 GMT",
                          "Xyz, 06 Nov 1994 08:49:37 GMT",
                          "Sun, 06 Foo 1994 08:49:37 GMT",
                          "Sun, 31 Nov 1994 08:49:37 GMT",
                          "Sun, 29 Feb 2023 08:49:37 GMT",
                          "Sun, 00 Nov 1994 08:49:37 GMT",
                          "Sun, 06 Nov 1994 24:00:00 GMT",
                          "Sun, 06 Nov 1994 08:60:00 GMT",
                          "Sun, 06 Nov 1994 08:49:61 GMT",
                          "Sun, 06 Nov 1994 08:49:37 GMT ",
                          "Sun,06 Nov 1994 08:49:37 GMT",
                          "Sun, 06 Nov 94 08:49:37 GMT",
                          "Sun, 06-Nov-94 08:49:37 GMT",
                          "Sunday, 06 Nov 1994 08:49:37 GMT",
                          "Sun Nov 6 08:49:37 1994",
                          "Sun Nov  6 08:49:37 94",
                          "Sun, 06 Nov 1994 8:49:37 GMT",
                          "Sun, 06 Nov 1994 08:49:37 GMTx"})
    EXPECT_FALSE(parse_http_date(bad).has_value()) << bad;
}
