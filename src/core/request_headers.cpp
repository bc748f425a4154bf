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

void require_valid(std::string_view name, std::string_view value) {
  if (auto err = check_header(name, value)) throw std::invalid_argument(*err);
}

}  // namespace

HeaderLines build_request_headers(const DeliveryHeaders& h, std::string_view body) {
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
  // Sized at once for every line (a signature is at most 92 characters): one allocation.
  std::size_t bytes = 192 + h.webhook_id.size() + h.event_type.size() + h.user_agent.size() + h.content_type.size() +
                      h.keys.size() * 96;
  for (const auto* kv : user) bytes += kv->first.size() + kv->second.size() + 3;
  for (const std::string& ce : h.cloudevent_lines) bytes += ce.size() + 1;
  HeaderLines lines;
  lines.reserve(bytes);
  for (size_t i = 0; i < user.size(); ++i) {
    const auto& name = user[i]->first;
    if (is_reserved(name)) continue;
    if (h.cloudevents && name.size() >= 3 && iequals(name.substr(0, 3), "ce-")) continue;
    if (i >= from_endpoint && set_by_endpoint(name)) continue;  // the endpoint's header stands
    // Within its own list, a later header of the same name wins.
    size_t list_end = i < from_endpoint ? from_endpoint : user.size();
    bool overridden = false;
    for (size_t j = i + 1; j < list_end && !overridden; ++j) overridden = iequals(name, user[j]->first);
    if (!overridden) lines.add(name, user[i]->second);
  }

  lines.add("Content-Type", h.content_type);
  for (const std::string& ce : h.cloudevent_lines) lines.add(ce);
  if (!h.user_agent.empty()) lines.add("User-Agent", h.user_agent);
  lines.add("webhook-id", h.webhook_id);
  lines.add("webhook-timestamp", std::to_string(h.timestamp_unix_s));
  if (!h.event_type.empty()) lines.add("outbox-event-type", h.event_type);
  lines.add("outbox-attempt", std::to_string(h.attempt));
  if (!h.keys.empty())
    lines.add("webhook-signature", webhook_signatures(h.keys, h.webhook_id, h.timestamp_unix_s, body));
  lines.add("Expect:");
  return lines;
}

void restamp_request_headers(HeaderLines& lines, int64_t now_unix_s, std::string_view webhook_id,
                             const SigningKeys& keys, std::string_view body) {
  // User headers cannot carry these names (reserved), so the first match is ours; neither
  // value is ever empty (written "Name: value").
  constexpr std::string_view kTimestamp = "webhook-timestamp: ";
  constexpr std::string_view kSignature = "webhook-signature: ";
  lines.replace_first(kTimestamp, std::string(kTimestamp) + std::to_string(now_unix_s));
  if (!keys.empty())
    lines.replace_first(kSignature, std::string(kSignature) + webhook_signatures(keys, webhook_id, now_unix_s, body));
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
