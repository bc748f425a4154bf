// The launcher: one background worker, registered at server start, connected to no
// database, that keeps one delivery worker per database where pg_outbox is installed.
//
// It cannot see another database's pg_extension, so it asks: at start, and whenever
// pg_database shows a database it has not asked yet, it starts a worker there that
// exits quietly when it finds no extension (WorkerExit::kNoExtension). After that,
// the database is asked again only when a backend there requests it at commit (CREATE
// EXTENSION, ALTER EXTENSION, a commit that found no worker: see request_launcher).
// A worker that crashed is started again after a second; a database that a DROP
// DATABASE holds off (database_hold.cpp) is left alone until the hold is lifted.
//
// Plain data only: the launcher's table lives in TopMemoryContext, and every function
// here calls PostgreSQL directly with no C++ object alive across the call (an ERROR in
// a background worker without an error handler ends the process).
#include "pg/runtime/commit_wake.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/runtime/shared_state.hpp"

extern "C" {
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

PGDLLEXPORT void pg_outbox_launcher_main(Datum argument);
}

namespace pg_outbox::pg {

namespace {

constexpr int kRescanMs = 5000;        // pg_database is read this often (a CREATE DATABASE from a template)
constexpr int kCrashRestartMs = 1000;  // like bgw_restart_time = 1 for a static worker

enum class Phase {
  kUnasked,    // no worker has looked yet (or something asked us to look again)
  kRunning,    // a worker is registered for it (starting, serving or waiting for an UPDATE)
  kAbsent,     // its worker found no extension; asked again only on request
  kCrashed,    // its worker ended without saying why: started again at retry_at
  kNotServed,  // no free slot or no background worker slot: tried again at retry_at
};

// Why a database is not served, said once per database and reason.
enum class Reason { kNone, kNoSlot, kNoBackgroundWorker };

struct KnownDatabase {
  Oid oid;
  NameData name;
  Phase phase;
  int slot;  // -1 when none is assigned
  BackgroundWorkerHandle* handle;
  TimestampTz retry_at;
  Reason said;
  bool seen;  // in the latest read of pg_database
};

KnownDatabase* known = nullptr;  // TopMemoryContext
int known_count = 0;
int known_capacity = 0;
bool said_restriction_missing = false;
TimestampTz next_rescan = 0;
TimestampTz last_scan = 0;
constexpr int kRescanAtMostMs = 1000;  // requests for a database not in the table read pg_database this often

KnownDatabase* find_known(Oid oid) {
  for (int i = 0; i < known_count; ++i)
    if (known[i].oid == oid) return &known[i];
  return nullptr;
}

KnownDatabase* add_known(Oid oid, const char* name) {
  if (known_count == known_capacity) {
    known_capacity = known_capacity == 0 ? 16 : known_capacity * 2;
    known = static_cast<KnownDatabase*>(
        known == nullptr ? MemoryContextAlloc(TopMemoryContext, sizeof(KnownDatabase) * known_capacity)
                         : repalloc(known, sizeof(KnownDatabase) * known_capacity));
  }
  KnownDatabase* db = &known[known_count++];
  memset(db, 0, sizeof *db);
  db->oid = oid;
  namestrcpy(&db->name, name);
  db->phase = Phase::kUnasked;
  db->slot = -1;
  return db;
}

bool restricted_away(const char* name) {
  return settings.database != nullptr && settings.database[0] != '\0' && strcmp(settings.database, name) != 0;
}

void set_note(Oid database, const char* reason) {
  LauncherState& launcher = shared_state->launcher;
  LWLockAcquire(launcher.lock, LW_EXCLUSIVE);
  int free_note = -1;
  for (int i = 0; i < kNotServedNotes; ++i) {
    NotServedNote& note = launcher.not_served[i];
    if (note.database_oid == database) {
      if (reason == nullptr)
        note.database_oid = InvalidOid;
      else
        strlcpy(note.reason, reason, sizeof note.reason);
      LWLockRelease(launcher.lock);
      return;
    }
    if (free_note < 0 && note.database_oid == InvalidOid) free_note = i;
  }
  if (reason != nullptr && free_note >= 0) {
    launcher.not_served[free_note].database_oid = database;
    strlcpy(launcher.not_served[free_note].reason, reason, sizeof launcher.not_served[free_note].reason);
  }
  LWLockRelease(launcher.lock);
}

// Reads pg_database (a shared catalog: readable without a database) and updates the
// table: new databases are to be asked, dropped ones forgotten once no worker is left.
void read_databases() {
  for (int i = 0; i < known_count; ++i) known[i].seen = false;
  bool restriction_found = false;
  SetCurrentStatementStartTimestamp();
  StartTransactionCommand();
  PushActiveSnapshot(GetTransactionSnapshot());
  pgstat_report_activity(STATE_RUNNING, "pg_outbox launcher: reading pg_database");
  Relation rel = table_open(DatabaseRelationId, AccessShareLock);
  TableScanDesc scan = table_beginscan_catalog(rel, 0, nullptr);
  HeapTuple tuple;
  while ((tuple = heap_getnext(scan, ForwardScanDirection)) != nullptr) {
    auto* form = reinterpret_cast<Form_pg_database>(GETSTRUCT(tuple));
    const char* name = NameStr(form->datname);
    if (!restricted_away(name)) restriction_found = true;
    // Templates are skipped: a worker connected to one would make CREATE DATABASE
    // from it fail ("source database is being accessed by other users").
    if (form->datistemplate || !form->datallowconn || restricted_away(name)) continue;
    if (database_is_invalid_form(form)) continue;  // a DROP DATABASE that was interrupted
    KnownDatabase* db = find_known(form->oid);
    if (db == nullptr) db = add_known(form->oid, name);
    namestrcpy(&db->name, name);  // ALTER DATABASE ... RENAME
    db->seen = true;
  }
  table_endscan(scan);
  table_close(rel, AccessShareLock);
  PopActiveSnapshot();
  CommitTransactionCommand();
  pgstat_report_activity(STATE_IDLE, nullptr);

  bool restricted = settings.database != nullptr && settings.database[0] != '\0';
  if (restricted && !restriction_found && !said_restriction_missing)
    ereport(LOG, (errmsg("pg_outbox launcher: database \"%s\" (pg_outbox.database) does not exist; no database "
                         "is served until it is created",
                         settings.database)));
  said_restriction_missing = restricted && !restriction_found;

  // A database that is gone, or became a template or closed to connections, is no
  // longer served: its worker is told to stop, and the database is forgotten once no
  // worker of it is left.
  int kept = 0;
  for (int i = 0; i < known_count; ++i) {
    if (!known[i].seen && known[i].handle != nullptr) TerminateBackgroundWorker(known[i].handle);
    if (!known[i].seen && known[i].handle == nullptr) {
      if (known[i].slot >= 0) {
        shared_state->slots[known[i].slot].database_oid = InvalidOid;
        known[i].slot = -1;
      }
      if (known[i].said != Reason::kNone) set_note(known[i].oid, nullptr);
      continue;
    }
    known[kept++] = known[i];
  }
  known_count = kept;
  last_scan = GetCurrentTimestamp();
  next_rescan = TimestampTzPlusMilliseconds(last_scan, kRescanMs);
}

void not_served(KnownDatabase* db, Reason reason, const char* why) {
  db->phase = Phase::kNotServed;
  db->retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), kRescanMs);
  set_note(db->oid, why);
  if (db->said != reason)
    ereport(LOG, (errmsg("pg_outbox launcher: database \"%s\" is not served: %s", NameStr(db->name), why),
                  errhint(reason == Reason::kNoSlot ? "Raise pg_outbox.max_workers and restart the server."
                                                    : "Raise max_worker_processes and restart the server.")));
  db->said = reason;
}

