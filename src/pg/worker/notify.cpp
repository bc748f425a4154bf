// NOTIFY endpoints: claimed, notified and settled in one transaction of their own (the
// notifications leave at its commit, with the rows' new state). The other endpoints'
// results wait outside it. A NOTIFY that fails (a full notification queue fails the
// commit, a channel PostgreSQL refuses) rolls back only this transaction; when it fails
// for several endpoints, each is tried alone, to park only the one that fails. Once a
// round found nothing, the next waits for a reason (Schedule::NotifyRounds).
#include "core/notify_envelope.hpp"
#include "core/validation.hpp"
#include "pg/boundary/spi.hpp"
#include "pg/ordering/successors.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/store/claims.hpp"
#include "pg/worker/constants.hpp"
#include "pg/worker/failures.hpp"
#include "pg/worker/steps.hpp"

#include <algorithm>

namespace pg_outbox::pg::worker {

namespace {

// PostgreSQL refuses NOTIFY payloads of 8000 bytes or more.
constexpr size_t kNotifyPayloadLimit = 8000;

// claimed (in id order, as store::claim returns it) -> answered: notified (sent at
// commit), or dead when too large.
void notify_claimed(WorkerState& state, const std::vector<store::ClaimedMessage>& claimed) {
  for (const store::ClaimedMessage& m : claimed) {
    if (m.too_large) {
      dead_letter_unsent(state, m, core::DeadReason::PayloadTooLarge,
                         core::payload_too_large(m.payload_size, settings.max_payload_size));
      continue;
    }
    const std::string envelope = core::notify_envelope(
        m.id, m.payload, m.has_event_type ? std::optional<std::string_view>(m.event_type) : std::nullopt);
    if (envelope.size() >= kNotifyPayloadLimit) {
      dead_letter_unsent(
          state, m, core::DeadReason::PayloadTooLarge,
          "NOTIFY envelope of " + std::to_string(envelope.size()) + " bytes exceeds PostgreSQL's limit of 7999");
      continue;
    }
    store::notify(state.endpoints.at(m.endpoint).row.channel, envelope);
    store::Settlements::Attempt attempt;
    attempt.started_ms = state.now_ms();  // the notification itself leaves at commit: not timed
    state.results.sent(m.id, m.tid, 0, m.attempts, m.endpoint, m.ordering_key, std::move(attempt));
  }
}

// One round of the NOTIFY endpoints given (each alone after a failure of several).
size_t notify_round(WorkerState& state, const std::vector<std::string>& endpoints) {
  store::Settlements others = std::move(state.results.pending());
  state.results.pending() = store::Settlements{};
  size_t claimed = 0;
  std::optional<Failure> failed;
  try {
    failed = rolled_back_on_error([&] {
      in_settling_transaction(state, "pg_outbox: NOTIFY", [&] {
        require_same_extension(state);
        auto rows = claim_messages(state, endpoints, settings.batch_size, {}, settings.max_inflight_bytes,
                                   store::ClaimFor::kPayload);
        claimed = rows.size();
        notify_claimed(state, rows);
        store::settle(state.results.pending(), store::kept(), store::Succession::kClaimedByWorker);
      });
    });
  } catch (...) {
    state.results.pending() = std::move(others);
    throw;
  }
  if (failed) {
    state.results.pending() = std::move(others);
    if (endpoints.size() == 1) {
      state.parking.park(endpoints[0], store::Settlements{}, failed->message, state.now_ms());
      return 0;
    }
    size_t total = 0;
    for (const std::string& endpoint : endpoints) total += notify_round(state, {endpoint});
    return total;
  }
  written(state, state.results.pending());  // NOTIFY's own results, written in its transaction
  state.results.pending() = std::move(others);
  for (const std::string& endpoint : endpoints)
    if (state.parking.unpark(endpoint)) state.schedule.more_due = true;
  if (claimed == static_cast<size_t>(settings.batch_size)) state.schedule.more_due = true;
  return claimed;
}

// The NOTIFY endpoints of a claim as a set: the claim rotates their order.
std::vector<std::string> as_set(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  return names;
}

// After a NOTIFY round: one that claimed nothing makes the next wait for a reason. Not
// while the worker holds a key's next message of theirs (one another transaction held
// at the claim: its release wakes nobody), nor when their next due time is unknown.
void after_notify_round(WorkerState& state, const std::vector<std::string>& notify, size_t claimed, int64_t now) {
  Schedule::NotifyRounds& rounds = state.schedule.notify;
  rounds.woken = false;
  rounds.quiet = claimed == 0 && successors::ready(notify).ids.empty();
  if (!rounds.quiet) {
    // The claim before this round left their due times to it: the next round looks at
    // once, and goes quiet until the earliest of them if it finds nothing.
    if (claimed > 0) state.schedule.next_claim_ms = std::min(state.schedule.next_claim_ms, now);
    return;
  }
  rounds.endpoints = as_set(notify);
  rounds.due_ms = now + settings.poll_interval_ms;  // a COMMIT PREPARED wakes nobody
  const std::optional<Failure> failed = rolled_back_on_error([&] {
    in_transaction("pg_outbox: when NOTIFY messages come due", [&] {
      if (std::optional<int64_t> due_in = store::next_due_in_ms(notify, {}))
        rounds.due_ms = std::min(rounds.due_ms, now + std::max<int64_t>(*due_in, 0));
    });
  });
  if (failed) rounds.quiet = false;
  // The claim before this round left their due times out of its own (claim.cpp).
  state.schedule.next_claim_ms = std::min(state.schedule.next_claim_ms, rounds.due_ms);
}

}  // namespace

bool notify_round_due(const WorkerState& state, const std::vector<std::string>& notify, int64_t now) {
  const Schedule::NotifyRounds& rounds = state.schedule.notify;
  return rounds.woken || !rounds.quiet || now >= rounds.due_ms || rounds.endpoints != as_set(notify);
}

size_t notify_if_due(WorkerState& state, const std::vector<std::string>& endpoints) {
  const int64_t now = state.now_ms();
  if (!notify_round_due(state, endpoints, now)) return 0;
  const size_t claimed = notify_round(state, endpoints);
  after_notify_round(state, endpoints, claimed, now);
  return claimed;
}

}  // namespace pg_outbox::pg::worker
