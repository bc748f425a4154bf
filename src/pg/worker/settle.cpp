// Writing results back: every endpoint's results in one short transaction, which can
// fail and be retried without losing or double-counting anything; when it fails, each
// endpoint's results alone, and an endpoint that fails alone is parked (parking.hpp).
#include "pg/boundary/spi.hpp"
#include "pg/producer/queued_count.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/runtime/shared_state.hpp"
#include "pg/worker/constants.hpp"
#include "pg/worker/failures.hpp"
#include "pg/worker/steps.hpp"

extern "C" {
#include "utils/guc.h"
}

#include <algorithm>
#include <limits>

namespace pg_outbox::pg::worker {

namespace {

constexpr const char* kAloneLockTimeout = "100ms";

// After the commit of a transaction that settled: its counts are published, and the
// breakers it wrote are clean (not before: a failed transaction wrote nothing).
void committed(WorkerState& state) {
  publish_counts(state);
  state.endpoints.breakers_committed();
  log_retired(state);
}

// A claim's row goes when its last message is settled, but not while results of its
// messages wait with a parked endpoint: a worker that starts again must still find
// them claimed, and count the attempt.
void hold_back_claims(WorkerState& state) {
  std::vector<int64_t>& claims = state.results.pending().finished_claims;
  if (state.parking.holds_results()) {
    state.in_flight.keep_finished_claims(claims);
  } else {
    for (int64_t claim : state.in_flight.take_finished_claims()) claims.push_back(claim);
  }
}

// One endpoint's results in a transaction of their own, under a short lock timeout.
bool settle_alone(WorkerState& state, store::Settlements& results, std::string& error) {
  auto failed = rolled_back_on_error([&] {
    in_transaction("pg_outbox: settling one endpoint", [&] {
      require_same_extension(state);
      pg_call([] {
        (void)set_config_option("lock_timeout", kAloneLockTimeout, PGC_SUSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0,
                                false);
      });
      store::settle(results, store::kept(), store::Succession::kClaimedByWorker);
    });
  });
  if (failed) error = failed->message;
  return !failed;
}

// Writing everything together failed: each endpoint's results alone, then what belongs
// to none (the claims whose every message is settled). An endpoint whose write fails
// alone is parked with its results.
void settle_apart(WorkerState& state, const std::string& error) {
  pg_call([&] {
    ereport(LOG, (errmsg("pg_outbox worker: writing the results of every endpoint together failed: %s", error.c_str()),
                  errdetail("The worker writes them endpoint by endpoint.")));
  });
  auto groups = by_endpoint(state.results.pending());
  try {
    for (auto& [endpoint, results] : groups) {
      std::string alone_error;
      if (settle_alone(state, results, alone_error)) {
        written(state, results);
        results = store::Settlements{};
      } else {
        state.parking.park(endpoint, std::move(results), alone_error, state.now_ms());
      }
    }
  } catch (...) {
    // The extension may be gone (recover_from_error decides): what was not written yet
    // goes back with the rest.
    for (auto& [endpoint, results] : groups) state.results.pending().take_results(results);
    throw;
  }
}

// Parked endpoints whose time has come, with results to write: alone again.
void retry_parked(WorkerState& state) {
  for (const std::string& endpoint : state.parking.due(state.now_ms())) {
    store::Settlements results = state.parking.take_results(endpoint);
    std::string error;
    bool ok = false;
    try {
      ok = settle_alone(state, results, error);
    } catch (...) {
      state.parking.keep_results(endpoint, results);
      throw;
    }
    if (ok) {
      written(state, results);
      if (state.parking.unpark(endpoint)) state.schedule.more_due = true;
    } else {
      state.parking.park(endpoint, std::move(results), error, state.now_ms());
    }
  }
}

}  // namespace

int64_t results_due_at(const WorkerState& state) {
  const store::Settlements& pending = state.results.pending();
  if (pending.empty()) return std::numeric_limits<int64_t>::max();
  // What changes the worker's next steps: failures, give-backs, and an ordered key's
  // message (the key's next one is claimed once it is written). Claims finished with
  // nothing else to write (after a parked endpoint's results) go at once too: until
  // then outbox.message() says in_flight. A dirty breaker alone is no reason to wake:
  // it is written with the next results, or at the next round (its row may be locked,
  // and writing it must not become a busy loop).
  bool urgent = !pending.retry.empty() || !pending.dead.empty() || !pending.given_back.empty() || pending.sent.empty();
  for (size_t i = 0; !urgent && i < pending.sent.size(); ++i) urgent = pending.sent[i].ordering_key.has_value();
  return core::settle_at_ms(pending.sent.size(), urgent, state.schedule.last_settle, state.now_ms());
}

void settle(WorkerState& state, Settling when) {
  state.parking.set_aside(state.results.pending());
  retry_parked(state);
  hold_back_claims(state);
  if (state.results.empty() && !state.endpoints.any_breaker_dirty()) return;
  // Results not due yet wait, and a dirty breaker with them.
  if (when == Settling::kWhenDue && !state.results.empty() && state.now_ms() < results_due_at(state)) return;
  auto write_all = [&] {
    require_same_extension(state);
    // Delivered messages go to the history partition of their sent_at, or to its default
    // partition when housekeeping could not create that one in time.
    store::settle(state.results.pending(), store::kept(), store::Succession::kClaimedByWorker);
    state.endpoints.save_breakers();
  };
  try {
    if (auto failed = rolled_back_on_error([&] { in_transaction("pg_outbox: settling deliveries", write_all); })) {
      state.endpoints.breakers_not_written();
      // Each endpoint's results alone (a failing one is parked with them), then what
      // belongs to no endpoint: finished claims and the breakers.
      settle_apart(state, failed->message);
      hold_back_claims(state);
      in_transaction("pg_outbox: settling deliveries", write_all);
    }
  } catch (...) {
    state.endpoints.breakers_not_written();  // still dirty: written again by the next settle
    throw;
  }
  // The counts of results parked with their endpoint are published too: they are
  // written once the endpoint is free, or their messages are delivered again.
  committed(state);
  written(state, state.results.pending());  // (settle_apart took care of what it wrote)
  state.schedule.last_settle = {state.now_ms(), state.results.pending().sent.size()};
  state.results.pending() = store::Settlements{};
}

// max_pending's counts (producer/queued_count.hpp) lose what left the queue; the next
// claim comes at once when what left the worker's hands makes room that messages waited
// for, when an ordered key's head left (its next message is ready), or when a commit's
// wake waits for the end of the coalescing gap, and no later than the retries' due times.
void written(WorkerState& state, const store::Settlements& results) {
  std::unordered_map<std::string, int64_t> removed;
  for (const auto& s : results.sent) removed[s.endpoint]++;
  for (const auto& d : results.dead) removed[d.endpoint]++;
  // A result may give its endpoint something to claim: a key's next message, a retry.
  core::QuietEndpoints& quiet = state.schedule.quiet_http;
  if (!quiet.empty()) {
    for (const auto& [endpoint, n] : removed) quiet.forget(endpoint);
    for (const auto& r : results.retry) quiet.forget(r.endpoint);
  }
  for (const auto& [endpoint, n] : removed) queued_removed(state.slot, endpoint, n);
  const int64_t now = state.now_ms();
  for (const auto& r : results.retry)
    state.schedule.next_claim_ms = std::min(state.schedule.next_claim_ms, now + r.delay_ms);
  // A waiting wake is the flag the commit left set (worker.cpp, round): this claim takes
  // its messages now, up to a gap sooner (0.3 ms of p50 at 1,000 messages a second, with
  // the 2 ms gap of then). Not for every result: at that rate a claim after each settle
  // found nothing in a quarter of the worker's rounds (the claim before had taken
  // everything due), each a transaction and two statements.
  const bool left = !removed.empty() || !results.retry.empty() || !results.finished_claims.empty();
  const auto keyed = [](const auto& result) { return result.ordering_key.has_value(); };
  const bool head_left = std::any_of(results.sent.begin(), results.sent.end(), keyed) ||
                         std::any_of(results.dead.begin(), results.dead.end(), keyed);
  const bool commit_waits = pg_atomic_read_u32(&state.slot.wake_requested) != 0;
  if ((left && (state.schedule.room_wanted || commit_waits)) || head_left) {
    state.schedule.more_due = true;
    state.schedule.room_wanted = false;
  }
}

void in_settling_transaction(WorkerState& state, const char* activity, const std::function<void()>& body) {
  Results::Saved saved = state.results.save();
  try {
    in_transaction(activity, body);
  } catch (...) {
    state.results.restore(std::move(saved));
    state.endpoints.breakers_not_written();
    throw;
  }
  committed(state);
}

}  // namespace pg_outbox::pg::worker