int free_slot() {
  for (int i = 0; i < shared_state->slot_count; ++i)
    if (shared_state->slots[i].database_oid == InvalidOid) return i;
  return -1;
}

void release_slot(KnownDatabase* db) {
  if (db->slot < 0) return;
  shared_state->slots[db->slot].database_oid = InvalidOid;
  pg_memory_barrier();  // before reading wake_requested: see wake_worker
  db->slot = -1;
}

// Gives the database a slot (a new one, or the one its crashed worker had) and
// registers a worker for it.
void start_worker(KnownDatabase* db) {
  TimestampTz now = GetCurrentTimestamp();
  LWLockAcquire(shared_state->launcher.lock, LW_SHARED);
  bool held = database_held(shared_state->launcher, db->oid, now);
  LWLockRelease(shared_state->launcher.lock);
  if (held) {
    db->retry_at = TimestampTzPlusMilliseconds(now, kRescanMs);  // the hold's end asks again sooner
    return;
  }
  int index = db->slot;
  if (index < 0) {
    for (int i = 0; i < shared_state->slot_count; ++i) {
      if (shared_state->slots[i].database_oid == db->oid) {  // a predecessor's worker that would not stop
        db->retry_at = TimestampTzPlusMilliseconds(now, kRescanMs);
        db->phase = Phase::kNotServed;
        return;
      }
    }
    index = free_slot();
  }
  if (index < 0) {
    char why[160];
    snprintf(why, sizeof why, "all %d delivery workers (pg_outbox.max_workers) serve other databases",
             shared_state->slot_count);
    not_served(db, Reason::kNoSlot, why);
    return;
  }
  DatabaseSlot& slot = shared_state->slots[index];
  WorkerIdentity id{db->oid, 0};
  LWLockAcquire(slot.lock, LW_EXCLUSIVE);
  if (db->slot != index) {  // a fresh assignment: counters and status start from zero
    uint32 generation = slot.generation;
    size_t offset = offsetof(DatabaseSlot, generation);  // everything after the lock
    memset(reinterpret_cast<char*>(&slot) + offset, 0, sizeof slot - offset);
    slot.generation = generation;
    strlcpy(slot.state, "starting", sizeof slot.state);
    pg_atomic_write_u64(&slot.unmatched_publishes, 0);  // a counter of the database before (atomic: before the lock)
  }
  id.generation = ++slot.generation;
  slot.starting = true;
  slot.exit = WorkerExit::kUnknown;
  strlcpy(slot.database, NameStr(db->name), sizeof slot.database);
  LWLockRelease(slot.lock);
  if (db->slot != index) {
    pg_atomic_write_u32(&slot.wake_for, kWakeEverything);  // claim at once
    pg_atomic_write_u32(&slot.wake_requested, 1);
    pg_write_barrier();
    slot.database_oid = db->oid;
    db->slot = index;
  }

  BackgroundWorker worker;
  memset(&worker, 0, sizeof worker);
  worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
  worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
  worker.bgw_restart_time = BGW_NEVER_RESTART;  // the launcher decides
  strlcpy(worker.bgw_library_name, "pg_outbox", BGW_MAXLEN);
  strlcpy(worker.bgw_function_name, "pg_outbox_worker_main", BGW_MAXLEN);
  snprintf(worker.bgw_name, BGW_MAXLEN, "pg_outbox worker for database %s", NameStr(db->name));
  strlcpy(worker.bgw_type, "pg_outbox worker", BGW_MAXLEN);
  worker.bgw_main_arg = Int32GetDatum(index);
  static_assert(sizeof(WorkerIdentity) <= BGW_EXTRALEN);
  memcpy(worker.bgw_extra, &id, sizeof id);
  worker.bgw_notify_pid = MyProcPid;  // the postmaster tells us when it starts and stops
  BackgroundWorkerHandle* handle = nullptr;
  if (!RegisterDynamicBackgroundWorker(&worker, &handle)) {
    LWLockAcquire(slot.lock, LW_EXCLUSIVE);
    slot.starting = false;
    LWLockRelease(slot.lock);
    release_slot(db);
    char why[160];
    snprintf(why, sizeof why, "no background worker slot is free (max_worker_processes = %d)", max_worker_processes);
    not_served(db, Reason::kNoBackgroundWorker, why);
    return;
  }
  db->handle = handle;
  db->phase = Phase::kRunning;
  if (db->said != Reason::kNone) set_note(db->oid, nullptr);
  db->said = Reason::kNone;
}

