// A claimed HTTP message becomes a request for the delivery thread: its body in the
// endpoint's format, its headers (the endpoint's, the message's, the Standard Webhooks
// ones, signed), its timeout and its endpoint's limits; the messages of a batching
// endpoint go to batches.cpp. A message that can never be sent as it stands goes to the
// DLQ at once, and the worker goes on.
#include "core/cloudevents.hpp"
#include "core/request_headers.hpp"
#include "core/validation.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/worker/constants.hpp"
#include "pg/worker/requests.hpp"
#include "pg/worker/steps.hpp"

#include <unordered_map>

namespace pg_outbox::pg::worker {

core::CloudEvent cloud_event(const Endpoint& endpoint, const store::ClaimedMessage& m, std::string_view webhook_id) {
  return {webhook_id, endpoint.row.source, m.event_type, m.created_unix_us};
}

std::optional<std::pair<core::DeadReason, std::string>> unsendable(const WorkerState& state, const Endpoint& endpoint,
                                                                   const store::ClaimedMessage& m) {
  if (m.attempts > state.endpoints.max_attempts_of(endpoint)) {
    // Its attempts ran out across worker restarts (each counted from the claim the
    // stopped worker left): a message that keeps the worker from finishing a request
    // ends in the DLQ instead of being sent for ever.
    return std::make_pair(core::DeadReason::RetryExhausted,
                          std::string("max_attempts reached: the worker stopped during the last attempts"));
  }
  if (m.too_large)
    return std::make_pair(core::DeadReason::PayloadTooLarge,
                          core::payload_too_large(m.payload_size, settings.max_payload_size));
  // Refused at enqueue, requeue and alter_endpoint; a plain INSERT, or an enqueue that
  // raced with the change of format, still gets here (docs/delivery.md, CloudEvents).
  if (core::is_cloudevents(endpoint.row.format) && m.event_type.empty())
    return std::make_pair(core::DeadReason::InvalidMessage,
                          std::string("no event type: a CloudEvents endpoint sends it as ce-type"));
  return std::nullopt;
}

Delivery delivery_of(const WorkerState& state, const Endpoint& endpoint, const store::ClaimedMessage& m,
                     int64_t claim_id, int64_t now_ms, bool probe) {
  Delivery delivery;
  delivery.endpoint = m.endpoint;
  delivery.attempts = m.attempts;
  delivery.max_attempts = state.endpoints.max_attempts_of(endpoint);
  delivery.claim_id = claim_id;
  delivery.payload_bytes = m.payload_size;
  delivery.claimed_ms = now_ms;
  delivery.probe = probe;
  delivery.ordering_key = m.ordering_key;
  delivery.tid = m.tid;
  return delivery;
}

void refuse_unsent(WorkerState& state, const store::ClaimedMessage& m, int64_t claim_id, bool probe,
                   std::pair<core::DeadReason, std::string> refused) {
  dead_letter_unsent(state, m, refused.first, std::move(refused.second));
  state.in_flight.member_settled(claim_id);
  if (probe) lose_probe(state, m.endpoint);
}

namespace {

// The request's body in the endpoint's format: the payload (taken from the claimed
// message, which needs it no more: one copy of every payload less), or the structured
// event around it (docs/delivery.md, CloudEvents).
std::string body_of(const Endpoint& endpoint, store::ClaimedMessage& m, const std::string& webhook_id) {
  if (endpoint.row.format != core::Format::CloudEventsStructured) return std::move(m.payload);
  std::string body;
  body.reserve(m.payload.size() + 256);
  core::append_structured_event(cloud_event(endpoint, m, webhook_id), m.payload, body);
  return body;
}

// The request's header lines, for `body`; `invalid` says why there are none.
core::HeaderLines header_lines(const Endpoint& endpoint, const store::ClaimedMessage& m, std::string_view body,
                               int64_t now_ms, core::DeliveryHeaders& headers, std::string& invalid) {
  if (!endpoint.headers) {
    invalid = "endpoint headers: " + endpoint.headers_error;
    return {};
  }
  if (!endpoint.keys_error.empty()) {
    invalid = "endpoint secret: " + endpoint.keys_error;
    return {};
  }
  if (!m.headers_json.empty()) {
    auto parsed = core::parse_string_object(m.headers_json);
    if (!parsed.pairs) {
      invalid = "message headers: " + parsed.error;
      return {};
    }
    headers.message_headers = std::move(*parsed.pairs);
  }
  headers.endpoint_headers = *endpoint.headers;
  headers.timestamp_unix_s = now_ms / 1000;
  const core::Format format = endpoint.row.format;
  headers.cloudevents = core::is_cloudevents(format);
  headers.content_type = core::content_type_of(format);
  if (format == core::Format::CloudEventsBinary)
    core::append_binary_headers(cloud_event(endpoint, m, headers.webhook_id), headers.cloudevent_lines);
  headers.event_type = m.event_type;
  headers.attempt = m.attempts;
  // A secret past its rotation's grace no longer signs, whether or not housekeeping has
  // deleted it yet.
  headers.keys = core::keys_in_force(endpoint.keys, now_ms);
  headers.user_agent = kUserAgent;
  try {
    return core::build_request_headers(headers, body);
  } catch (const std::invalid_argument& e) {
    invalid = e.what();
    return {};
  }
}

}  // namespace

void dead_letter_unsent(WorkerState& state, const store::ClaimedMessage& m, core::DeadReason reason,
                        std::string error) {
  store::Settlements::Dead dead;
  dead.id = m.id;
  dead.reason = reason;
  dead.error = std::move(error);
  dead.attempts = m.attempts - 1;
  dead.endpoint = m.endpoint;
  dead.ordering_key = m.ordering_key;
  state.results.dead(std::move(dead));
}

void start_http(WorkerState& state, std::vector<store::ClaimedMessage>& claimed, int64_t claim_id) {
  const int64_t now = state.now_ms();
  std::vector<http::Request> requests;
  requests.reserve(claimed.size());
  // The messages of batching endpoints, gathered per endpoint (docs/delivery.md, Batches).
  std::unordered_map<std::string, std::vector<const store::ClaimedMessage*>> batched;
  for (store::ClaimedMessage& m : claimed) {
    Endpoint& endpoint = state.endpoints.at(m.endpoint);  // claimed by endpoint name
    // The one message of a half-open endpoint is its probe (nothing else is claimed for
    // it): if it cannot go, the breaker must not wait for its answer.
    const bool probe = endpoint.row.breaker.state == core::BreakerState::HalfOpen;
    auto refused = unsendable(state, endpoint, m);
    if (!refused && endpoint.row.batch_size > 1) {
      batched[m.endpoint].push_back(&m);
      continue;
    }
    core::DeliveryHeaders headers;
    std::string invalid;
    core::HeaderLines lines;
    std::string body;
    if (!refused) {
      headers.webhook_id = core::webhook_id_for(m.idempotency_key, m.id, state.webhook_ids);
      body = body_of(endpoint, m, headers.webhook_id);
      lines = header_lines(endpoint, m, body, now, headers, invalid);
      if (!invalid.empty()) refused = std::make_pair(core::DeadReason::InvalidMessage, std::move(invalid));
    }
    if (refused) {
      refuse_unsent(state, m, claim_id, probe, std::move(*refused));
      continue;
    }
    const long timeout = endpoint.row.timeout_ms.value_or(settings.http_timeout_ms);
    requests.push_back({static_cast<uint64_t>(m.id), m.endpoint, endpoint.row.url, std::move(lines), std::move(body),
                        timeout, state.endpoints.concurrency_of(endpoint), endpoint.row.rate_limit.value_or(0)});
    // Stamped again by the delivery thread if it starts in a later second.
    requests.back().stamp = http::Request::Stamp{now / 1000, std::move(headers.webhook_id), std::move(headers.keys)};
    state.in_flight.queue(m.id, delivery_of(state, endpoint, m, claim_id, now, probe));
  }
  for (auto& [name, members] : batched)
    start_batches(state, state.endpoints.at(name), members, claim_id, now, requests);
  state.delivery.submit(std::move(requests));  // one hand-over, one wake of the thread
}

}  // namespace pg_outbox::pg::worker
