// The worker's claim: which endpoints may be claimed now and how much (core::plan_claim
// decides), the claim itself (store/claims.hpp), and handing what it took to libcurl
// (requests.cpp) or to the NOTIFY round (notify.cpp).
#include "pg/boundary/spi.hpp"
#include "pg/ordering/successors.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/runtime/shared_state.hpp"
#include "pg/store/claims.hpp"
#include "pg/worker/constants.hpp"
#include "pg/worker/steps.hpp"

#include <algorithm>
#include <iterator>
#include <unordered_map>
#include <unordered_set>

namespace pg_outbox::pg::worker {

namespace {

// HTTP claims read the enqueue time only when a CloudEvents endpoint is among them.
store::ClaimFor http_claim_for(const WorkerState& state, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const Endpoint* endpoint = state.endpoints.find(name);
    if (endpoint != nullptr && core::is_cloudevents(endpoint->row.format)) return store::ClaimFor::kPayloadWithTime;
  }
  return store::ClaimFor::kPayload;
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

// Whether the claim saw every claimable message of the plan's HTTP endpoints: it stopped
// neither at its limit nor at its byte budget.
bool saw_everything(const core::ClaimPlan& plan, const std::vector<store::ClaimedMessage>& claimed) {
  int64_t counted = 0;  // against the byte budget: a payload over max_payload_size counts nothing
  for (const store::ClaimedMessage& m : claimed)
    if (!m.too_large) counted += m.payload_size;
  return core::claim_saw_everything(claimed.size(), plan.limit, counted, plan.byte_budget);
}

// The HTTP endpoints of the plan that the claim saw every claimable message of and took
// none from.
std::vector<std::string> found_nothing_in(const core::ClaimPlan& plan,
                                          const std::vector<store::ClaimedMessage>& claimed) {
  std::unordered_set<std::string> took;
  for (const store::ClaimedMessage& m : claimed) took.insert(m.endpoint);
  std::vector<std::string> names;
  if (!saw_everything(plan, claimed)) return names;
  for (const std::string& name : plan.http)
    if (took.count(name) == 0) names.push_back(name);
  return names;
}

}  // namespace

std::vector<core::EndpointView> claim_views(const WorkerState& state, int64_t now) {
  const uint64_t version = pg_atomic_read_u64(&state.slot.endpoints_version);
  auto views = state.endpoints.views(state.in_flight.held_by_endpoint(),
                                     [&](const std::string& name) { return state.parking.is_parked(name, now); });
  for (core::EndpointView& view : views) view.quiet = state.schedule.quiet_http.is_quiet(view.name, now, version);
  return views;
}

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
    // (Every waiting message the claim read: one not held was read where a held one had
    // been, below.)
    claimed.erase(std::remove_if(claimed.begin(), claimed.end(),
                                 [](const store::ClaimedMessage& m) { return m.ordering_seq.has_value(); }),
                  claimed.end());
    return claimed;
  }
  // A held message found waiting with another number than it waited with was moved (an
  // UPDATE of its key or endpoint placed it behind another key's messages at its commit):
  // it is not its key's next message any more. It stays in the queue, unsent, and is
  // forgotten as if taken. (One found as a head, with no number, heads its key: it goes.)
  // A waiting message that is not held was read where a held one had been (the place
  // reused since): it stays in the queue, unsent, and the held one is looked for again.
  std::unordered_map<int64_t, int64_t> waited_with;
  for (size_t i = 0; i < next_in_line.ids.size(); ++i) waited_with.emplace(next_in_line.ids[i], next_in_line.seqs[i]);
  std::vector<int64_t> taken;
  const auto not_next = [&](const store::ClaimedMessage& m) {
    if (!m.ordering_seq) return false;
    auto held = waited_with.find(m.id);
    return held == waited_with.end() || held->second != *m.ordering_seq;
  };
  for (const store::ClaimedMessage& m : claimed)
    if (waited_with.count(m.id) != 0 || !m.ordering_seq) taken.push_back(m.id);
  claimed.erase(std::remove_if(claimed.begin(), claimed.end(), not_next), claimed.end());
  successors::after_claim(next_in_line.ids, taken);
  return claimed;
}

