// The worker's loop: a table of contents of named steps (steps.hpp), and the worker's
// life around them (the extension at this library's version, errors, exit).
#include "pg/worker/worker.hpp"

#include "core/delivery_policy.hpp"
#include "core/wait_timeout.hpp"
#include "pg/boundary/boundary.hpp"
#include "pg/boundary/spi.hpp"
#include "pg/ordering/successors.hpp"
#include "pg/runtime/commit_wake.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/runtime/shared_state.hpp"
#include "pg/store/claims.hpp"
#include "pg/store/extension.hpp"
#include "pg/worker/constants.hpp"
#include "pg/worker/failures.hpp"
#include "pg/worker/steps.hpp"

extern "C" {
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/wait_event.h"
}

#include <algorithm>

namespace pg_outbox::pg::worker {

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

// The settings every statement of the worker runs with.
void configure_session() {
  // The worker's own commits need not wait for the WAL flush: a crash can only undo
  // a claim (the row is pending again), a settle (the row is in_flight again, which
  // the next worker puts back to pending) or a dead-lettering (likewise): each leads
  // to one more delivery, never to a lost message. Producers' commits are untouched.
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
  // the endpoint it belongs to is then parked (parking.hpp), its results kept.
  SetConfigOption("lock_timeout", "500ms", PGC_SUSET, PGC_S_OVERRIDE);
  // Every statement sees what committed before it (the claim's test of rows others hold,
  // outbox._claimable, and the commit order's and max_pending's counts rely on it),
  // whatever the database's default.
  SetConfigOption("default_transaction_isolation", "read committed", PGC_SUSET, PGC_S_OVERRIDE);
}

}  // namespace

