// Parsing the one JSON shape pg_outbox needs in C++: an object whose values are all
// strings (endpoint and message headers). PostgreSQL hands us jsonb as canonical text;
// the worker must tell "object of strings" from anything else without a server, so
// that a bad row is dead-lettered (INVALID_MESSAGE) instead of sent half-right.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pg_outbox::core {

using StringPairs = std::vector<std::pair<std::string, std::string>>;

struct StringObjectResult {
  std::optional<StringPairs> pairs;  // set when the text is an object of strings
  std::string error;                 // why not, otherwise
};

// Accepts standard JSON (RFC 8259) text; duplicate names keep the last value, as jsonb does.
StringObjectResult parse_string_object(std::string_view json);

// Bytes from a remote peer made safe to store as PostgreSQL text: at most max_bytes,
// never a cut character, invalid UTF-8 and NUL replaced by U+FFFD.
std::string sanitize_utf8(std::string_view bytes, size_t max_bytes);

}  // namespace pg_outbox::core
