// What the worker makes of libcurl's responses: the settlement of each message, the
// endpoint's circuit breaker, and requests given back before they started.
#include "pg/worker/worker.hpp"

#include "pg/boundary/boundary.hpp"
#include "pg/worker/worker_internal.hpp"

extern "C" {
#include "utils/elog.h"
}

#include <optional>

#include <unordered_set>

namespace pg_outbox::pg {

using namespace worker_detail;

// What the delivery thread has finished, up to one settle's worth; the rest wakes the
// worker again at once. A circuit that these responses open takes the endpoint's
// requests that have not started back from the thread (on_breaker_transition); the
// thread may have started a few more meanwhile, as slots freed, and those run their
// course like the ones that were in flight.
void Worker::collect_http_results() {
  for (const http::Response& response : delivery_.take_responses(kSettleBatch)) record_outcome(response);
  delivery_.resume();
}

void Worker::record_outcome(const http::Response& response) {
  auto found = deliveries_.find(response.tag);
  if (found == deliveries_.end()) return;
  Delivery delivery = untrack_delivery(found);
  held_bytes_ -= delivery.payload_bytes;
  claim_member_settled(delivery.claim_id);
  int64_t id = static_cast<int64_t>(response.tag);
  int64_t now = now_ms();

  if (!response.egress_denied.empty()) {
    // Nothing was sent: the destination is not allowed, and retrying cannot change that
    // (the operator changes the policy or the URL, then requeues). No breaker result:
    // the receiver was never asked.
    pending_.dead.push_back({id,
                             core::DeadReason::EgressDenied,
                             response.error,
                             0,
                             {},
                             delivery.attempts,
                             delivery.endpoint,
                             delivery.ordering_lock});
    count(delivery.endpoint, core::Verdict::Dead);
    return;
  }
  core::Outcome outcome =
      response.transport_error ? core::classify_transport_error() : core::classify_http_status(response.status);
  std::optional<int64_t> retry_after;
  if (!response.transport_error && core::honours_retry_after(response.status) && !response.retry_after.empty())
    retry_after = core::parse_retry_after_ms(response.retry_after, now);
  core::BackoffPolicy backoff(settings.backoff_base_ms, settings.backoff_max_ms);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  core::Settlement settlement =
      core::settle_attempt(outcome, delivery.attempts, delivery.max_attempts, backoff, retry_after, unit(random_));

  auto endpoint = endpoints_.find(delivery.endpoint);
  if (endpoint != endpoints_.end()) {
    core::Transition transition =
        outcome.verdict == core::Verdict::Retry
            ? core::record_retryable_failure(endpoint->second.row.breaker, breaker_config(), now)
            : core::record_success(endpoint->second.row.breaker, breaker_config());
    on_breaker_transition(endpoint->second, transition);
  }

  int32_t status = response.transport_error ? 0 : static_cast<int32_t>(response.status);
  std::string error = response.transport_error ? response.error : "HTTP " + std::to_string(response.status);
  switch (settlement.verdict) {
    case core::Verdict::Sent:
      pending_.sent.push_back({id, status, delivery.attempts, delivery.endpoint, delivery.ordering_lock});
      break;
    case core::Verdict::Retry:
      pending_.retry.push_back({id, settlement.retry_delay_ms, error, status, delivery.attempts, delivery.endpoint});
      break;
    case core::Verdict::Dead:
      pending_.dead.push_back({id, settlement.reason, error, status,
                               core::sanitize_utf8(response.body_head, kResponseBodyLimit), delivery.attempts,
                               delivery.endpoint, delivery.ordering_lock});
      break;
  }
  count(delivery.endpoint, settlement.verdict);
}

void Worker::on_breaker_transition(Endpoint& endpoint, core::Transition transition) {
  endpoint.breaker_dirty = true;  // at least the failure count changed
  if (transition == core::Transition::None) return;
  const core::Breaker& b = endpoint.row.breaker;
  const char* what = transition == core::Transition::Closed ? "closed" : "opened";
  pg_call([&] {
    ereport(LOG, (errmsg("pg_outbox: circuit for endpoint \"%s\" %s", endpoint.row.name.c_str(), what),
                  transition == core::Transition::Closed
                      ? 0
                      : errdetail("%d consecutive retryable failures; next probe in %lld ms.", b.consecutive_failures,
                                  static_cast<long long>(b.cooldown_ms))));
  });
  if (transition == core::Transition::Closed) {
    more_due_ = true;  // the endpoint's waiting messages flow again at once
    return;
  }
  // Requests of this endpoint not yet started would only fail: give their attempt back.
  const std::string& name = endpoint.row.name;
  auto cancelled = delivery_.cancel_queued([&](uint64_t tag) {
    auto d = deliveries_.find(tag);
    return d != deliveries_.end() && d->second.endpoint == name;
  });
  give_back(cancelled);
}

// Requests taken back before they started: the message stays as it is in the queue
// (its attempt was never recorded) and is claimed again when it may go.
void Worker::give_back(const std::vector<uint64_t>& tags) {
  for (uint64_t tag : tags) {
    auto d = deliveries_.find(tag);
    if (d == deliveries_.end()) continue;
    Delivery delivery = untrack_delivery(d);
    held_bytes_ -= delivery.payload_bytes;
    pending_.given_back.push_back(static_cast<int64_t>(tag));
    claim_member_settled(delivery.claim_id);
    if (delivery.probe) probe_lost(delivery.endpoint);
  }
  if (!tags.empty()) more_due_ = true;
}

// A claimed message waits in libcurl's queue at most pg_outbox.lease: behind a slow
// endpoint it is better given back and claimed afresh than sent minutes late. A request
// that has started is bounded by its own timeout instead.
void Worker::probe_lost(const std::string& name) {
  auto endpoint = endpoints_.find(name);
  if (endpoint == endpoints_.end()) return;
  core::on_probe_lost(endpoint->second.row.breaker, now_ms());
  endpoint->second.breaker_dirty = true;
  more_due_ = true;  // the next probe may go at once
}

// What a request of this endpoint carries from the row: a change to any of it (or a
// pause) must reach the requests not yet started.
bool Worker::changes_requests(const EndpointRow& before, const EndpointRow& after) {
  return before.url != after.url || before.headers_json != after.headers_json || before.secret != after.secret ||
         before.timeout_ms != after.timeout_ms || (!before.paused && after.paused);
}

// An endpoint was altered or paused: its requests not yet started are taken back and
// claimed again with what the endpoint is now (or not at all while it is paused).
void Worker::give_back_requests_of_changed_endpoints() {
  if (endpoints_changed_.empty()) return;
  std::unordered_set<std::string> changed(endpoints_changed_.begin(), endpoints_changed_.end());
  endpoints_changed_.clear();
  give_back_unstarted([&](const Delivery& d) { return changed.count(d.endpoint) != 0; });
}

void Worker::give_back_stale_requests() {
  int64_t oldest_allowed = now_ms() - 1000LL * settings.lease_s;
  give_back_unstarted([&](const Delivery& d) { return d.claimed_ms < oldest_allowed; });
}

// Takes back the requests not yet started whose delivery the predicate selects.
void Worker::give_back_unstarted(const std::function<bool(const Delivery&)>& select) {
  give_back(delivery_.cancel_queued([&](uint64_t tag) {
    auto d = deliveries_.find(tag);
    return d != deliveries_.end() && select(d->second);
  }));
}

}  // namespace pg_outbox::pg
