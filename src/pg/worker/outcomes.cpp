// What the worker makes of the delivery thread's responses (core::judge_response decides,
// this applies it): each message's result, its endpoint's circuit breaker, and requests
// given back before they started.
#include "core/lease.hpp"
#include "core/response_judgement.hpp"
#include "pg/boundary/boundary.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/worker/constants.hpp"
#include "pg/worker/steps.hpp"

#include <algorithm>
#include <unordered_set>

namespace pg_outbox::pg::worker {

namespace {

// A message leaves the thread's hands (answered or given back): its claim counts it, and
// an endpoint left out of the claims for holding its share is due again as soon as it
// holds less (the claim after an empty one otherwise waits for the poll).
std::optional<Delivery> leave(WorkerState& state, int64_t id) {
  size_t held_before = 0;
  std::optional<Delivery> delivery = state.in_flight.leave(id, held_before);
  if (!delivery) return delivery;
  state.in_flight.member_settled(delivery->claim_id);
  if (const Endpoint* endpoint = state.endpoints.find(delivery->endpoint);
      endpoint != nullptr &&
      held_before == core::share_of(state.endpoints.concurrency_of(*endpoint), endpoint->row.rate_limit,
                                    claim_settings(), endpoint->row.batch_size))
    state.schedule.more_due = true;
  return delivery;
}

}  // namespace

// The probe ended without an answer of the receiver (not sendable, or taken back): the
// next message may go as the probe at once.
void lose_probe(WorkerState& state, const std::string& name) {
  Endpoint* endpoint = state.endpoints.find(name);
  if (endpoint == nullptr) return;
  core::on_probe_lost(endpoint->row.breaker, state.now_ms());
  endpoint->breaker_dirty = true;
  state.schedule.more_due = true;
}

namespace {

// queued -> given back: the message stays as it is in the queue (its attempt was never
// recorded) and is claimed again when it may go.
void give_back(WorkerState& state, const std::vector<uint64_t>& tags) {
  for (uint64_t tag : tags) {
    for (int64_t id : state.in_flight.take_request(tag)) {  // a batch goes back whole
      std::optional<Delivery> delivery = leave(state, id);
      if (!delivery) continue;
      state.results.given_back(id);
      state.schedule.quiet_http.forget(delivery->endpoint);  // it has this one to claim again
      if (delivery->probe) lose_probe(state, delivery->endpoint);
    }
  }
  if (!tags.empty()) state.schedule.more_due = true;
}

// Takes back the requests not yet started whose delivery `select` picks.
void give_back_unstarted(WorkerState& state, const std::function<bool(const Delivery&)>& select) {
  give_back(state, state.delivery.cancel_queued([&](uint64_t tag) {
    const Delivery* delivery = state.in_flight.find(static_cast<int64_t>(tag));
    return delivery != nullptr && select(*delivery);
  }));
}

void on_breaker_transition(WorkerState& state, Endpoint& endpoint, core::Transition transition) {
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
    state.schedule.more_due = true;  // the endpoint's waiting messages flow again at once
    return;
  }
  // Its next probe is due when the cool-down ends. A claim after the settle used to
  // learn that from the plan; a settle calls no claim by itself any more (settle.cpp,
  // written), and the failed probe's own retry may be due much later.
  state.schedule.next_claim_ms = std::min(state.schedule.next_claim_ms, b.open_until_ms);
  // Requests of this endpoint not yet started would only fail: give their attempt back.
  give_back_requests_of(state, endpoint.row.name);
}

}  // namespace

void give_back_requests_of(WorkerState& state, const std::string& endpoint) {
  give_back_unstarted(state, [&](const Delivery& d) { return d.endpoint == endpoint; });
}

void give_back_every_unstarted_request(WorkerState& state) {
  give_back_unstarted(state, [](const Delivery&) { return true; });
}

