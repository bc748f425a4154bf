// The worker's claim: which endpoints may be claimed now and how much (core::plan_claim
// decides), the claim itself (store/claims.hpp), and handing what it took to libcurl
// (requests.cpp) or to the NOTIFY round (notify.cpp).
#include "pg/boundary/spi.hpp"
#include "pg/ordering/successors.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/store/claims.hpp"
#include "pg/worker/constants.hpp"
#include "pg/worker/steps.hpp"

#include <algorithm>
#include <iterator>
#include <unordered_set>

namespace pg_outbox::pg::worker {

namespace {

// HTTP claims read the enqueue time only when a CloudEvents endpoint is among them.
store::ClaimFor http_claim_for(const WorkerState& state, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const Endpoint* endpoint = state.endpoints.find(name);
    if (endpoint != nullptr && core::is_cloudevents(endpoint->row.format)) return store::ClaimFor::kHttpWithTime;
  }
  return store::ClaimFor::kHttp;
}

// The batch's record: its attempts count even if the worker dies mid-delivery.
int64_t record_claim(const std::vector<store::ClaimedMessage>& claimed) {
  std::vector<int64_t> ids;
  std::vector<int32_t> attempts;
  for (const store::ClaimedMessage& m : claimed) {
    ids.push_back(m.id);
    attempts.push_back(m.attempts);
  }
  return store::record_claim(ids, attempts);
}

}  // namespace

uint64_t settle_stale(const WorkerState& state) {
  return successors::settle_stale([&](const std::string& name) { return state.endpoints.find(name) != nullptr; });
}

std::vector<store::ClaimedMessage> claim_messages(const WorkerState& state, const std::vector<std::string>& endpoints,
                                                  int limit, const std::vector<int64_t>& excluded, int64_t budget_bytes,
                                                  store::ClaimFor purpose) {
  const uint64_t endpoints_version = settle_stale(state);
  const successors::Ready next_in_line = successors::ready(endpoints);
  auto claimed =
      store::claim(endpoints, limit, excluded, budget_bytes, settings.max_payload_size, purpose, next_in_line);
  if (next_in_line.ids.empty()) return claimed;
  if (!successors::endpoints_unchanged_since(endpoints_version)) {
    // An endpoint changed meanwhile (alter_endpoint(ordered => ...) numbers its queue
    // again): the held messages this claim took may no longer be next. They stay in the
    // queue, unsent, and the next claim writes the ones still next into the table first.
    std::unordered_set<int64_t> held(next_in_line.ids.begin(), next_in_line.ids.end());
    claimed.erase(std::remove_if(claimed.begin(), claimed.end(),
                                 [&](const store::ClaimedMessage& m) { return held.count(m.id) != 0; }),
                  claimed.end());
    return claimed;
  }
  std::vector<int64_t> taken;
  for (const store::ClaimedMessage& m : claimed) taken.push_back(m.id);
  successors::after_claim(next_in_line.ids, taken);
  return claimed;
}

bool claim_has_room(const WorkerState& state) {
  const core::ClaimSettings sizes = claim_settings();
  auto views = state.endpoints.views(state.in_flight.held_by_endpoint(), [](const std::string&) { return false; });
  return core::wants_claim(core::claimable_outstanding(state.in_flight.size(), views, sizes), sizes,
                           core::widest_batch(views));
}

size_t claim_and_deliver(WorkerState& state) {
  // Claimed HTTP messages go to libcurl only once the claim has committed: a claim that
  // fails rolls back, and nothing it took may have been sent.
  std::vector<store::ClaimedMessage> to_send;
  std::vector<std::string> probed, notify;
  int64_t claim_id = 0;
  in_settling_transaction(state, "pg_outbox: claiming messages", [&] {
    require_same_extension(state);
    refresh_endpoints(state);
    const int64_t now = state.now_ms();
    const core::ClaimSettings sizes = claim_settings();
    auto views = state.endpoints.views(state.in_flight.held_by_endpoint(),
                                       [&](const std::string& name) { return state.parking.is_parked(name, now); });
    core::ClaimPlan plan = core::plan_claim(views, sizes, state.in_flight.size(), state.in_flight.held_bytes(),
                                            state.schedule.claim_round, now);
    state.schedule.claim_round = plan.next_round;
    notify = plan.notify;
    std::vector<int64_t> excluded = state.in_flight_ids();
    state.schedule.more_due = false;
    if (!plan.http.empty() && plan.limit > 0) {
      auto claimed =
          claim_messages(state, plan.http, plan.limit, excluded, plan.byte_budget, http_claim_for(state, plan.http));
      state.schedule.more_due = claimed.size() == static_cast<size_t>(plan.limit);
      std::move(claimed.begin(), claimed.end(), std::back_inserter(to_send));
    }
    for (const std::string& name : plan.probes) {
      // One message goes out as the probe; its result closes or reopens the circuit.
      auto claimed =
          claim_messages(state, {name}, 1, excluded, settings.max_inflight_bytes, http_claim_for(state, {name}));
      if (claimed.empty()) continue;
      probed.push_back(name);
      std::move(claimed.begin(), claimed.end(), std::back_inserter(to_send));
    }
    if (!state.schedule.more_due) {
      // Nothing more is due now: sleep until the next retry or deliver_at comes due,
      // leaving out what is in flight (this claim's too). A past time means rows that are
      // claimed otherwise (NOTIFY's, just after this) or blocked (an ordered head in
      // flight); a settle or a commit wakes us for those.
      for (const store::ClaimedMessage& m : to_send) excluded.push_back(m.id);
      std::optional<int64_t> due_in =
          plan.all_active.empty() ? std::nullopt : store::next_due_in_ms(plan.all_active, excluded);
      state.schedule.next_claim_ms = core::next_claim_at(now, settings.poll_interval_ms, plan.next_breaker_ms, due_in);
    }
    if (!to_send.empty()) claim_id = record_claim(to_send);
  });
  if (claim_id != 0) state.in_flight.claim_recorded(claim_id, to_send.size());
  give_back_requests_of_changed_endpoints(state);  // before this claim's requests join them
  for (const std::string& name : probed) {
    Endpoint& endpoint = state.endpoints.at(name);
    core::on_probe_claimed(endpoint.row.breaker);
    endpoint.breaker_dirty = true;
  }
  start_http(state, to_send, claim_id);
  const size_t claimed_notify = notify.empty() ? 0 : notify_if_due(state, notify);
  return claimed_notify + to_send.size();
}

}  // namespace pg_outbox::pg::worker