bool claim_worth_running(WorkerState& state) {
  Schedule& schedule = state.schedule;
  const int64_t now = state.now_ms();
  const core::ClaimSettings sizes = claim_settings();
  auto views = claim_views(state, now);
  if (!core::wants_claim(core::claimable_outstanding(state.in_flight.size(), views, sizes), sizes,
                         core::widest_batch(views))) {
    // The results of what it holds make room, and say so (they wake the worker). Until
    // then a claim time gone by must not make every round ask again.
    schedule.more_due = false;
    schedule.room_wanted = true;
    if (schedule.next_claim_ms <= now) schedule.next_claim_ms = now + settings.poll_interval_ms;
    return false;
  }
  // Endpoints changed since they were loaded: only the claim's transaction knows them.
  if (!state.endpoints.loaded_at(pg_atomic_read_u64(&state.slot.endpoints_version))) return true;
  const core::ClaimPlan plan =
      core::plan_claim(views, sizes, state.in_flight.size(), state.in_flight.held_bytes(), schedule.claim_round, now);
  if (!plan.http.empty() || !plan.probes.empty()) return true;
  if (!plan.notify.empty() && notify_round_due(state, plan.notify, now)) return true;
  // Nothing could be taken: sleep until something of theirs comes due, as a claim that
  // found nothing would have.
  schedule.more_due = false;
  int64_t next = std::min({now + settings.poll_interval_ms, schedule.quiet_http.until_ms(now), plan.next_breaker_ms});
  if (!plan.notify.empty()) next = std::min(next, schedule.notify.due_ms);
  schedule.next_claim_ms = next;
  return false;
}

size_t claim_and_deliver(WorkerState& state) {
  // Claimed HTTP messages go to libcurl only once the claim has committed: a claim that
  // fails rolls back, and nothing it took may have been sent.
  std::vector<store::ClaimedMessage> to_send;
  std::vector<std::string> probed, notify;
  std::vector<std::string> found_nothing;  // HTTP endpoints of the claim, quiet from now on
  int64_t claim_id = 0;
  in_settling_transaction(state, "pg_outbox: claiming messages", [&] {
    require_same_extension(state);
    // Read before the endpoints are: a change after it ends what this claim finds quiet.
    const uint64_t endpoints_version = pg_atomic_read_u64(&state.slot.endpoints_version);
    refresh_endpoints(state);
    const int64_t now = state.now_ms();
    const core::ClaimSettings sizes = claim_settings();
    auto views = claim_views(state, now);
    core::ClaimPlan plan = core::plan_claim(views, sizes, state.in_flight.size(), state.in_flight.held_bytes(),
                                            state.schedule.claim_round, now);
    state.schedule.claim_round = plan.next_round;
    notify = plan.notify;
    std::vector<int64_t> excluded = state.in_flight_ids();
    state.schedule.more_due = false;
    if (!plan.http.empty() && plan.limit == 0) state.schedule.room_wanted = true;  // no byte budget left
    if (!plan.http.empty() && plan.limit > 0) {
      auto claimed =
          claim_messages(state, plan.http, plan.limit, excluded, plan.byte_budget, http_claim_for(state, plan.http));
      state.schedule.more_due = claimed.size() == static_cast<size_t>(plan.limit);
      if (!saw_everything(plan, claimed)) state.schedule.room_wanted = true;
      found_nothing = found_nothing_in(plan, claimed);
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
      // claimed otherwise (NOTIFY's, just after this) or that the claim passed over (a
      // row another transaction holds locked): the NOTIFY round, a commit's wake or the
      // poll comes for those.
      for (const store::ClaimedMessage& m : to_send) excluded.push_back(m.id);
      // The NOTIFY endpoints' due times are their round's to find (notify.cpp), which
      // follows this claim when due: a drain of NOTIFY alone asks for none here.
      const bool notify_asks = notify_round_due(state, plan.notify, now);
      std::vector<std::string> asked;
      for (const std::string& name : plan.all_active)
        if (!notify_asks || std::find(plan.notify.begin(), plan.notify.end(), name) == plan.notify.end())
          asked.push_back(name);
      std::optional<int64_t> due_in = asked.empty() ? std::nullopt : store::next_due_in_ms(asked, excluded);
      int64_t next = core::next_claim_at(now, settings.poll_interval_ms, plan.next_breaker_ms, due_in);
      // The quiet endpoints were left out of due_in: their due times are in the quiet's end.
      core::QuietEndpoints& quiet = state.schedule.quiet_http;
      quiet.note(found_nothing, now, next, endpoints_version);
      state.schedule.next_claim_ms = std::min(next, quiet.until_ms(now));
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
