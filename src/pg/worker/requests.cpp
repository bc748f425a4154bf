// A claimed HTTP message becomes a request for the delivery thread: its headers (the
// endpoint's, the message's, the Standard Webhooks ones, signed), its timeout and its
// endpoint's limits. A message that can never be sent as it stands goes to the DLQ at
// once, and the worker goes on.
#include "core/request_headers.hpp"
#include "core/validation.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/worker/constants.hpp"
#include "pg/worker/steps.hpp"

namespace pg_outbox::pg::worker {

namespace {

// Why a claimed message cannot go at all (nullopt: it can).
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
  return std::nullopt;
}

// The request's header lines; `invalid` says why there are none.
std::vector<std::string> header_lines(const WorkerState& state, const Endpoint& endpoint,
                                      const store::ClaimedMessage& m, int64_t now_ms, core::DeliveryHeaders& headers,
                                      std::string& invalid) {
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
  headers.webhook_id = core::webhook_id_for(m.idempotency_key, m.id, state.webhook_ids);
  headers.timestamp_unix_s = now_ms / 1000;
  headers.event_type = m.event_type;
  headers.attempt = m.attempts;
  // A secret past its rotation's grace no longer signs, whether or not housekeeping has
  // deleted it yet.
  headers.keys = core::keys_in_force(endpoint.keys, now_ms);
  headers.user_agent = kUserAgent;
  try {
    return core::build_request_headers(headers, m.payload);
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
  dead.ordering_lock = m.ordering_lock;
  state.results.dead(std::move(dead));
}

void start_http(WorkerState& state, const std::vector<store::ClaimedMessage>& claimed, int64_t claim_id) {
  const int64_t now = state.now_ms();
  std::vector<http::Request> requests;
  requests.reserve(claimed.size());
  for (const store::ClaimedMessage& m : claimed) {
    Endpoint& endpoint = state.endpoints.at(m.endpoint);  // claimed by endpoint name
    // The one message of a half-open endpoint is its probe (nothing else is claimed for
    // it): if it cannot go, the breaker must not wait for its answer.
    const bool probe = endpoint.row.breaker.state == core::BreakerState::HalfOpen;
    auto refused = unsendable(state, endpoint, m);
    core::DeliveryHeaders headers;
    std::string invalid;
    std::vector<std::string> lines;
    if (!refused) {
      lines = header_lines(state, endpoint, m, now, headers, invalid);
      if (!invalid.empty()) refused = std::make_pair(core::DeadReason::InvalidMessage, std::move(invalid));
    }
    if (refused) {
      dead_letter_unsent(state, m, refused->first, std::move(refused->second));
      state.in_flight.member_settled(claim_id);
      if (probe) lose_probe(state, m.endpoint);
      continue;
    }
    const long timeout = endpoint.row.timeout_ms.value_or(settings.http_timeout_ms);
    requests.push_back({static_cast<uint64_t>(m.id), m.endpoint, endpoint.row.url, std::move(lines), m.payload, timeout,
                        state.endpoints.concurrency_of(endpoint), endpoint.row.rate_limit.value_or(0)});
    // Stamped again by the delivery thread if it starts in a later second.
    requests.back().stamp = http::Request::Stamp{now / 1000, std::move(headers.webhook_id), std::move(headers.keys)};
    Delivery delivery;
    delivery.endpoint = m.endpoint;
    delivery.attempts = m.attempts;
    delivery.max_attempts = state.endpoints.max_attempts_of(endpoint);
    delivery.claim_id = claim_id;
    delivery.payload_bytes = m.payload_size;
    delivery.claimed_ms = now;
    delivery.probe = probe;
    delivery.ordering_lock = m.ordering_lock;
    state.in_flight.queue(m.id, std::move(delivery));
  }
  state.delivery.submit(std::move(requests));  // one hand-over, one wake of the thread
}

}  // namespace pg_outbox::pg::worker
