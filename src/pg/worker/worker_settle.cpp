// Writing results back (batched short transactions that can fail and be retried without
// losing or double-counting anything), the shared counters, and housekeeping.
#include "pg/worker/worker.hpp"

#include "core/history_layout.hpp"
#include "pg/boundary/boundary.hpp"
#include "pg/producer/queued_count.hpp"
#include "pg/runtime/shared_state.hpp"
#include "pg/worker/worker_internal.hpp"

#include <algorithm>
#include <cstring>

namespace pg_outbox::pg {

using namespace worker_detail;

void Worker::settle_pending() {
  set_aside_results_of_parked();
  retry_parked();
  bool dirty_breakers =
      std::any_of(endpoints_.begin(), endpoints_.end(), [](const auto& e) { return e.second.breaker_dirty; });
  if (pending_.empty() && !dirty_breakers) return;
  auto settle = [&] {
    require_same_extension();
    // Delivered messages go to the history partition of their sent_at, or to its
    // default partition when housekeeping could not create that one in time.
    store_.settle(pending_, settings.sent_retention_s > 0);
    for (auto& [name, endpoint] : endpoints_)
      if (endpoint.breaker_dirty && store_.save_breaker(name, endpoint.row.breaker)) breakers_written_.push_back(name);
  };
  try {
    try {
      hold_back_claims();
      in_transaction("pg_outbox: settling deliveries", settle);
    } catch (const PgError& e) {
      const int sqlstate = e.data()->sqlerrcode;
      const std::string error = e.what();
      abort_transaction();
      breakers_written_.clear();
      if (extension_may_be_gone(sqlstate)) throw;
      // Each endpoint's results alone (a failing one is parked with them), then what
      // belongs to no endpoint: finished claims and the breakers.
      settle_apart(error);
      hold_back_claims();
      in_transaction("pg_outbox: settling deliveries", settle);
    }
  } catch (...) {
    breakers_written_.clear();  // still dirty: written again by the next settle
    throw;
  }
  // The counts of results parked with their endpoint are published too: they are
  // written once the endpoint is free, or their messages are delivered again.
  committed();
  written(pending_);  // (settle_apart took care of what it wrote; parked results are not here)
  pending_ = Settlements{};
}

// After a transaction that wrote these results has committed: max_pending's counts
// (queued_count.cpp) lose what left the queue; the next claim comes when a retry is
// due, or at once when something left (an ordered key's next message, or room).
void Worker::written(const Settlements& results) {
  std::unordered_map<std::string, int64_t> removed;
  for (const auto& s : results.sent) removed[s.endpoint]++;
  for (const auto& d : results.dead) removed[d.endpoint]++;
  for (const auto& [endpoint, n] : removed) queued_removed(slot_, endpoint, n);
  for (const auto& r : results.retry) next_claim_ms_ = std::min(next_claim_ms_, now_ms() + r.delay_ms);
  if (!removed.empty() || !results.finished_claims.empty()) more_due_ = true;
}

// Counts the queue of every endpoint with a max_pending: when the worker starts, when an
// endpoint gets a max_pending, and when another session removed rows. Until then
// enqueue counts rows itself.
void Worker::recount_queued() {
  in_transaction("pg_outbox: counting the queue for max_pending", [&] {
    require_same_extension();
    refresh_endpoints();
    begin_recount(slot_, max_pending_endpoints_);
    std::vector<int64_t> counts = store_.count_queued(max_pending_endpoints_);
    for (size_t i = 0; i < counts.size(); ++i) finish_recount(slot_, max_pending_endpoints_[i], counts[i]);
  });
  recount_queued_ = false;
}

// A transaction that may settle results (the claim, with NOTIFY's, and housekeeping).
// If it fails, the results and counts go back to what they were before it: results it
// wrote are unwritten again, and NOTIFY results it made were rolled back with their
// notifications, so they must be neither forgotten nor counted. Counts are published
// only once the transaction has committed.
void Worker::in_settling_transaction(const char* activity, const std::function<void()>& body) {
  Settlements saved = pending_;
  auto saved_counts = counted_;
  try {
    in_transaction(activity, body);
  } catch (...) {
    pending_ = std::move(saved);
    counted_ = std::move(saved_counts);
    breakers_written_.clear();
    throw;
  }
  committed();
}

// After the commit of a transaction that settled: its counts are published, and the
// breakers it wrote are clean (not before: a failed transaction wrote nothing).
void Worker::committed() {
  publish_counts();
  for (const std::string& name : breakers_written_) {
    auto endpoint = endpoints_.find(name);
    if (endpoint != endpoints_.end()) endpoint->second.breaker_dirty = false;
  }
  breakers_written_.clear();
}

// Adds the counts of committed results to the shared counters of worker_status() and
// metrics().
void Worker::publish_counts() {
  if (counted_.empty()) return;
  SpinLockAcquire(&slot_.mutex);
  for (const auto& [name, counts] : counted_) {
    int i = 0;
    while (i < slot_.counted_endpoints && strcmp(slot_.endpoints[i].name, name.c_str()) != 0) ++i;
    if (i == slot_.counted_endpoints && i < kCountedEndpoints) {
      strlcpy(slot_.endpoints[i].name, name.c_str(), sizeof slot_.endpoints[i].name);
      slot_.counted_endpoints++;
    }
    if (i < kCountedEndpoints) {
      slot_.endpoints[i].sent += counts[0];
      slot_.endpoints[i].retried += counts[1];
      slot_.endpoints[i].dead += counts[2];
    }
    slot_.sent += counts[0];
    slot_.retried += counts[1];
    slot_.dead_lettered += counts[2];
  }
  SpinLockRelease(&slot_.mutex);
  counted_.clear();
}

void Worker::count(const std::string& endpoint, core::Verdict verdict) {
  auto& counts = counted_[endpoint];
  counts[verdict == core::Verdict::Sent ? 0 : verdict == core::Verdict::Retry ? 1 : 2]++;
}

// The history has partitions for the coming minutes (or hours, for a long retention)
// before a delivery needs one: created by housekeeping when less than two widths remain,
// and at once for a new retention. Creating one needs a moment alone with the history;
// when a reader (pg_dump, a long report) holds it past the lock timeout, deliveries go to
// the default partition meanwhile and the worker tries again 10 s later, not every
// second.
void Worker::prepare_history_if_due() {
  int width_s = core::history_partition_width_s(settings.sent_retention_s);
  int64_t now = now_ms();
  if (width_s == history_width_s_ && (now + 2000LL * width_s < history_covered_ms_ || now < history_retry_ms_)) return;
  history_width_s_ = width_s;
  history_covered_ms_ = store_.prepare_history(width_s);
  history_retry_ms_ = history_covered_ms_ < now + 1000LL * width_s ? now + 10000 : 0;
}

void Worker::housekeeping() {
  int64_t now = now_ms();
  next_housekeeping_ms_ = now + kHousekeepingEveryMs;
  bool orphans_due = now >= next_orphan_check_ms_;
  if (orphans_due) next_orphan_check_ms_ = now + kOrphanCheckEveryMs;
  if (queued_recount_due(slot_)) recount_queued_ = true;
  give_back_stale_requests();
  // Housekeeping can wait, deliveries must not: a failure (a lock an operator holds on
  // the history or the DLQ past the lock timeout) is logged, at most once a minute, and
  // tried again at the next round.
  try {
    in_settling_transaction("pg_outbox: housekeeping", [&] {
      require_same_extension();
      if (settings.sent_retention_s > 0) {
        prepare_history_if_due();  // sets history_width_s_ for this retention
        store_.retire_history(settings.sent_retention_s, history_width_s_);
      }
      if (settings.dlq_retention_s >= 0) store_.purge_dead_letters(settings.dlq_retention_s, kPurgeBatch);
      // Dead-lettered by the next settle, with the other results.
      if (orphans_due)
        for (auto& orphan : store_.find_orphans(in_flight_ids(), kOrphanBatch))
          pending_.dead.push_back({orphan.id,
                                   core::DeadReason::InvalidMessage,
                                   "endpoint does not exist",
                                   0,
                                   {},
                                   orphan.attempts,
                                   std::move(orphan.endpoint),
                                   std::nullopt});
    });
  } catch (const PgError& e) {
    const int sqlstate = e.data()->sqlerrcode;
    const std::string error = e.what();
    abort_transaction();
    if (extension_may_be_gone(sqlstate)) throw;
    if (now < housekeeping_quiet_until_ms_) return;
    housekeeping_quiet_until_ms_ = now + 60000;
    pg_call([&] {
      ereport(LOG, (errcode(sqlstate), errmsg("pg_outbox worker: housekeeping failed: %s", error.c_str()),
                    errdetail("Deliveries go on; housekeeping is tried again every second.")));
    });
  }
}

}  // namespace pg_outbox::pg
