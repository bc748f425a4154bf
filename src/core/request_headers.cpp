#include "core/request_headers.hpp"

#include "core/ascii.hpp"

#include <stdexcept>

#include "core/validation.hpp"
#include "core/webhook_signature.hpp"
#include "core/cpp_only.hpp"

namespace pg_outbox::core {

namespace {

// Names a user header may not set (compared case-insensitively); see the header.
constexpr std::string_view kReserved[] = {
    // ours
    "content-type", "user-agent", "webhook-id", "webhook-timestamp", "webhook-signature", "outbox-event-type",
    "outbox-attempt",
    // framing and connection management
    "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer", "upgrade", "proxy-connection",
    "expect",
    // the URL alone chooses the virtual host: a producer must not address another one
    "host"};

bool is_reserved(std::string_view name) {
  for (auto r : kReserved)
    if (iequals(name, r)) return true;
  return false;
}

std::string line(std::string_view name, std::string_view value) {
  // Sized at once: built from the name and grown, a line was two allocations (a third of
  // the time an HTTP drain's main thread spent in malloc and free went to header lines).
  std::string out;
  out.reserve(name.size() + 2 + value.size());
  out.append(name);
  if (value.empty()) {
    out += ';';
  } else {
    out += ": ";
    out += value;
  }
  return out;
}

void require_valid(std::string_view name, std::string_view value) {
  if (auto err = check_header(name, value)) throw std::invalid_argument(*err);
}

}  // namespace

std::vector<std::string> build_request_headers(const DeliveryHeaders& h, std::string_view body) {
  // Endpoint headers then message headers, as one list in precedence order.
  std::vector<const std::pair<std::string, std::string>*> user;
  user.reserve(h.endpoint_headers.size() + h.message_headers.size());
  for (const auto& kv : h.endpoint_headers) user.push_back(&kv);
  for (const auto& kv : h.message_headers) user.push_back(&kv);

  // Validate all of them, even those dropped below: a bad header is a bad message.
  for (const auto* kv : user) require_valid(kv->first, kv->second);
  require_valid("webhook-id", h.webhook_id);
  if (h.webhook_id.empty()) throw std::invalid_argument("webhook-id must not be empty");
  require_valid("outbox-event-type", h.event_type);
  require_valid("User-Agent", h.user_agent);

  auto set_by_endpoint = [&](std::string_view name) {
    for (const auto& kv : h.endpoint_headers)
      if (iequals(name, kv.first)) return true;
    return false;
  };
  const size_t from_endpoint = h.endpoint_headers.size();
  std::vector<std::string> lines;
  lines.reserve(user.size() + 8);
  for (size_t i = 0; i < user.size(); ++i) {
    const auto& name = user[i]->first;
    if (is_reserved(name)) continue;
    if (h.cloudevents && name.size() >= 3 && iequals(name.substr(0, 3), "ce-")) continue;
    if (i >= from_endpoint && set_by_endpoint(name)) continue;  // the endpoint's header stands
    // Within its own list, a later header of the same name wins.
    size_t list_end = i < from_endpoint ? from_endpoint : user.size();
    bool overridden = false;
    for (size_t j = i + 1; j < list_end && !overridden; ++j) overridden = iequals(name, user[j]->first);
    if (!overridden) lines.push_back(line(name, user[i]->second));
  }

  lines.push_back(line("Content-Type", h.content_type));
  for (const std::string& ce : h.cloudevent_lines) lines.push_back(ce);
  if (!h.user_agent.empty()) lines.push_back(line("User-Agent", h.user_agent));
  lines.push_back(line("webhook-id", h.webhook_id));
  lines.push_back(line("webhook-timestamp", std::to_string(h.timestamp_unix_s)));
  if (!h.event_type.empty()) lines.push_back(line("outbox-event-type", h.event_type));
  lines.push_back(line("outbox-attempt", std::to_string(h.attempt)));
  if (!h.keys.empty())
    lines.push_back(line("webhook-signature", webhook_signatures(h.keys, h.webhook_id, h.timestamp_unix_s, body)));
  lines.push_back("Expect:");
  return lines;
}

void restamp_request_headers(std::vector<std::string>& lines, int64_t now_unix_s, std::string_view webhook_id,
                             const SigningKeys& keys, std::string_view body) {
  // User headers cannot carry these names (reserved), so the first match is ours.
  constexpr std::string_view kTimestamp = "webhook-timestamp: ";
  constexpr std::string_view kSignature = "webhook-signature: ";
  for (std::string& l : lines) {
    if (l.compare(0, kTimestamp.size(), kTimestamp) == 0)
      l = line("webhook-timestamp", std::to_string(now_unix_s));
    else if (!keys.empty() && l.compare(0, kSignature.size(), kSignature) == 0)
      l = line("webhook-signature", webhook_signatures(keys, webhook_id, now_unix_s, body));
  }
}

std::string webhook_id_for(std::string_view idempotency_key, int64_t message_id, const WebhookIdSource& source) {
  if (!idempotency_key.empty()) return std::string(idempotency_key);
  if (source.instance.empty() || message_id < source.legacy_below) return "msg_" + std::to_string(message_id);
  std::string id;
  id.reserve(4 + source.instance.size() + 1 + 20);  // "msg_", the instance, '_', an int64
  id += "msg_";
  id += source.instance;
  id += '_';
  id += std::to_string(message_id);
  return id;
}

}  // namespace pg_outbox::core
