// ASCII case folding and trimming for protocol text (URL schemes, HTTP header lines): its
// tokens are case-insensitive by definition and ASCII by grammar, so no locale may take part.
#pragma once

#include <string_view>

namespace pg_outbox::core {

inline char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

inline bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  return true;
}

// Whitespace around an HTTP header's name and value: optional spaces and tabs, and the
// CR LF that ends a line as libcurl hands it over.
inline constexpr std::string_view kHeaderSpace = " \t\r\n";

// s without the leading and trailing characters found in space.
inline std::string_view ascii_trim(std::string_view s, std::string_view space) {
  const auto first = s.find_first_not_of(space);
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(space);
  return s.substr(first, last - first + 1);
}

}  // namespace pg_outbox::core
