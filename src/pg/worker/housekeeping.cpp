// What the worker does once a second besides delivering: requests past their lease go
// back, the history and the attempt log get their partitions and lose what retention
// passed, the DLQ's handled letters expire, messages whose endpoint is gone are
// dead-lettered, secrets whose rotation ended are deleted, replayed messages nobody
// announced are noticed, and max_pending's counts are made again when asked.
#include "core/partition_layout.hpp"
#include "pg/boundary/spi.hpp"
#include "pg/producer/queued_count.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/store/endpoints.hpp"
#include "pg/store/housekeeping.hpp"
#include "pg/store/replays.hpp"
#include "pg/worker/constants.hpp"
#include "pg/worker/failures.hpp"
#include "pg/worker/steps.hpp"

namespace pg_outbox::pg::worker {

namespace {

// A table partitioned by time (the history, the attempt log) has partitions for the
// coming minutes (or hours, for a long retention) before a settle needs one: created by
// housekeeping when less than two widths remain, and at once for a new retention.
// Creating one needs a moment alone with the table; when a reader (pg_dump, a long
// report) holds it past the lock timeout, rows go to the default partition meanwhile
// and the worker tries again 10 s later, not every second. Then what retention passed
// is dropped.
void keep_partitions(WorkerState& state, store::TimePartitioned table, Schedule::Partitions& partitions,
                     int retention_s) {
  const int width_s = core::partition_width_s(retention_s);
  const int64_t now = state.now_ms();
  if (width_s != partitions.width_s ||
      (now + 2000LL * width_s >= partitions.covered_ms && now >= partitions.retry_ms)) {
    partitions.width_s = width_s;
    partitions.covered_ms = store::prepare_partitions(table, width_s);
    partitions.retry_ms = partitions.covered_ms < now + 1000LL * width_s ? now + 10000 : 0;
  }
  store::retire_partitions(table, retention_s, width_s);
}

// Messages of endpoints that no longer exist: dead-lettered by the next settle, with the
// other results.
void dead_letter_orphans(WorkerState& state) {
  for (auto& orphan : store::find_orphans(state.in_flight_ids(), kOrphanBatch)) {
    store::Settlements::Dead dead;
    dead.id = orphan.id;
    dead.reason = core::DeadReason::InvalidMessage;
    dead.error = "endpoint does not exist";
    dead.attempts = orphan.attempts;
    dead.endpoint = std::move(orphan.endpoint);
    dead.ordering_key = orphan.ordering_key;  // its key's next message is promoted under its lock
    state.results.dead(std::move(dead));
  }
}

}  // namespace

void housekeeping(WorkerState& state) {
  const int64_t now = state.now_ms();
  Schedule& schedule = state.schedule;
  schedule.next_housekeeping_ms = now + kHousekeepingEveryMs;
  const bool orphans_due = now >= schedule.next_orphan_check_ms;
  if (orphans_due) schedule.next_orphan_check_ms = now + kOrphanCheckEveryMs;
  if (queued_recount_due(state.slot)) schedule.recount_queued = true;
  give_back_stale_requests(state);
  // Housekeeping can wait, deliveries must not: a failure (a lock an operator holds on
  // the history or the DLQ past the lock timeout) is logged, at most once a minute, and
  // tried again at the next round.
  auto failed = rolled_back_on_error([&] {
    in_settling_transaction(state, "pg_outbox: housekeeping", [&] {
      require_same_extension(state);
      if (settings.sent_retention_s > 0)
        keep_partitions(state, store::TimePartitioned::kHistory, schedule.history, settings.sent_retention_s);
      if (settings.attempt_retention_s > 0)
        keep_partitions(state, store::TimePartitioned::kAttempts, schedule.attempts, settings.attempt_retention_s);
      if (settings.dlq_retention_s >= 0) store::purge_dead_letters(settings.dlq_retention_s, kPurgeBatch);
      // Also when nothing is claimed: an endpoint gone from the table leaves its held
      // messages as heads, which the orphan check below then finds.
      (void)settle_stale(state);
      if (orphans_due) dead_letter_orphans(state);
      // A replay committed by COMMIT PREPARED said nothing to the worker.
      if (!schedule.replays_waiting) schedule.replays_waiting = store::replays_waiting();
      // Only once a secret the worker knows has expired: no statement in steady state.
      if (state.endpoints.any_secret_expired(now)) store::delete_expired_secrets();
    });
  });
  if (failed)
    log_failure_once_a_minute(*failed, "housekeeping", "Deliveries go on; housekeeping is tried again every second.",
                              now, schedule.housekeeping_quiet_until_ms);
}

// Counts the queue of every endpoint with a max_pending: when the worker starts, when an
// endpoint gets a max_pending, and when another session removed rows. Until then enqueue
// counts rows itself.
void recount_queued(WorkerState& state) {
  in_transaction("pg_outbox: counting the queue for max_pending", [&] {
    require_same_extension(state);
    refresh_endpoints(state);
    const std::vector<std::string>& endpoints = state.endpoints.with_max_pending();
    begin_recount(state.slot, endpoints);
    std::vector<int64_t> counts = count_queued_rows(endpoints);
    for (size_t i = 0; i < counts.size(); ++i) finish_recount(state.slot, endpoints[i], counts[i]);
  });
  state.schedule.recount_queued = false;
}

}  // namespace pg_outbox::pg::worker
