#include "core/notify_envelope.hpp"

#include "core/cloudevents.hpp"
#include "core/cpp_only.hpp"

namespace pg_outbox::core {

std::string notify_envelope(int64_t id, std::string_view payload_json, std::optional<std::string_view> event_type) {
  std::string out;
  out.reserve(payload_json.size() + (event_type ? event_type->size() : 0) + 64);
  out += R"({"id": )";
  out += std::to_string(id);
  out += R"(, "payload": )";
  out += payload_json;
  out += R"(, "event_type": )";
  if (event_type) {
    append_json_string(*event_type, out);
  } else {
    out += "null";
  }
  out += '}';
  return out;
}

}  // namespace pg_outbox::core
