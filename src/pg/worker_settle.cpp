// Writing results back (batched short transactions that can fail and be retried without
// losing or double-counting anything), the shared counters, and housekeeping.
#include "pg/worker.hpp"

#include "core/history_layout.hpp"
#include "pg/shared_state.hpp"
#include "pg/worker_internal.hpp"

#include <algorithm>
#include <cstring>

namespace pg_outbox::pg {

using namespace worker_detail;

void Worker::settle_pending() {
  bool dirty_breakers =
      std::any_of(endpoints_.begin(), endpoints_.end(), [](const auto& e) { return e.second.breaker_dirty; });
  if (pending_.empty() && !dirty_breakers) return;
  auto settle = [&] {
    require_same_extension();
    // Delivered messages go to the history partition of their sent_at, or to its
    // default partition when housekeeping could not create that one in time.
    store_.settle(pending_, settings.sent_retention_s > 0);
    for (auto& [name, endpoint] : endpoints_) {
      if (!endpoint.breaker_dirty) continue;
      store_.save_breaker(name, endpoint.row.breaker);
      breakers_written_.push_back(name);
    }
  };
  if (IsTransactionState()) {
    settle();  // the caller's in_settling_transaction publishes once it has committed
  } else {
    try {
      in_transaction("pg_outbox: settling deliveries", settle);
    } catch (...) {
      breakers_written_.clear();  // still dirty: written again by the next settle
      throw;
    }
    committed();
  }
  for (const auto& r : pending_.retry) next_claim_ms_ = std::min(next_claim_ms_, now_ms() + r.delay_ms);
  bool unblocks = !pending_.sent.empty() || !pending_.dead.empty() || !pending_.finished_claims.empty();
  pending_ = Settlements{};
  if (unblocks) more_due_ = true;  // an ordered key's next message, or room for more
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
  give_back_stale_requests();
  in_settling_transaction("pg_outbox: housekeeping", [&] {
    require_same_extension();
    if (settings.sent_retention_s > 0) {
      prepare_history_if_due();  // sets history_width_s_ for this retention
      store_.retire_history(settings.sent_retention_s, history_width_s_);
    }
    if (settings.dlq_retention_s >= 0) store_.purge_dead_letters(settings.dlq_retention_s, kPurgeBatch);
    if (orphans_due) {
      for (auto [id, attempts] : store_.find_orphans(in_flight_ids(), kOrphanBatch))
        pending_.dead.push_back({id, core::DeadReason::InvalidMessage, "endpoint does not exist", 0, {}, attempts});
      settle_pending();
    }
  });
}

}  // namespace pg_outbox::pg
