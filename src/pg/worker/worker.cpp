// The worker's loop and its life: waiting for work, the steps of one round, waiting
// for the extension (at its version), recovering from errors. The steps themselves:
// worker_claim.cpp (claim and hand out), worker_outcomes.cpp (responses, breaker),
// worker_settle.cpp (writing results back, housekeeping).
#include "pg/worker/worker.hpp"

#include "pg/boundary/boundary.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/runtime/shared_state.hpp"
#include "pg/worker/worker_internal.hpp"

extern "C" {
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

#include <algorithm>

namespace pg_outbox::pg {

using namespace worker_detail;

namespace {

// The delivery thread to stop when the process exits: a FATAL, SIGTERM or the
// postmaster's death end the process through proc_exit, which never unwinds the
// worker's stack, so the thread is joined by this callback instead of the destructor.
http::DeliveryThread* running_delivery_thread = nullptr;

void stop_delivery_thread(int, Datum) {
  if (running_delivery_thread == nullptr) return;
  try {
    running_delivery_thread->stop();
  } catch (...) {
    // join failed (cannot happen for a joinable thread): the process is exiting anyway
  }
  running_delivery_thread = nullptr;
}

}  // namespace

Worker::Worker(DatabaseSlot& slot) : slot_(slot), delivery_(settings.max_concurrency), random_(std::random_device{}()) {
  delivery_.set_egress_policy(egress_policy());
  static bool exit_callback_registered = false;
  const int results_fd = delivery_.results_fd();
  wait_set_ = pg_call([&] {
    if (!exit_callback_registered) before_shmem_exit(stop_delivery_thread, 0);
    // Made once: the worker waits on its latch, the postmaster and the delivery
    // thread's results, many thousand times a second under load.
    WaitEventSet* set = CreateWaitEventSet(TopMemoryContext, 3);
    AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, nullptr);
    AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, nullptr, nullptr);
    AddWaitEventToSet(set, WL_SOCKET_READABLE, results_fd, nullptr, nullptr);
    return set;
  });
  exit_callback_registered = true;
  running_delivery_thread = &delivery_;
}

// Reached only when the loop ends by exception; the worker then exits with FATAL, which
// also releases the wait set.
Worker::~Worker() {
  running_delivery_thread = nullptr;
  delivery_.stop();
}

void Worker::run() {
  slot_.worker_latch = MyLatch;  // from now on a commit in this database wakes this process
  // A commit before that found no latch to set (and the launcher's own wake_requested
  // made it skip SetLatch): look at once, not after a poll interval.
  SetLatch(MyLatch);
  // The worker's own commits need not wait for the WAL flush: a crash can only undo
  // a claim (the row is pending again), a settle (the row is in_flight again, which
  // the next worker puts back to pending) or a dead-lettering (likewise): each leads
  // to one more delivery, never to a lost message. Producers' commits are untouched.
  pg_call([] {
    SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
    // The worker is a superuser: its queries must never resolve a name through a
    // schema that another role can create objects in (public, "$user").
    SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
    // Plans that cannot flip: every statement of the worker has an index path, and a
    // queue's statistics are always wrong (an ANALYZE of the drained queue says "empty",
    // a minute later it holds 20,000 rows). Sequential and bitmap scans are priced out
    // of the worker's plans, so that the claim and the settle cost the same whatever
    // autovacuum last saw; a table with no usable index is still read.
    SetConfigOption("enable_seqscan", "off", PGC_SUSET, PGC_S_OVERRIDE);
    SetConfigOption("enable_bitmapscan", "off", PGC_SUSET, PGC_S_OVERRIDE);
    // Priced-out plans cost 1e10 and more, which would make every statement look worth
    // JIT-compiling: tens of milliseconds of LLVM for a claim of 2 ms.
    SetConfigOption("jit", "off", PGC_SUSET, PGC_S_OVERRIDE);
    // Bounded waits: a lock held by someone else (an operator's open transaction on an
    // endpoint or a message) fails the worker's statement after 500 ms instead of
    // holding the worker, and with it every delivery, for as long as the lock lives;
    // the endpoint it belongs to is then parked (worker_parking.cpp), its results kept.
    SetConfigOption("lock_timeout", "500ms", PGC_SUSET, PGC_S_OVERRIDE);
    // Every statement sees what committed before it (the claim's SKIP LOCKED, the commit
    // order's and max_pending's counts rely on it), whatever the database's default.
    SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET, PGC_S_OVERRIDE);
  });

  for (;;) {
    // Everything runs inside the try: an ERROR while waiting (a query cancel sent to
    // the worker) or while reloading is logged and backed off like any other.
    try {
      bool woken = wait_for_work();
      if (now_ms() < error_backoff_until_ms_) {
        collect_http_results();  // settled once the database is back
        continue;
      }
      iterate(woken);
      error_streak_ = 0;
    } catch (const http::DeliveryThread::Failed&) {
      throw;  // its requests are lost to this process: exit, recover_claims redoes them
    } catch (const ExtensionChanged&) {
      abort_transaction();
      on_extension_changed();
    } catch (const PgError& e) {
      // Copied now: the error lives in the transaction's memory, which the abort frees.
      recover_from_error(e.data()->sqlerrcode, e.what());
    } catch (const std::exception& e) {
      recover_from_error(ERRCODE_INTERNAL_ERROR, e.what());
    }
  }
}

