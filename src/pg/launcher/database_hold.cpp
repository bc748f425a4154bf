// Statements the launcher must hear about, seen by a ProcessUtility hook in every
// backend:
//
//  - DROP DATABASE, ALTER DATABASE ... RENAME / SET TABLESPACE and CREATE DATABASE
//    ... TEMPLATE need the database to themselves: PostgreSQL 15 waits 5 s for other
//    connections and then fails, and a background worker is not asked to leave. Before
//    such a statement runs, the backend puts a hold on the database (no worker may
//    start there), terminates its worker and waits until it is gone. The hold is lifted
//    when the transaction ends, committed or not; then the launcher reads pg_database
//    again, forgets a dropped database and serves a renamed or copied one again.
//  - CREATE, ALTER and DROP EXTENSION pg_outbox wake the database's worker at commit,
//    or ask the launcher for one: a new extension is served within the launcher's
//    reaction time, a dropped one lets its worker go at once.
//  - A restore's CREATE TABLE and ATTACH PARTITION of a time partition first drop the
//    worker's empty partition that would make them fail (runtime/restored_partitions.cpp).
//
// Only for a role that may run the statement (the database's owner or a superuser):
// anyone else's attempt fails in PostgreSQL's own checks, and must not stop a worker.
//
// Plain C calls only: this runs inside PostgreSQL's statement processing, where an
// ERROR may longjmp through it.
#include "pg/runtime/commit_wake.hpp"
#include "pg/launcher/database_hold.hpp"
#include "pg/runtime/restored_partitions.hpp"
#include "pg/runtime/shared_state.hpp"
#include "pg/runtime/transaction_events.hpp"

