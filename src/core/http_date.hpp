// Parsing of HTTP-date values (RFC 9110 section 5.6.7), needed for Retry-After.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace pg_outbox::core {

// Parses an HTTP-date into unix seconds, or returns nullopt. Accepts the three
// forms RFC 9110 tells recipients to accept:
//   IMF-fixdate  "Sun, 06 Nov 1994 08:49:37 GMT"
//   RFC 850      "Sunday, 06-Nov-94 08:49:37 GMT"  (two-digit year: 70..99 -> 19xx,
//                                                   00..69 -> 20xx)
//   asctime      "Sun Nov  6 08:49:37 1994"
// Names are matched case-sensitively as the grammar says; the day name is checked
// to be a day name but not against the date (RFC 9110 lets recipients ignore it).
// Parsing is by hand and the conversion uses timegm(), so neither the locale nor
// the TZ environment variable affects the result. A leap second (":60") is read as
// the next second.
std::optional<int64_t> parse_http_date(std::string_view text);

}  // namespace pg_outbox::core