// Sleeps on the latch until a commit, a signal, a response of the delivery thread or the
// next deadline; re-reads the GUCs after SIGHUP. Returns whether a commit asked for the
// wake.
bool Worker::wait_for_work() {
  int timeout = wait_timeout_ms();
  pg_call([&] {
    WaitEvent event;
    (void)WaitEventSetWait(wait_set_, timeout, &event, 1, PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
  });
  if (ConfigReloadPending) {
    ConfigReloadPending = false;
    pg_call([] { ProcessConfigFile(PGC_SIGHUP); });
    delivery_.set_max_concurrency(settings.max_concurrency);
    delivery_.set_egress_policy(egress_policy());
    more_due_ = true;  // batch size or enablement may have changed
    // Shown by worker_status(): tests and operators wait for this, not for a sleep.
    // PgReloadTime is this process's own last read of the files (a fresh worker
    // inherits the postmaster's), so it never claims a load the worker has not seen.
    SpinLockAcquire(&slot_.mutex);
    slot_.config_loaded_at = PgReloadTime;
    SpinLockRelease(&slot_.mutex);
  }
  return pg_atomic_exchange_u32(&slot_.wake_requested, 0) != 0;
}

// Disk full, statement_timeout, a dropped table...: roll back, log, back off, go on.
// Results not yet written stay in pending_ and are settled once the database is back.
// The extension was dropped (and perhaps created again): what was in flight belongs to
// tables that are gone; wait for the extension, then serve it afresh.
void Worker::on_extension_changed() {
  forget_deliveries();
  ready_ = false;
  pg_call([] {
    ereport(LOG, (errmsg("pg_outbox worker: the extension was dropped or created again"),
                  errdetail("Deliveries in flight for the old tables were abandoned.")));
  });
}

void Worker::recover_from_error(int sqlstate, std::string message) {
  abort_transaction();
  // Gone tables or functions: usually a DROP EXTENSION that committed while the
  // statement waited for its locks (the check at the start of the transaction saw the
  // extension still there). Then it is no error. With the extension still there it is
  // an ordinary error (a history partition dropped under a statement, say): the worker
  // keeps its deliveries and results, and retries.
  if (extension_may_be_gone(sqlstate)) {
    uint32_t oid = extension_oid_;
    try {
      in_transaction("pg_outbox: checking for the extension", [&] { oid = store_.extension_oid(); });
    } catch (const std::exception&) {
      abort_transaction();
    }
    if (oid != extension_oid_) {
      on_extension_changed();
      return;
    }
  }
  error_streak_ = std::min(error_streak_ + 1, 6);
  int backoff_ms = 100 << error_streak_;
  error_backoff_until_ms_ = now_ms() + backoff_ms;
  pg_call([&] {
    ereport(LOG, (errcode(sqlstate), errmsg("pg_outbox worker: %s", message.c_str()),
                  errdetail("The worker rolled back and retries in %d ms.", backoff_ms)));
  });
  publish_status("recovering from an error");
}

int Worker::wait_timeout_ms() const {
  // Responses wake the worker through the results fd: deliveries in flight need no
  // shorter wait.
  int64_t now = now_ms();
  if (now < error_backoff_until_ms_) return static_cast<int>(error_backoff_until_ms_ - now);
  if (!ready_ || !settings.enabled) return settings.poll_interval_ms;
  if (more_due_ || !pending_.empty()) return 0;
  int64_t until = std::min(next_claim_ms_, next_housekeeping_ms_);
  for (const auto& [name, parked] : parked_)
    if (parked.until_ms > now) until = std::min(until, parked.until_ms);  // (an expired one is retried now)
  return static_cast<int>(std::clamp<int64_t>(until - now, 0, settings.poll_interval_ms));
}

void Worker::iterate(bool woken) {
  collect_http_results();  // also when not ready: what the results fd announces is taken
  if (!prepare_database()) return;
  settle_pending();
  int64_t now = now_ms();
  if (!settings.enabled) {
    publish_status("disabled");
    return;
  }
  if (woken && !more_due_ && now < last_claim_ms_ + wake_gap_ms_) {
    // Under thousands of commits per second, one claim per few milliseconds takes
    // them all; a claim per commit would spend the producers' CPU on empty queries.
    next_claim_ms_ = std::min(next_claim_ms_, last_claim_ms_ + wake_gap_ms_);
    woken = false;
  }
  if ((woken || more_due_ || now >= next_claim_ms_) && claimable_outstanding() < claim_target() / 2) {
    last_claim_ms_ = now;
    size_t claimed = claim_and_deliver();
    wake_gap_ms_ = claimed > 0 ? kWakeCoalesceMinMs : std::min(2 * wake_gap_ms_, kWakeCoalesceMaxMs);
  }
  if (now >= next_housekeeping_ms_) housekeeping();
  if (recount_queued_) recount_queued();
  publish_status(deliveries_.empty() ? "idle" : "delivering");
}

// The worker serves its database while the extension is there at this library's
// version: it waits (logging why) for ALTER EXTENSION ... UPDATE, and exits when the
// extension is not there (never created, or dropped).
bool Worker::prepare_database() {
  if (ready_) return true;
  int64_t recovered = 0;
  std::string version;
  in_transaction("pg_outbox: checking for the extension", [&] {
    extension_oid_ = store_.extension_oid();
    if (extension_oid_ != 0) version = store_.extension_version();
    if (extension_oid_ != 0 && version == kVersion) {
      recovered = store_.recover_claims();
      webhook_ids_ = store_.webhook_id_source();
    }
  });
  if (extension_oid_ != 0 && version != kVersion) {
    // Tables of another version: touch nothing until ALTER EXTENSION ... UPDATE. Said
    // once per version seen, not every poll.
    if (waiting_for_version_ != version) {
      waiting_for_version_ = version;
      pg_call([&] {
        ereport(LOG, (errmsg("pg_outbox worker: the extension in database \"%s\" is version %s; this library "
                             "delivers for version %s only",
                             slot_.database, version.c_str(), kVersion),
                      errhint("Run ALTER EXTENSION pg_outbox UPDATE in that database; its messages wait until then.")));
      });
    }
    publish_status("waiting for ALTER EXTENSION pg_outbox UPDATE");
    return false;
  }
  waiting_for_version_.clear();
  if (extension_oid_ == 0) {
    forget_deliveries();
    throw ExtensionAbsent{};  // nothing to serve: the launcher starts a worker again at CREATE EXTENSION
  }
  if (recovered > 0)
    pg_call([&] {
      ereport(LOG, (errmsg("pg_outbox worker: %lld claimed messages of a previous worker are pending again, "
                           "their attempt counted",
                           static_cast<long long>(recovered))));
    });
  if (!announced_)
    pg_call([&] { ereport(LOG, (errmsg("pg_outbox worker started for database \"%s\"", slot_.database))); });
  announced_ = true;  // said once the extension is there: a worker that finds none exits quietly
  ready_ = true;
  more_due_ = true;
  recount_queued_ = true;
  endpoints_.clear();  // breakers are reloaded from the table
  endpoints_version_ = UINT64_MAX;
  return true;
}

// Endpoints are re-read when an endpoint function committed a change, and at least
// once per poll interval for direct edits of the table; not on every commit's wake.
// Called first in every transaction that claims or settles: message ids belong to one
// incarnation of the extension's tables, and must never settle rows of the next one.
void Worker::require_same_extension() {
  if (store_.extension_oid() != extension_oid_) throw ExtensionChanged();
}

// Drops every delivery in flight and every result not yet written: they belong to
// tables that no longer exist.
void Worker::forget_deliveries() {
  delivery_.abandon_all();
  deliveries_.clear();
  outstanding_.clear();
  endpoints_changed_.clear();
  claims_.clear();
  held_bytes_ = 0;
  history_covered_ms_ = 0;
  pending_ = Settlements{};
  parked_.clear();
  deferred_claims_.clear();
  counted_.clear();
}

void Worker::refresh_endpoints() {
  uint64_t version = pg_atomic_read_u64(&slot_.endpoints_version);
  int64_t now = now_ms();
  if (version == endpoints_version_ && now - endpoints_loaded_ms_ < settings.poll_interval_ms) return;
  endpoints_version_ = version;
  endpoints_loaded_ms_ = now;
  std::vector<EndpointRow> rows = store_.load_endpoints();
  std::unordered_map<std::string, Endpoint> fresh;
  for (EndpointRow& row : rows) {
    Endpoint endpoint;
    auto known = endpoints_.find(row.name);
    if (known != endpoints_.end() && changes_requests(known->second.row, row)) endpoints_changed_.push_back(row.name);
    if (known != endpoints_.end()) {
      // The worker's breaker is the live one; the table is its copy for restarts.
      row.breaker = known->second.row.breaker;
      endpoint.breaker_dirty = known->second.breaker_dirty;
    } else {
      core::restore_after_restart(row.breaker, now);
    }
    auto parsed = core::parse_string_object(row.headers_json.empty() ? "{}" : row.headers_json);
    endpoint.headers = std::move(parsed.pairs);
    endpoint.headers_error = std::move(parsed.error);
    endpoint.row = std::move(row);
    std::string name = endpoint.row.name;
    fresh.emplace(std::move(name), std::move(endpoint));
  }
  endpoints_ = std::move(fresh);
  std::vector<std::string> max_pending;
  for (const auto& [name, endpoint] : endpoints_)
    if (endpoint.row.has_max_pending) max_pending.push_back(name);
  std::sort(max_pending.begin(), max_pending.end());
  if (max_pending != max_pending_endpoints_) {
    max_pending_endpoints_ = std::move(max_pending);
    recount_queued_ = true;
  }
}

void Worker::publish_status(const char* state) {
  SpinLockAcquire(&slot_.mutex);
  strlcpy(slot_.state, state, sizeof slot_.state);
  slot_.last_loop_at = GetCurrentTimestamp();
  slot_.in_flight = static_cast<int>(deliveries_.size());
  SpinLockRelease(&slot_.mutex);
}

}  // namespace pg_outbox::pg