extern "C" {
#include "access/xact.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

#include <csignal>

namespace pg_outbox::pg {

namespace {

constexpr int kHoldBoundMs = 60 * 1000;  // if this backend vanishes without lifting its hold
constexpr int kWorkerGoneWaitMs = 5000;  // a worker ends on SIGTERM within a second (Worker::stop_gracefully)

ProcessUtility_hook_type previous_utility_hook = nullptr;
bool holding = false;  // this backend's transaction holds a database

bool option_named(List* options, const char* name, DefElem** found) {
  ListCell* cell;
  foreach (cell, options) {
    auto* option = static_cast<DefElem*>(lfirst(cell));
    if (strcmp(option->defname, name) == 0) {
      *found = option;
      return true;
    }
  }
  return false;
}

// The database a statement needs to itself, or nullptr.
const char* database_needed_alone(Node* stmt) {
  DefElem* option = nullptr;
  switch (nodeTag(stmt)) {
    case T_DropdbStmt:
      return castNode(DropdbStmt, stmt)->dbname;
    case T_RenameStmt:
      return castNode(RenameStmt, stmt)->renameType == OBJECT_DATABASE ? castNode(RenameStmt, stmt)->subname : nullptr;
    case T_AlterDatabaseStmt:
      return option_named(castNode(AlterDatabaseStmt, stmt)->options, "tablespace", &option)
                 ? castNode(AlterDatabaseStmt, stmt)->dbname
                 : nullptr;
    case T_CreatedbStmt:
      return option_named(castNode(CreatedbStmt, stmt)->options, "template", &option) && option->arg != nullptr
                 ? defGetString(option)
                 : nullptr;
    default:
      return nullptr;
  }
}

bool names_pg_outbox(Node* stmt) {
  switch (nodeTag(stmt)) {
    case T_CreateExtensionStmt:
      return strcmp(castNode(CreateExtensionStmt, stmt)->extname, "pg_outbox") == 0;
    case T_AlterExtensionStmt:
      return strcmp(castNode(AlterExtensionStmt, stmt)->extname, "pg_outbox") == 0;
    case T_DropStmt: {
      auto* drop = castNode(DropStmt, stmt);
      if (drop->removeType != OBJECT_EXTENSION) return false;
      ListCell* cell;
      foreach (cell, drop->objects)
        if (strcmp(strVal(lfirst(cell)), "pg_outbox") == 0) return true;
      return false;
    }
    default:
      return false;
  }
}

void add_hold(Oid database) {
  LauncherState& launcher = shared_state->launcher;
  TimestampTz now = GetCurrentTimestamp();
  LWLockAcquire(launcher.lock, LW_EXCLUSIVE);
  int free_hold = -1;
  for (int i = 0; i < kDropHolds; ++i)
    if (free_hold < 0 && launcher.holds[i].until <= now) free_hold = i;
  if (free_hold >= 0) {
    launcher.holds[free_hold].database_oid = database;
    launcher.holds[free_hold].backend_pid = MyProcPid;
    launcher.holds[free_hold].until = TimestampTzPlusMilliseconds(now, kHoldBoundMs);
  }
  LWLockRelease(launcher.lock);
  // With every hold taken (sixteen such statements at once), the worker is still
  // terminated below; the launcher may start it again, and the statement then meets
  // PostgreSQL's own "being accessed by other users".
  holding = true;
}

// Terminates the database's worker and waits until no worker is there or starting.
void stop_worker_of(Oid database) {
  int signalled = 0;
  for (int waited = 0; waited < kWorkerGoneWaitMs; waited += 10) {
    bool present = false;
    for (int i = 0; i < shared_state->slot_count; ++i) {
      DatabaseSlot& slot = shared_state->slots[i];
      if (slot.database_oid != database) continue;
      LWLockAcquire(slot.lock, LW_SHARED);
      int pid = slot.worker_pid;
      bool starting = slot.starting;
      LWLockRelease(slot.lock);
      present = present || pid != 0 || starting;
      if (pid != 0 && pid != signalled) {
        (void)kill(pid, SIGTERM);
        signalled = pid;
      }
    }
    if (!present) return;
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10, PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
  }
}

void hold_database(const char* name) {
  Oid database = get_database_oid(name, true);
  if (database == InvalidOid || !pg_database_ownercheck(database, GetUserId())) return;
  add_hold(database);
  stop_worker_of(database);
}

void on_utility(PlannedStmt* pstmt, const char* query, bool read_only_tree, ProcessUtilityContext context,
                ParamListInfo params, QueryEnvironment* env, DestReceiver* dest, QueryCompletion* qc) {
  Node* stmt = pstmt->utilityStmt;
  if (shared_state != nullptr) {
    const char* alone = database_needed_alone(stmt);
    if (alone != nullptr) hold_database(alone);
    if (names_pg_outbox(stmt)) {
      wake_at_commit();              // a worker that runs sees the change at once
      request_launcher_at_commit();  // and where none runs, the launcher asks
    }
  }
  make_room_for_restored_partition(stmt);
  if (previous_utility_hook != nullptr)
    previous_utility_hook(pstmt, query, read_only_tree, context, params, env, dest, qc);
  else
    standard_ProcessUtility(pstmt, query, read_only_tree, context, params, env, dest, qc);
}

}  // namespace

// At the end of the transaction, committed or not: lift this backend's holds and let
// the launcher look at pg_database again (the database may be gone, renamed or free).
void database_hold_at_transaction_end(XactEvent event) {
  if (!holding || (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT && event != XACT_EVENT_PREPARE)) return;
  holding = false;
  Oid lifted[kDropHolds];
  int count = 0;
  LauncherState& launcher = shared_state->launcher;
  LWLockAcquire(launcher.lock, LW_EXCLUSIVE);
  for (DropHold& hold : launcher.holds) {
    if (hold.backend_pid != MyProcPid || hold.until == 0) continue;
    lifted[count++] = hold.database_oid;
    hold = DropHold{};
  }
  launcher.rescan_requested = true;
  LWLockRelease(launcher.lock);
  for (int i = 0; i < count; ++i) request_launcher(lifted[i]);
}

void register_database_hold() {
  previous_utility_hook = ProcessUtility_hook;
  ProcessUtility_hook = on_utility;
}

}  // namespace pg_outbox::pg
