// The header lines of one HTTP delivery, in the "Name: value" form libcurl's
// CURLOPT_HTTPHEADER takes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/header_lines.hpp"
#include "core/signing_key.hpp"

namespace pg_outbox::core {

struct DeliveryHeaders {
  std::vector<std::pair<std::string, std::string>> endpoint_headers;  // outbox.endpoints.headers
  std::vector<std::pair<std::string, std::string>> message_headers;   // outbox.messages.headers
  std::string webhook_id;                                             // see webhook_id_for
  int64_t timestamp_unix_s = 0;                                       // time of this attempt
  std::string event_type;                                             // empty = omit outbox-event-type
  int attempt = 1;                                                    // 1 for the first attempt
  SigningKeys keys;                               // one signature each (a rotation: current first); none = unsigned
  std::string user_agent;                         // e.g. "pg_outbox/1.0"; empty = omit
  std::string content_type = "application/json";  // content_type_of (cloudevents.hpp)
  // The CloudEvents binary mode's ce-* lines (append_binary_headers), empty otherwise.
  // With a CloudEvents format (`cloudevents`), user headers named ce-* are dropped: the
  // event's attributes are ours.
  std::vector<std::string> cloudevent_lines;
  bool cloudevents = false;
};

// Builds the header lines, in this order:
//   1. endpoint headers, then message headers. Within one list a later header
//      replaces an earlier one of the same name (case-insensitive). A message header
//      never replaces (nor, with an empty value, removes) an endpoint header: the
//      endpoint's headers (Authorization, say) are its administrator's, and a
//      producer's message header of the same name is dropped.
//   2. ours: Content-Type (application/json unless the format says otherwise), the
//      CloudEvents binary mode's ce-* lines, User-Agent, webhook-id,
//      webhook-timestamp, outbox-event-type, outbox-attempt, webhook-signature
//      (only with keys: one signature per key, space-separated, over body), and
//      finally "Expect:" (empty, which stops libcurl from sending
//      "Expect: 100-continue" and waiting for it).
// User headers whose name is one of ours are dropped, so producers cannot forge
// the identity or the signature of a delivery; so are the headers that control
// message framing or the connection (content-length, transfer-encoding,
// connection, keep-alive, te, trailer, upgrade, proxy-connection, expect), which a
// user value would turn into a request-smuggling or connection-reuse hazard.
// A user header with an empty value is emitted as "Name;", libcurl's spelling for
// "send this header empty" ("Name:" would delete it instead).
//
// Every user header, and the webhook-id and event type, must pass check_header;
// otherwise std::invalid_argument is thrown with a message that names the header
// but never quotes its value (the worker dead-letters such a message as
// INVALID_MESSAGE).
HeaderLines build_request_headers(const DeliveryHeaders& headers, std::string_view body);

// Lines built by build_request_headers, stamped again for the moment the request is
// really sent: webhook-timestamp becomes now_unix_s and webhook-signature (if any) is
// made again over it with the same keys, in place; every other line stays as it was. A
// request that waited in the worker (a slow or rate-limited endpoint) is not stale to a
// verifier.
void restamp_request_headers(HeaderLines& lines, int64_t now_unix_s, std::string_view webhook_id,
                             const SigningKeys& keys, std::string_view body);

// Where a message's webhook-id comes from when it has no idempotency key: the
// installation's instance id (16 hex digits, random, one per database and CREATE
// EXTENSION: outbox.instance) and the id below which messages were enqueued before
// 0.3.0 and keep the webhook-id they were first sent with.
struct WebhookIdSource {
  std::string instance;      // empty: "msg_<id>" for every message
  int64_t legacy_below = 0;  // messages with a smaller id: "msg_<id>"
};

// The webhook-id of a message: its idempotency key when it has one (so a receiver
// can deduplicate across retries and requeues), else "msg_<instance>_<id>": unique
// across databases, clusters and re-created extensions. Idempotency keys may not start
// with "msg_" (check_idempotency_key), so the two never meet.
std::string webhook_id_for(std::string_view idempotency_key, int64_t message_id, const WebhookIdSource& source);

}  // namespace pg_outbox::core
