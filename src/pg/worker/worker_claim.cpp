// The worker's claim: which endpoints may be claimed now, how much, and handing what
// it took to libcurl (HTTP) or to pg_notify (NOTIFY, settled in the same transaction).
#include "pg/worker/worker.hpp"

#include "core/request_headers.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/worker/worker_internal.hpp"

#include <algorithm>
#include <iterator>

namespace pg_outbox::pg {

using namespace worker_detail;

size_t Worker::claim_target() const {
  // Enough claimed work to keep every connection busy between two claims.
  return static_cast<size_t>(std::max(settings.batch_size, 2 * settings.max_concurrency));
}

int Worker::max_attempts_of(const Endpoint& endpoint) const {
  return endpoint.row.max_attempts.value_or(settings.max_attempts);
}

// The endpoint's own cap. Not lowered to max_concurrency: the thread's connection slots
// bound it anyway, and a window cut to a lowered max_concurrency would stay cut after
// a reload raised it again.
int Worker::concurrency_of(const Endpoint& endpoint) const {
  return endpoint.row.concurrency.value_or(settings.endpoint_concurrency);
}

// The endpoint's share of the claimed work: its part of the connections, applied to the
// claim target. An endpoint that holds its share is left out of the claim, so that one
// slow endpoint's queue can never take every other endpoint's room.
size_t Worker::share_of(const Endpoint& endpoint) const {
  const size_t slots = static_cast<size_t>(std::max(1, settings.max_concurrency));
  const size_t cap = std::min(static_cast<size_t>(concurrency_of(endpoint)), slots);
  const size_t share = std::max(cap, claim_target() * cap / slots);
  // A rate-limited endpoint holds what it can send in 10 s: its claimed messages wait
  // in the worker, and must not wait there for minutes.
  if (endpoint.row.rate_limit)
    return std::min(share, std::max<size_t>(1, 10 * static_cast<size_t>(*endpoint.row.rate_limit)));
  return share;
}

bool Worker::holds_its_share(const std::string& name) const {
  auto held = outstanding_.find(name);
  auto endpoint = endpoints_.find(name);
  return held != outstanding_.end() && endpoint != endpoints_.end() && held->second >= share_of(endpoint->second);
}

// What the worker holds for endpoints that may still be claimed: the next claim waits
// until half the claim target of it is left, not for endpoints that hold their share.
size_t Worker::claimable_outstanding() const {
  size_t total = deliveries_.size();
  for (const auto& [name, held] : outstanding_)
    if (holds_its_share(name)) total -= std::min(total, held);
  return total;
}

void Worker::track_delivery(uint64_t tag, Delivery delivery) {
  ++outstanding_[delivery.endpoint];
  deliveries_[tag] = std::move(delivery);
}

Worker::Delivery Worker::untrack_delivery(std::unordered_map<uint64_t, Delivery>::iterator found) {
  Delivery delivery = std::move(found->second);
  deliveries_.erase(found);
  auto held = outstanding_.find(delivery.endpoint);
  if (held == outstanding_.end()) return delivery;
  // An endpoint left out of the claims for holding its share is due again the moment
  // it holds less: the claim after an empty one otherwise waits for the poll.
  auto endpoint = endpoints_.find(delivery.endpoint);
  if (endpoint != endpoints_.end() && held->second == share_of(endpoint->second)) more_due_ = true;
  if (--held->second == 0) outstanding_.erase(held);
  return delivery;
}

size_t Worker::claim_and_deliver() {
  // Claimed HTTP messages go to libcurl only once the claim has committed: a claim
  // that fails rolls back, and nothing it took may have been sent.
  std::vector<ClaimedMessage> to_send;
  std::vector<std::string> probed, notify;
  int64_t claim_id = 0;
  in_settling_transaction("pg_outbox: claiming messages", [&] {
    require_same_extension();
    refresh_endpoints();
    int64_t now = now_ms();
    std::vector<std::string> http, probes, all_active;
    int64_t next_breaker_ms = INT64_MAX;
    for (auto& [name, endpoint] : endpoints_) {
      if (endpoint.row.paused || is_parked(name, now)) continue;
      if (endpoint.row.channel.empty() && holds_its_share(name)) continue;  // its results make room
      if (!endpoint.row.channel.empty()) {
        notify.push_back(name);
        all_active.push_back(name);
        continue;
      }
      switch (core::admission(endpoint.row.breaker, now)) {
        case core::Admission::Normal:
          http.push_back(name);
          all_active.push_back(name);
          break;
        case core::Admission::ProbeOnly:
          probes.push_back(name);
          break;
        case core::Admission::None:
          if (endpoint.row.breaker.state == core::BreakerState::Open)
            next_breaker_ms = std::min(next_breaker_ms, endpoint.row.breaker.open_until_ms);
          break;
      }
    }
    // Endpoints come in hash order; rotating it each claim spreads a batch that cannot
    // take everyone across endpoints over time.
    if (!http.empty()) std::rotate(http.begin(), http.begin() + (claim_round_++ % http.size()), http.end());
    if (!notify.empty()) std::rotate(notify.begin(), notify.begin() + (claim_round_ % notify.size()), notify.end());
    size_t room = claim_target() - std::min(claim_target(), claimable_outstanding());
    int limit = static_cast<int>(std::min<size_t>(room, static_cast<size_t>(settings.batch_size)));
    // Payload bytes the worker may still take on: what it holds counts until settled.
    int64_t budget = std::max<int64_t>(0, settings.max_inflight_bytes - held_bytes_);
    if (budget == 0) limit = 0;
    std::vector<int64_t> excluded = in_flight_ids();
    more_due_ = false;
    if (!http.empty() && limit > 0) {
      auto claimed = store_.claim(http, limit, excluded, budget, settings.max_payload_size, false);
      more_due_ = claimed.size() == static_cast<size_t>(limit);
      std::move(claimed.begin(), claimed.end(), std::back_inserter(to_send));
    }
    for (const std::string& name : probes) {
      // One message goes out as the probe; its result closes or reopens the circuit.
      auto claimed = store_.claim({name}, 1, excluded, settings.max_inflight_bytes, settings.max_payload_size, false);
      if (claimed.empty()) continue;
      probed.push_back(name);
      std::move(claimed.begin(), claimed.end(), std::back_inserter(to_send));
    }
    if (!more_due_) {
      // Nothing more is due now: sleep until the next retry or deliver_at comes due,
      // leaving out what is in flight (this claim's too). A past time means rows that
      // are claimed otherwise (NOTIFY's, just after this) or blocked (an ordered head in
      // flight); a settle or a commit wakes us for those.
      for (const ClaimedMessage& m : to_send) excluded.push_back(m.id);
      std::optional<int64_t> due_in = all_active.empty() ? std::nullopt : store_.next_due_in_ms(all_active, excluded);
      int64_t poll = now + settings.poll_interval_ms;
      next_claim_ms_ = std::min({poll, next_breaker_ms, due_in && *due_in > 0 ? now + *due_in : poll});
    }
    if (!to_send.empty()) {
      // The batch's record: its attempts count even if the worker dies mid-delivery.
      std::vector<int64_t> ids;
      std::vector<int32_t> attempts;
      for (const ClaimedMessage& m : to_send) {
        ids.push_back(m.id);
        attempts.push_back(m.attempts);
      }
      claim_id = store_.record_claim(ids, attempts);
    }
  });
  if (claim_id != 0) claims_[claim_id] = to_send.size();
  give_back_requests_of_changed_endpoints();  // before this claim's requests join them
  for (const std::string& name : probed) {
    Endpoint& endpoint = endpoints_.at(name);
    core::on_probe_claimed(endpoint.row.breaker);
    endpoint.breaker_dirty = true;
  }
  start_http(to_send, claim_id);
  const size_t claimed_notify = notify.empty() ? 0 : notify_round(notify);
  return claimed_notify + to_send.size();
}

// The messages handed to libcurl, and those whose results wait with a parked endpoint:
// the next claim must not take them again.
std::vector<int64_t> Worker::in_flight_ids() const {
  std::vector<int64_t> ids;
  ids.reserve(deliveries_.size());
  for (const auto& [tag, delivery] : deliveries_) ids.push_back(static_cast<int64_t>(tag));
  for (const auto& [endpoint, parked] : parked_) {
    for (const auto& s : parked.results.sent) ids.push_back(s.id);
    for (const auto& r : parked.results.retry) ids.push_back(r.id);
    for (const auto& d : parked.results.dead) ids.push_back(d.id);
  }
  return ids;
}

// One more message of a claim is settled; the claim's row goes with the last one.
void Worker::claim_member_settled(int64_t claim_id) {
  auto claim = claims_.find(claim_id);
  if (claim == claims_.end()) return;
  if (--claim->second == 0) {
    pending_.finished_claims.push_back(claim_id);
    claims_.erase(claim);
  }
}

// A claimed message that goes to the DLQ without a request: this attempt was never
// made, so the attempts recorded stay those before it.
void Worker::dead_letter_unsent(const ClaimedMessage& m, core::DeadReason reason, std::string error) {
  pending_.dead.push_back({m.id, reason, std::move(error), 0, {}, m.attempts - 1, m.endpoint, m.ordering_lock});
  count(m.endpoint, core::Verdict::Dead);
}

// Over pg_outbox.max_payload_size: never read, never sent (the worker must not hold it).
static std::string too_large_error(const ClaimedMessage& m) {
  return "payload of " + std::to_string(m.payload_size) + " bytes exceeds pg_outbox.max_payload_size (" +
         std::to_string(settings.max_payload_size) + " bytes)";
}

void Worker::start_http(const std::vector<ClaimedMessage>& claimed, int64_t claim_id) {
  int64_t now = now_ms();
  std::vector<http::Request> requests;
  requests.reserve(claimed.size());
  for (const ClaimedMessage& m : claimed) {
    Endpoint& endpoint = endpoints_.at(m.endpoint);  // claimed by endpoint name
    std::string unsendable;
    core::DeadReason reason = core::DeadReason::InvalidMessage;
    if (m.attempts > max_attempts_of(endpoint)) {
      // Its attempts ran out across worker restarts (each counted from the claim the
      // stopped worker left): a message that keeps the worker from finishing a request
      // ends in the DLQ instead of being sent for ever.
      reason = core::DeadReason::RetryExhausted;
      unsendable = "max_attempts reached: the worker stopped during the last attempts";
    } else if (m.too_large) {
      reason = core::DeadReason::PayloadTooLarge;
      unsendable = too_large_error(m);
    }
    // The one message of a half-open endpoint is its probe (nothing else is claimed
    // for it): if it cannot go, the breaker must not wait for its answer.
    const bool probe = endpoint.row.breaker.state == core::BreakerState::HalfOpen;
    if (!unsendable.empty()) {
      dead_letter_unsent(m, reason, std::move(unsendable));
      claim_member_settled(claim_id);
      if (probe) probe_lost(m.endpoint);
      continue;
    }
    core::DeliveryHeaders headers;
    std::string invalid;
    if (!endpoint.headers) invalid = "endpoint headers: " + endpoint.headers_error;
    if (invalid.empty() && !m.headers_json.empty()) {
      auto parsed = core::parse_string_object(m.headers_json);
      if (!parsed.pairs)
        invalid = "message headers: " + parsed.error;
      else
        headers.message_headers = std::move(*parsed.pairs);
    }
    std::vector<std::string> lines;
    if (invalid.empty()) {
      headers.endpoint_headers = *endpoint.headers;
      headers.webhook_id = core::webhook_id_for(m.idempotency_key, m.id, webhook_ids_);
      headers.timestamp_unix_s = now / 1000;
      headers.event_type = m.event_type;
      headers.attempt = m.attempts;
      headers.secret = endpoint.row.secret;
      headers.user_agent = kUserAgent;
      try {
        lines = core::build_request_headers(headers, m.payload);
      } catch (const std::invalid_argument& e) {
        invalid = e.what();
      }
    }
    if (!invalid.empty()) {
      // Never sendable as it stands: to the DLQ at once, the worker goes on.
      dead_letter_unsent(m, core::DeadReason::InvalidMessage, std::move(invalid));
      claim_member_settled(claim_id);
      if (probe) probe_lost(m.endpoint);
      continue;
    }
    long timeout = endpoint.row.timeout_ms.value_or(settings.http_timeout_ms);
    requests.push_back({static_cast<uint64_t>(m.id), m.endpoint, endpoint.row.url, std::move(lines), m.payload, timeout,
                        concurrency_of(endpoint), endpoint.row.rate_limit.value_or(0)});
    // Stamped again by the delivery thread if it starts in a later second.
    requests.back().stamp = http::Request::Stamp{now / 1000, std::move(headers.webhook_id), std::move(headers.secret)};
    track_delivery(static_cast<uint64_t>(m.id), {m.endpoint, m.attempts, max_attempts_of(endpoint), claim_id,
                                                 m.payload_size, now, probe, m.ordering_lock});
    held_bytes_ += m.payload_size;
  }
  delivery_.submit(std::move(requests));  // one hand-over, one wake of the thread
}

void Worker::deliver_notify(const std::vector<ClaimedMessage>& claimed) {
  // PostgreSQL refuses NOTIFY payloads of 8000 bytes or more.
  constexpr size_t kNotifyPayloadLimit = 8000;
  std::vector<const ClaimedMessage*> in_order;
  for (const ClaimedMessage& m : claimed) in_order.push_back(&m);
  std::sort(in_order.begin(), in_order.end(), [](auto* a, auto* b) { return a->id < b->id; });
  for (const ClaimedMessage* m : in_order) {
    const Endpoint& endpoint = endpoints_.at(m->endpoint);
    if (m->too_large || m->payload.size() >= kNotifyPayloadLimit) {
      dead_letter_unsent(*m, core::DeadReason::PayloadTooLarge,
                         m->too_large ? too_large_error(*m)
                                      : "NOTIFY envelope of " + std::to_string(m->payload.size()) +
                                            " bytes exceeds PostgreSQL's limit of 7999");
      continue;
    }
    store_.notify(endpoint.row.channel, m->payload);
    pending_.sent.push_back({m->id, 0, m->attempts, m->endpoint, m->ordering_lock});
    count(m->endpoint, core::Verdict::Sent);
  }
}

}  // namespace pg_outbox::pg
