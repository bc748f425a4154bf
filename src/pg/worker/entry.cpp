// A delivery worker's entry point and its PostgreSQL-facing shape, after worker_spi:
// signal handlers, its slot in shared memory (the launcher assigned it and passes its
// index and generation), the database connection, then the C++ loop, entered through
// the boundary.
#include "pg/boundary/boundary.hpp"
#include "pg/runtime/process_role.hpp"
#include "pg/runtime/shared_state.hpp"
#include "pg/worker/constants.hpp"
#include "pg/worker/worker.hpp"

extern "C" {
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/timestamp.h"

PGDLLEXPORT void pg_outbox_worker_main(Datum argument);
}

#include <malloc.h>

#include <cstdio>
#include <exception>

namespace {

using pg_outbox::pg::DatabaseSlot;
using pg_outbox::pg::shared_state;

// Takes the slot if it is still the one the launcher meant and no DROP DATABASE holds
// the database off. A hold placed after the check still finds this worker: the slot
// says `starting` until the pid is in it (one step under the slot's lock), and the
// holder waits while a worker is starting and terminates it once it has a pid.
DatabaseSlot* attach_slot(int index, const pg_outbox::pg::WorkerIdentity& id) {
  if (shared_state == nullptr || index < 0 || index >= shared_state->slot_count) return nullptr;
  DatabaseSlot* slot = &shared_state->slots[index];
  TimestampTz now = GetCurrentTimestamp();
  bool ours = false;
  LWLockAcquire(shared_state->launcher.lock, LW_SHARED);
  bool held = pg_outbox::pg::database_held(shared_state->launcher, id.database, now);
  LWLockRelease(shared_state->launcher.lock);
  LWLockAcquire(slot->lock, LW_EXCLUSIVE);
  if (slot->database_oid == id.database && slot->generation == id.generation) {
    slot->starting = false;
    if (!held) {
      ours = true;
      slot->worker_pid = MyProcPid;
      slot->exit = pg_outbox::pg::WorkerExit::kUnknown;
      slot->started_at = now;
      slot->config_loaded_at = PgReloadTime;  // the load this process inherited
    }
  }
  LWLockRelease(slot->lock);
  return ours ? slot : nullptr;
}

// Every exit (SIGTERM, FATAL, the end of main) leaves the slot without a worker, so
// that wakes go nowhere harmful and DROP DATABASE sees the worker gone.
void detach_slot(int, Datum arg) {
  DatabaseSlot* slot = &shared_state->slots[DatumGetInt32(arg)];
  LWLockAcquire(slot->lock, LW_EXCLUSIVE);
  if (slot->worker_pid == MyProcPid) {
    slot->worker_pid = 0;
    slot->worker_latch = nullptr;
  }
  LWLockRelease(slot->lock);
}

}  // namespace

void pg_outbox_worker_main(Datum argument) {
  pqsignal(SIGHUP, SignalHandlerForConfigReload);
  pqsignal(SIGTERM, die);
  BackgroundWorkerUnblockSignals();

  const int index = DatumGetInt32(argument);
  pg_outbox::pg::WorkerIdentity id;
  memcpy(&id, MyBgworkerEntry->bgw_extra, sizeof id);
  DatabaseSlot* slot = attach_slot(index, id);
  if (slot == nullptr) return;  // reassigned, or a DROP DATABASE wants the database: nothing to do
  before_shmem_exit(detach_slot, Int32GetDatum(index));
  // A database dropped since the launcher looked is a FATAL here, with its oid; the
  // launcher reads pg_database again before it would start another.
  BackgroundWorkerInitializeConnectionByOid(id.database, InvalidOid, 0);

  // From here on SIGTERM asks the loop to stop (Worker::stop_gracefully): it writes what
  // the receivers answered before it exits. Until here, PostgreSQL's die() ends the process.
  pqsignal(SIGTERM, SignalHandlerForShutdownRequest);

  // Each transaction of the worker allocates and frees the same memory again, hundreds
  // of times a second at a low rate. glibc gave the top of the heap back to the kernel
  // after many of them (brk) and the next one faulted the pages in again: 8 % of the
  // main thread's CPU at 1,000 messages/s (perf: __brk and page faults). Up to 16 MB of
  // freed heap stays in the process instead; blocks from 4 MB are mapped on their own
  // (the threshold is fixed once the trim threshold is set).
  (void)mallopt(M_MMAP_THRESHOLD, 4 << 20);
  (void)mallopt(M_TRIM_THRESHOLD, 16 << 20);

  char failure[512] = {0};
  bool absent = false;
  try {
    pg_outbox::pg::mark_delivery_worker();  // its own settles count and promote (process_role.hpp)
    pg_outbox::pg::worker::Worker worker(*slot);
    worker.run();
  } catch (const pg_outbox::pg::worker::ExtensionAbsent&) {
    absent = true;
  } catch (const std::exception& e) {
    snprintf(failure, sizeof failure, "%s", e.what());
  } catch (...) {
    snprintf(failure, sizeof failure, "unknown C++ exception");
  }
  if (absent) {
    LWLockAcquire(slot->lock, LW_EXCLUSIVE);
    slot->exit = pg_outbox::pg::WorkerExit::kNoExtension;
    LWLockRelease(slot->lock);
    return;  // exit code 0; the launcher sees why in the slot
  }
  // The loop only ends by exception when the worker cannot go on at all (libcurl
  // cannot start): exit with an error so the launcher starts another.
  ereport(FATAL, (errmsg("pg_outbox worker stopped: %s", failure)));
}
