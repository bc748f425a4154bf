// ASCII case folding for protocol tokens (URL schemes, HTTP header names), which are
// case-insensitive by definition and ASCII by grammar: no locale may take part.
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

}  // namespace pg_outbox::core
