// NOTIFY endpoints: claimed, notified and settled in one transaction of their own (the
// notifications leave at its commit, with the rows' new state). The other endpoints'
// results wait outside it. A NOTIFY that fails (a full notification queue fails the
// commit, a channel PostgreSQL refuses) rolls back only this transaction; when it fails
// for several endpoints, each is tried alone, to park only the one that fails.
#include "core/validation.hpp"
#include "pg/boundary/spi.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/store/claims.hpp"
#include "pg/worker/constants.hpp"
#include "pg/worker/failures.hpp"
#include "pg/worker/steps.hpp"

namespace pg_outbox::pg::worker {

namespace {

// PostgreSQL refuses NOTIFY payloads of 8000 bytes or more.
constexpr size_t kNotifyPayloadLimit = 8000;

// claimed (in id order, as store::claim returns it) -> answered: notified (sent at
// commit), or dead when too large.
void notify_claimed(WorkerState& state, const std::vector<store::ClaimedMessage>& claimed) {
  for (const store::ClaimedMessage& m : claimed) {
    if (m.too_large || m.payload.size() >= kNotifyPayloadLimit) {
      dead_letter_unsent(state, m, core::DeadReason::PayloadTooLarge,
                         m.too_large ? core::payload_too_large(m.payload_size, settings.max_payload_size)
                                     : "NOTIFY envelope of " + std::to_string(m.payload.size()) +
                                           " bytes exceeds PostgreSQL's limit of 7999");
      continue;
    }
    store::notify(state.endpoints.at(m.endpoint).row.channel, m.payload);
    store::Settlements::Attempt attempt;
    attempt.started_ms = state.now_ms();  // the notification itself leaves at commit: not timed
    state.results.sent(m.id, 0, m.attempts, m.endpoint, m.ordering_lock, std::move(attempt));
  }
}

}  // namespace

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
                                   store::ClaimFor::kNotify);
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

}  // namespace pg_outbox::pg::worker
