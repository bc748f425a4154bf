// The envelope a NOTIFY endpoint's channel carries (docs/delivery.md, NOTIFY endpoints).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pg_outbox::core {

// {"id": <id>, "payload": <payload_json>, "event_type": <event_type, or null>}, laid
// out as PostgreSQL prints a jsonb of these three keys (shorter keys first, a space
// after each colon and comma), as listeners have always received it. payload_json is
// the payload as PostgreSQL prints it (jsonb's text), copied as it is. Built here rather
// than by jsonb_build_object in the claim, which parsed the payload into a new jsonb
// only to print it again: 1.3 µs of the 15 a NOTIFY delivery cost.
std::string notify_envelope(int64_t id, std::string_view payload_json, std::optional<std::string_view> event_type);

}  // namespace pg_outbox::core