// The worker of this database has stopped: decide what comes next.
void on_worker_stopped(KnownDatabase* db) {
  pfree(db->handle);
  db->handle = nullptr;
  DatabaseSlot& slot = shared_state->slots[db->slot];
  LWLockAcquire(slot.lock, LW_EXCLUSIVE);
  WorkerExit exit = slot.exit;
  slot.starting = false;
  slot.worker_pid = 0;
  slot.worker_latch = nullptr;
  strlcpy(slot.state, "not running", sizeof slot.state);
  LWLockRelease(slot.lock);
  if (exit == WorkerExit::kNoExtension) {
    release_slot(db);
    // A commit that found the slot before it was released (the CREATE EXTENSION this
    // worker just missed) left its wake there: ask again.
    bool woken = pg_atomic_exchange_u32(&slot.wake_requested, 0) != 0;
    db->phase = woken ? Phase::kUnasked : Phase::kAbsent;
    return;
  }
  // A crash, a SIGTERM, a FATAL (also a database dropped under it): read pg_database
  // before starting another, a second from now.
  db->phase = Phase::kCrashed;
  db->retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), kCrashRestartMs);
  next_rescan = Min(next_rescan, db->retry_at);
}

void check_workers() {
  for (int i = 0; i < known_count; ++i) {
    KnownDatabase* db = &known[i];
    if (db->handle == nullptr) continue;
    pid_t pid;
    if (GetBackgroundWorkerPid(db->handle, &pid) == BGWH_STOPPED) on_worker_stopped(db);
  }
}

