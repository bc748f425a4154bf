// _PG_init: the GUCs, the commit-time wake, the commit order's and max_pending's
// bookkeeping, the planner hook that hides an index from a statement (every backend),
// and — only when loaded through shared_preload_libraries — shared memory, the
// statement hook that keeps the launcher informed, and the launcher, which starts one
// delivery worker per database.
#include "pg/boundary/boundary.hpp"
#include "pg/boundary/plan_limits.hpp"
#include "pg/runtime/commit_wake.hpp"
#include "pg/launcher/database_hold.hpp"
#include "pg/ordering/ordering.hpp"
#include "pg/producer/queued_count.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/runtime/shared_state.hpp"
#include "pg/runtime/transaction_events.hpp"

extern "C" {
#include "postmaster/bgworker.h"
}

#include <cstring>

extern "C" {
PG_MODULE_MAGIC;
PGDLLEXPORT void _PG_init(void);
}

namespace {

void register_launcher() {
  BackgroundWorker worker;
  memset(&worker, 0, sizeof worker);
  // A database connection, but to none: the launcher reads the shared catalog
  // pg_database only.
  worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
  worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
  worker.bgw_restart_time = 1;  // seconds
  strlcpy(worker.bgw_library_name, "pg_outbox", BGW_MAXLEN);
  strlcpy(worker.bgw_function_name, "pg_outbox_launcher_main", BGW_MAXLEN);
  strlcpy(worker.bgw_name, "pg_outbox launcher", BGW_MAXLEN);
  strlcpy(worker.bgw_type, "pg_outbox launcher", BGW_MAXLEN);
  RegisterBackgroundWorker(&worker);
}

}  // namespace

void _PG_init(void) {
  pg_outbox::pg::define_settings();
  pg_outbox::pg::register_transaction_events();
  pg_outbox::pg::register_plan_limits_hooks();
  if (!process_shared_preload_libraries_in_progress) {
    // SQL functions work; delivery needs the worker, which only the postmaster can start.
    // A WARNING: CREATE EXTENSION runs its script with client_min_messages raised to
    // WARNING, and this is the moment the operator must hear it.
    ereport(WARNING, (errmsg("pg_outbox is not in shared_preload_libraries: messages will not be delivered"),
                      errhint("Add pg_outbox to shared_preload_libraries and restart the server.")));
    return;
  }
  pg_outbox::pg::request_shared_state();
  pg_outbox::pg::register_database_hold();
  register_launcher();
}