Worker::Worker(DatabaseSlot& slot) : delivery_(settings.max_concurrency), state_(slot, clock_, delivery_) {
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
  state_.slot.worker_latch = MyLatch;  // from now on a commit in this database wakes this process
  // A commit before that found no latch to set (and the launcher's own wake_requested
  // made it skip SetLatch): look at once, not after a poll interval.
  SetLatch(MyLatch);
  pg_call([] { configure_session(); });

  for (;;) {
    // Everything runs inside the try: an ERROR while waiting (a query cancel sent to
    // the worker) or while reloading is logged and paused on like any other.
    try {
      const uint32_t woken = wait_for_work();
      if (ShutdownRequestPending) stop_gracefully();
      if ((woken & kWakeNotifyRound) != 0) state_.schedule.notify.woken = true;  // kept until a NOTIFY round looks
      if ((woken & kWakeClaim) != 0) state_.schedule.quiet_http.forget_all();
      if (state_.now_ms() < error_pause_until_ms_) {
        take_responses(state_);  // settled once the database is back
        continue;
      }
      round(woken);
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

// SIGTERM (a fast or smart shutdown, pg_terminate_backend, DROP DATABASE): what the
// receivers answered is written before the process exits, so that a clean stop sends
// nothing twice. Nothing more is claimed; requests not yet started are taken back
// (pending again, their attempt not counted); those started have kStopGraceMs to be
// answered. What is still unanswered then, or what fails to be written, is sent again
// by the next worker (store::recover_claims), as after a crash. The process then exits
// as PostgreSQL's own SIGTERM handler would have made it (FATAL, ADMIN_SHUTDOWN).
void Worker::stop_gracefully() {
  try {
    if (ready_) {
      give_back_every_unstarted_request(state_);
      take_responses(state_);
      const int64_t deadline = state_.now_ms() + kStopGraceMs;
      for (int64_t left = kStopGraceMs; !state_.in_flight.empty() && left > 0; left = deadline - state_.now_ms()) {
        pg_call([&] {
          WaitEvent event;
          (void)WaitEventSetWait(wait_set_, static_cast<int>(left), &event, 1, PG_WAIT_EXTENSION);
          ResetLatch(MyLatch);
        });
        take_responses(state_);
      }
      settle(state_, Settling::kNow);
    }
  } catch (const std::exception&) {
    abort_transaction();  // not written: sent again by the next worker
  }
  pg_call([] {
    ProcDiePending = true;
    InterruptPending = true;
    CHECK_FOR_INTERRUPTS();
  });
  std::abort();  // CHECK_FOR_INTERRUPTS has exited the process
}

// One round: the table of contents of the worker.
void Worker::round(uint32_t woken) {
  take_responses(state_);  // also when not ready: what the results fd announces is taken
  if (!prepare_database()) return;
  retire_failing_endpoints(state_);
  settle(state_, settings.enabled ? Settling::kWhenDue : Settling::kNow);
  if (!settings.enabled) {
    publish_status(state_, "disabled");
    return;
  }
  Schedule& schedule = state_.schedule;
  const int64_t now = state_.now_ms();
  if (schedule.wakes.should_claim(woken != 0, schedule.more_due, now, schedule.next_claim_ms)) {
    if (claim_worth_running(state_)) {
      schedule.wakes.claim_started(now);
      schedule.wakes.claim_finished(claim_and_deliver(state_));
    }
  } else if (woken != 0) {
    // The commit's claim waits for the end of the gap (next_claim_ms). Until then the
    // wake stays requested, so the commits meanwhile find the flag set and leave the
    // latch alone: under thousands of commits a second, each would otherwise wake the
    // process for nothing (6.5 % of a core at 5,400 commits/s to a paused endpoint).
    pg_atomic_fetch_or_u32(&state_.slot.wake_for, woken);
    pg_atomic_write_u32(&state_.slot.wake_requested, 1);
  }
  queue_replays(state_);
  if (now >= schedule.next_housekeeping_ms) housekeeping(state_);
  if (schedule.recount_queued) recount_queued(state_);
  publish_status(state_, state_.in_flight.empty() ? "idle" : "delivering");
}

// Sleeps on the latch until a commit, a signal, a response of the delivery thread or the
// next deadline; re-reads the GUCs after SIGHUP. Returns what the commits that woke it
// asked for (WakeFor flags; 0: no commit did).
uint32_t Worker::wait_for_work() {
  // A SIGTERM during the round is not waited on: a lock wait in it reset the latch.
  const int timeout = ShutdownRequestPending ? 0 : wait_timeout_ms();
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
    state_.schedule.more_due = true;  // batch size or enablement may have changed
    // A quiet lasts at most the poll interval it began under: a shorter one ends it now.
    state_.schedule.quiet_http.forget_all();
    state_.schedule.notify.quiet = false;
    publish_config_loaded(state_);
  }
  if (pg_atomic_exchange_u32(&state_.slot.wake_requested, 0) == 0) return 0;
  return pg_atomic_exchange_u32(&state_.slot.wake_for, 0);  // set before the flag by each commit
}

int Worker::wait_timeout_ms() const {
  // Responses wake the worker through the results fd: deliveries in flight need no
  // shorter wait.
  core::LoopState loop;
  loop.error_pause_until_ms = error_pause_until_ms_;
  loop.ready = ready_;
  loop.enabled = settings.enabled;
  loop.poll_interval_ms = settings.poll_interval_ms;
  loop.more_due = state_.schedule.more_due;
  loop.settle_at_ms = results_due_at(state_);
  loop.next_claim_ms = state_.schedule.next_claim_ms;
  loop.next_housekeeping_ms = state_.schedule.next_housekeeping_ms;
  loop.replays_at_ms = replays_due_at(state_);
  loop.parked_until_ms = state_.parking.until_ms();
  return core::wait_timeout_ms(loop, state_.now_ms());
}

// The worker serves its database while the extension is there at this library's
// version: it waits (logging why) for ALTER EXTENSION ... UPDATE, and exits when the
// extension is not there (never created, or dropped).
bool Worker::prepare_database() {
  if (ready_) return true;
  int64_t recovered = 0;
  std::string version;
  in_transaction("pg_outbox: checking for the extension", [&] {
    state_.extension_oid = store::extension_oid();
    if (state_.extension_oid != 0) version = store::extension_version();
    if (state_.extension_oid != 0 && version == kVersion) {
      recovered = store::recover_claims(store::kept().attempts);
      // The keys' next messages a worker before this one held are heads from now on.
      successors::forget();
      successors::heal();
      state_.webhook_ids = store::webhook_id_source();
    }
  });
  if (state_.extension_oid != 0 && version != kVersion) {
    // Tables of another version: touch nothing until ALTER EXTENSION ... UPDATE. Said
    // once per version seen, not every poll.
    if (waiting_for_version_ != version) {
      waiting_for_version_ = version;
      pg_call([&] {
        ereport(LOG, (errmsg("pg_outbox worker: the extension in database \"%s\" is version %s; this library "
                             "delivers for version %s only",
                             state_.slot.database, version.c_str(), kVersion),
                      errhint("Run ALTER EXTENSION pg_outbox UPDATE in that database; its messages wait until then.")));
      });
    }
    publish_status(state_, "waiting for ALTER EXTENSION pg_outbox UPDATE");
    return false;
  }
  waiting_for_version_.clear();
  if (state_.extension_oid == 0) {
    state_.forget_deliveries();
    throw ExtensionAbsent{};  // nothing to serve: the launcher starts a worker again at CREATE EXTENSION
  }
  if (recovered > 0)
    pg_call([&] {
      ereport(LOG, (errmsg("pg_outbox worker: %lld claimed messages of a previous worker are pending again, "
                           "their attempt counted",
                           static_cast<long long>(recovered))));
    });
  if (!announced_)
    pg_call([&] { ereport(LOG, (errmsg("pg_outbox worker started for database \"%s\"", state_.slot.database))); });
  announced_ = true;  // said once the extension is there: a worker that finds none exits quietly
  ready_ = true;
  state_.schedule.more_due = true;
  state_.schedule.recount_queued = true;
  state_.schedule.replays_waiting = true;  // a replay may have committed while no worker ran
  state_.endpoints.forget();               // breakers are reloaded from the table
  return true;
}

// The extension was dropped (and perhaps created again): what was in flight belongs to
// tables that are gone; wait for the extension, then serve it afresh.
void Worker::on_extension_changed() {
  state_.forget_deliveries();
  ready_ = false;
  pg_call([] {
    ereport(LOG, (errmsg("pg_outbox worker: the extension was dropped or created again"),
                  errdetail("Deliveries in flight for the old tables were abandoned.")));
  });
}

// Disk full, statement_timeout, a dropped table...: roll back, log, pause, go on. Results
// not yet written stay with the worker and are settled once the database is back.
void Worker::recover_from_error(int sqlstate, const std::string& message) {
  abort_transaction();
  // Gone tables or functions: usually a DROP EXTENSION that committed while the
  // statement waited for its locks (the check at the start of the transaction saw the
  // extension still there). Then it is no error. With the extension still there it is
  // an ordinary error (a history partition dropped under a statement, say): the worker
  // keeps its deliveries and results, and retries.
  if (extension_may_be_gone(sqlstate)) {
    uint32_t oid = state_.extension_oid;
    try {
      in_transaction("pg_outbox: checking for the extension", [&] { oid = store::extension_oid(); });
    } catch (const std::exception&) {
      abort_transaction();
    }
    if (oid != state_.extension_oid) {
      on_extension_changed();
      return;
    }
  }
  error_streak_ = std::min(error_streak_ + 1, 6);
  const int64_t pause_ms = core::error_pause_ms(error_streak_);
  error_pause_until_ms_ = state_.now_ms() + pause_ms;
  // The claim that failed had already set the schedule as if it had claimed (nothing
  // more due until the poll): after the pause it looks again, whatever woke it before.
  state_.schedule.more_due = true;
  pg_call([&] {
    ereport(LOG, (errcode(sqlstate), errmsg("pg_outbox worker: %s", message.c_str()),
                  errdetail("The worker rolled back and retries in %lld ms.", static_cast<long long>(pause_ms))));
  });
  publish_status(state_, "recovering from an error");
}

}  // namespace pg_outbox::pg::worker