// Requests from backends: databases to ask (again) now.
void take_requests() {
  Oid requested[kLauncherRequests];
  LauncherState& launcher = shared_state->launcher;
  LWLockAcquire(launcher.lock, LW_EXCLUSIVE);
  int count = launcher.requested_count;
  memcpy(requested, launcher.requested, sizeof(Oid) * count);
  launcher.requested_count = 0;
  bool rescan = launcher.rescan_requested;
  launcher.rescan_requested = false;
  LWLockRelease(launcher.lock);
  bool unknown = false;
  for (int i = 0; i < count; ++i) {
    KnownDatabase* db = find_known(requested[i]);
    if (db == nullptr) {
      unknown = true;  // created since we last read pg_database
      continue;
    }
    // Asked again: a database without the extension is asked at once, a crashed
    // worker's is started at once (a hold lifted, a CREATE EXTENSION). One not served for
    // want of a slot waits for its next try: commits there must not spin the launcher.
    if (db->phase == Phase::kAbsent) db->phase = Phase::kUnasked;
    if (db->phase == Phase::kCrashed) db->retry_at = 0;
  }
  if (rescan) next_rescan = 0;
  // A database not in the table: created since pg_database was read, or one that is
  // never served (restricted away, a template): read it again, at most once a second.
  if (unknown) next_rescan = Min(next_rescan, TimestampTzPlusMilliseconds(last_scan, kRescanAtMostMs));
  if (rescan)
    for (int i = 0; i < known_count; ++i)
      if (known[i].phase == Phase::kAbsent) known[i].phase = Phase::kUnasked;
}

void start_due_workers() {
  TimestampTz now = GetCurrentTimestamp();
  for (int i = 0; i < known_count; ++i) {
    KnownDatabase* db = &known[i];
    bool due = db->phase == Phase::kUnasked ||
               ((db->phase == Phase::kCrashed || db->phase == Phase::kNotServed) && now >= db->retry_at);
    if (due && db->handle == nullptr) start_worker(db);
  }
}

