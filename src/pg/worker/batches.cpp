// Batches (docs/delivery.md, Batches): the claimed messages of an endpoint with a
// batch_size above 1 go as requests of up to that many messages, one JSON array each
// (core/batch_body.hpp). A batch is cut when it is full, or when the next message would
// take its body over pg_outbox.max_payload_size. The request is built, signed and handed
// over once per batch; each message is held in flight on its own (InFlight::queue) and
// the request's tag, its first message's id, names them all (InFlight::batch), so that
// the answer settles every one of them (outcomes.cpp).
#include "core/batch_body.hpp"
#include "core/request_headers.hpp"
#include "core/string_object.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/worker/constants.hpp"
#include "pg/worker/requests.hpp"

#include <algorithm>

namespace pg_outbox::pg::worker {

namespace {

// A batch's webhook-id: it names this request (this claim, this first message), never
// another batch; receivers deduplicate on each element's id.
std::string batch_id(const WorkerState& state, int64_t claim_id, int64_t first_id) {
  std::string id = "batch_";
  if (!state.webhook_ids.instance.empty()) {
    id += state.webhook_ids.instance;
    id += '_';
  }
  id += std::to_string(claim_id);
  id += '_';
  id += std::to_string(first_id);
  return id;
}

void send_batch(WorkerState& state, Endpoint& endpoint, const std::vector<const store::ClaimedMessage*>& members,
                std::string body, int64_t claim_id, int64_t now_ms, bool probe, std::vector<http::Request>& requests) {
  core::DeliveryHeaders headers;
  headers.endpoint_headers = *endpoint.headers;
  headers.webhook_id = batch_id(state, claim_id, members.front()->id);
  headers.timestamp_unix_s = now_ms / 1000;
  headers.cloudevents = core::is_cloudevents(endpoint.row.format);
  headers.content_type = core::batch_content_type_of(endpoint.row.format);
  headers.attempt = 0;
  for (const store::ClaimedMessage* m : members) headers.attempt = std::max(headers.attempt, m->attempts);
  // A secret past its rotation's grace no longer signs (requests.cpp, header_lines).
  headers.keys = core::keys_in_force(endpoint.keys, now_ms);
  headers.user_agent = kUserAgent;
  core::HeaderLines lines;
  if (!endpoint.keys_error.empty()) {
    for (const store::ClaimedMessage* m : members)
      refuse_unsent(state, *m, claim_id, probe,
                    {core::DeadReason::InvalidMessage, "endpoint secret: " + endpoint.keys_error});
    return;
  }
  try {
    lines = core::build_request_headers(headers, body);
  } catch (const std::invalid_argument& e) {
    // Only the endpoint's headers are in it: every message of the batch shares the fault.
    for (const store::ClaimedMessage* m : members)
      refuse_unsent(state, *m, claim_id, probe, {core::DeadReason::InvalidMessage, e.what()});
    return;
  }
  const long timeout = endpoint.row.timeout_ms.value_or(settings.http_timeout_ms);
  const int64_t tag = members.front()->id;
  requests.push_back({static_cast<uint64_t>(tag), endpoint.row.name, endpoint.row.url, std::move(lines),
                      std::move(body), timeout, state.endpoints.concurrency_of(endpoint),
                      endpoint.row.rate_limit.value_or(0)});
  requests.back().stamp = http::Request::Stamp{now_ms / 1000, std::move(headers.webhook_id), std::move(headers.keys)};
  std::vector<int64_t> ids;
  ids.reserve(members.size());
  for (const store::ClaimedMessage* m : members) {
    state.in_flight.queue(m->id, delivery_of(state, endpoint, *m, claim_id, now_ms, probe));
    ids.push_back(m->id);
  }
  state.in_flight.batch(std::move(ids));
}

}  // namespace

void start_batches(WorkerState& state, Endpoint& endpoint, std::vector<const store::ClaimedMessage*>& members,
                   int64_t claim_id, int64_t now_ms, std::vector<http::Request>& requests) {
  const bool probe = endpoint.row.breaker.state == core::BreakerState::HalfOpen;
  if (!endpoint.headers) {
    for (const store::ClaimedMessage* m : members)
      refuse_unsent(state, *m, claim_id, probe,
                    {core::DeadReason::InvalidMessage, "endpoint headers: " + endpoint.headers_error});
    return;
  }
  // Enqueue order inside a batch (an ordered endpoint's claim holds one head per key).
  std::sort(members.begin(), members.end(),
            [](const store::ClaimedMessage* a, const store::ClaimedMessage* b) { return a->id < b->id; });
  const bool cloudevents = core::is_cloudevents(endpoint.row.format);
  const size_t most = static_cast<size_t>(endpoint.row.batch_size);
  const size_t max_body = static_cast<size_t>(settings.max_payload_size);
  core::BatchBody body(endpoint.row.format, endpoint.row.source);
  std::vector<const store::ClaimedMessage*> batch;
  batch.reserve(std::min(most, members.size()));
  std::string element;  // one buffer for every element
  for (const store::ClaimedMessage* m : members) {
    if (!m->headers_json.empty()) {
      // A message's own headers travel in its element (Standard Webhooks); they must be
      // what a single request would take.
      auto parsed = core::parse_string_object(m->headers_json);
      if (!parsed.pairs) {
        refuse_unsent(state, *m, claim_id, probe,
                      {core::DeadReason::InvalidMessage, "message headers: " + parsed.error});
        continue;
      }
    }
    const std::string webhook_id = core::webhook_id_for(m->idempotency_key, m->id, state.webhook_ids);
    body.element(
        {webhook_id, m->event_type, m->payload, cloudevents ? std::string_view() : m->headers_json, m->created_unix_us},
        element);
    if (!batch.empty() && (batch.size() == most || body.size_with(element) > max_body)) {
      send_batch(state, endpoint, batch, body.take(), claim_id, now_ms, probe, requests);
      batch.clear();
    }
    body.add(element);
    batch.push_back(m);
  }
  if (!batch.empty()) send_batch(state, endpoint, batch, body.take(), claim_id, now_ms, probe, requests);
}

}  // namespace pg_outbox::pg::worker