namespace {

// queued -> answered: the response judged, the result recorded, the breaker fed. A
// batch's answer is every message's (docs/delivery.md, Batches): each is judged with
// its own attempts, and the endpoint's breaker and failing streak are fed once, for the
// one request.
void answered(WorkerState& state, const http::Response& response) {
  core::ResponseFacts facts;
  facts.transport_error = response.transport_error;
  facts.egress_denied = !response.egress_denied.empty();
  facts.status = response.status;
  facts.retry_after = response.retry_after;
  facts.error = response.error;
  facts.body_head = response.body_head;
  facts.delivery_abort = response.delivery_abort;
  const int64_t now = state.now_ms();
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double jitter = facts.egress_denied ? 0.0 : unit(state.random);
  const core::BackoffPolicy backoff(settings.backoff_base_ms, settings.backoff_max_ms);
  bool endpoint_fed = false;
  for (int64_t id : state.in_flight.take_request(response.tag)) {
    std::optional<Delivery> delivery = leave(state, id);
    if (!delivery) continue;
    core::ResponseJudgement judged =
        core::judge_response(facts, delivery->attempts, delivery->max_attempts, backoff, now, jitter);
    if (!endpoint_fed) {
      endpoint_fed = true;
      if (Endpoint* endpoint = state.endpoints.find(delivery->endpoint)) {
        // Saved only when it changed: a success on a closed breaker with no failures
        // (every answer of a healthy endpoint) writes nothing to its row.
        const core::Breaker before = endpoint->row.breaker;
        if (auto transition = core::feed_breaker(judged.breaker, endpoint->row.breaker, breaker_config(), now))
          on_breaker_transition(state, *endpoint, *transition);
        if (endpoint->row.breaker != before) endpoint->breaker_dirty = true;
        learn_health(state, *endpoint, judged);
      }
    }
    store::Settlements::Attempt attempt;
    attempt.started_ms = response.started_ms;
    attempt.duration_us = static_cast<int64_t>(response.total_ms * 1000.0);
    attempt.body = judged.failure_body;
    if (judged.gone) {
      // The message waits for the endpoint's resume, its attempt not counted: the 410 was
      // about the endpoint, not the message (docs/delivery.md, Outcomes). The attempt log
      // still records the request, under the number it was made with.
      attempt.number = delivery->attempts;
      state.results.retry(id, 0, std::move(judged.error), judged.http_status, delivery->attempts - 1,
                          delivery->endpoint, std::move(attempt));
      continue;
    }
    switch (judged.settlement.verdict) {
      case core::Verdict::Sent:
        state.results.sent(id, delivery->tid, judged.http_status, delivery->attempts, delivery->endpoint,
                           delivery->ordering_key, std::move(attempt));
        break;
      case core::Verdict::Retry:
        state.results.retry(id, judged.settlement.retry_delay_ms, std::move(judged.error), judged.http_status,
                            delivery->attempts, delivery->endpoint, std::move(attempt));
        break;
      case core::Verdict::Dead:
        state.results.dead(id, *delivery, judged.settlement.reason, std::move(judged.error), judged.http_status,
                           std::move(judged.dead_letter_body), std::move(attempt));
        break;
    }
  }
}

}  // namespace

// What the delivery thread has finished, up to one settle's worth; the rest wakes the
// worker again at once. A circuit that these responses open takes the endpoint's
// requests that have not started back from the thread (on_breaker_transition); the
// thread may have started a few more meanwhile, as slots freed, and those run their
// course like the ones that were in flight.
void take_responses(WorkerState& state) {
  for (const http::Response& response : state.delivery.take_responses(kSettleBatch)) answered(state, response);
  state.delivery.resume();
}

// A claimed message waits in libcurl's queue at most pg_outbox.lease: behind a slow
// endpoint it is better given back and claimed afresh than sent minutes late. A request
// that has started is bounded by its own timeout instead.
void give_back_stale_requests(WorkerState& state) {
  const int64_t now = state.now_ms();
  give_back_unstarted(state,
                      [&](const Delivery& d) { return core::lease_expired(d.claimed_ms, now, settings.lease_s); });
}

// An endpoint was altered or paused: its requests not yet started are taken back and
// claimed again with what the endpoint is now (or not at all while it is paused).
void give_back_requests_of_changed_endpoints(WorkerState& state) {
  std::vector<std::string> names = state.endpoints.take_changed();
  if (names.empty()) return;
  std::unordered_set<std::string> changed(names.begin(), names.end());
  give_back_unstarted(state, [&](const Delivery& d) { return changed.count(d.endpoint) != 0; });
}

}  // namespace pg_outbox::pg::worker