long wait_ms() {
  TimestampTz now = GetCurrentTimestamp();
  TimestampTz until = next_rescan;
  for (int i = 0; i < known_count; ++i)
    if (known[i].phase == Phase::kCrashed || known[i].phase == Phase::kNotServed) until = Min(until, known[i].retry_at);
  long ms = TimestampDifferenceMilliseconds(now, until);
  return Max(Min(ms, kRescanMs), 0L);
}

// A launcher that exited with an error (not a crash: that restarts every process) and
// was started again has no handles for the workers of its predecessor: they are
// stopped, and every database is asked afresh. Their claims come back through
// recover_claims like after any worker exit. A worker registered by the predecessor
// may still be starting: its slot is taken from it first (no oid, so it cannot attach),
// then every pid found is terminated, each time it is found, until none is left. A
// slot whose worker will not go stays reserved (its oid kept), so that no second
// worker is ever started beside it.
void adopt_nothing() {
  for (int i = 0; i < shared_state->slot_count; ++i) {
    DatabaseSlot& slot = shared_state->slots[i];
    LWLockAcquire(slot.lock, LW_EXCLUSIVE);
    ++slot.generation;  // a starting worker of the predecessor no longer matches
    slot.starting = false;
    LWLockRelease(slot.lock);
  }
  bool left = false;
  for (int attempt = 0; attempt < 100; ++attempt) {  // 100 x 50 ms: SIGTERM ends a worker in well under 5 s
    left = false;
    for (int i = 0; i < shared_state->slot_count; ++i) {
      DatabaseSlot& slot = shared_state->slots[i];
      LWLockAcquire(slot.lock, LW_EXCLUSIVE);
      int pid = slot.worker_pid;
      LWLockRelease(slot.lock);
      if (pid == 0) continue;
      left = true;
      (void)kill(pid, SIGTERM);
    }
    if (!left) break;
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 50, PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
  }
  for (int i = 0; i < shared_state->slot_count; ++i) {
    DatabaseSlot& slot = shared_state->slots[i];
    LWLockAcquire(slot.lock, LW_EXCLUSIVE);
    const bool free = slot.worker_pid == 0;
    LWLockRelease(slot.lock);
    if (free) {
      slot.worker_latch = nullptr;
      slot.database_oid = InvalidOid;
    } else {
      ereport(WARNING, (errmsg("pg_outbox launcher: the worker of database \"%s\" (pid %d) did not stop; its slot "
                               "stays reserved",
                               slot.database, slot.worker_pid)));
    }
  }
}

void detach_launcher(int, Datum) {
  LWLockAcquire(shared_state->launcher.lock, LW_EXCLUSIVE);
  shared_state->launcher.launcher_latch = nullptr;
  shared_state->launcher.launcher_pid = 0;
  LWLockRelease(shared_state->launcher.lock);
}

}  // namespace

}  // namespace pg_outbox::pg

void pg_outbox_launcher_main(Datum) {
  using namespace pg_outbox::pg;
  pqsignal(SIGHUP, SignalHandlerForConfigReload);
  pqsignal(SIGTERM, die);
  BackgroundWorkerUnblockSignals();
  BackgroundWorkerInitializeConnection(nullptr, nullptr, 0);  // shared catalogs only

  LWLockAcquire(shared_state->launcher.lock, LW_EXCLUSIVE);
  shared_state->launcher.launcher_pid = MyProcPid;
  shared_state->launcher.launcher_latch = MyLatch;
  LWLockRelease(shared_state->launcher.lock);
  before_shmem_exit(detach_launcher, 0);
  adopt_nothing();
  ereport(LOG, (errmsg("pg_outbox launcher started (at most %d delivery workers)", shared_state->slot_count)));

  for (;;) {
    take_requests();
    check_workers();
    if (GetCurrentTimestamp() >= next_rescan) read_databases();
    start_due_workers();
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, wait_ms(), PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
    if (ConfigReloadPending) {
      ConfigReloadPending = false;
      ProcessConfigFile(PGC_SIGHUP);
    }
  }
}
