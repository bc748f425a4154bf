// The request formats of an endpoint (docs/delivery.md, CloudEvents): Standard Webhooks
// (the payload as the body) or the CloudEvents 1.0 HTTP binding, binary mode (ce-*
// headers, the payload as the body) or structured mode (one application/cloudevents+json
// document). Pure text building: the worker feeds it the message's facts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pg_outbox::core {

enum class Format { StandardWebhooks, CloudEventsBinary, CloudEventsStructured };

// outbox.endpoints.format's value; nullopt for any other text.
std::optional<Format> parse_format(std::string_view text);
inline bool is_cloudevents(Format f) { return f != Format::StandardWebhooks; }

// One event's context attributes. `type` must not be empty (a message without an event
// type is refused for a CloudEvents endpoint).
struct CloudEvent {
  std::string_view id;       // the message's webhook-id (webhook_id_for)
  std::string_view source;   // the endpoint's source, or default_source
  std::string_view type;     // the message's event type
  int64_t time_unix_us = 0;  // when the message was enqueued
};

// "/pg_outbox/<database>/<endpoint>", the database name percent-encoded outside the
// URI's unreserved characters (endpoint names need none).
std::string default_source(std::string_view database, std::string_view endpoint);

// RFC 3339 in UTC with microseconds: "2026-11-25T18:20:37.123456Z".
std::string rfc3339_utc(int64_t unix_us);

// A header value as the CloudEvents HTTP binding writes it: space, '"', '%' and every
// byte outside printable ASCII (0x21-0x7E) become %XX (uppercase hex, of the UTF-8 bytes).
std::string percent_encode_header_value(std::string_view value);

// The binary mode's header lines: ce-specversion, ce-id, ce-source, ce-type, ce-time.
void append_binary_headers(const CloudEvent& event, std::vector<std::string>& lines);

// A JSON string literal of text (quotes included); text is taken as UTF-8 and passed
// through, but for '"', '\' and control characters, which are escaped.
void append_json_string(std::string_view text, std::string& out);

// The structured mode's document: {specversion, id, source, type, time, datacontenttype,
// data}, data being the payload's JSON text as it is.
void append_structured_event(const CloudEvent& event, std::string_view data_json, std::string& out);

// The Content-Type of a request of one message, and of a batch (docs/delivery.md, Batches).
std::string_view content_type_of(Format format);
std::string_view batch_content_type_of(Format format);

}  // namespace pg_outbox::core
