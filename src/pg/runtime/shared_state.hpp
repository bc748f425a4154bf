// What the launcher, the delivery workers and every backend share. One slot per
// delivery worker (pg_outbox.max_workers of them), each owned by one database while
// the launcher has it assigned; a backend finds its database's slot by its oid to wake
// that worker at commit, and nobody else's. Launcher-level fields (requests, DROP
// DATABASE holds, reasons a database is not served) sit under the launcher's lock.
// The locks are LWLocks (one per slot, one for the launcher): their holders copy
// kilobytes and walk tables of names, which a spinlock must never be held over.
#pragma once

#include "pg/boundary/postgres.hpp"

extern "C" {
#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
}

namespace pg_outbox::pg {

// Per-endpoint delivery counters. A fixed table: shared memory cannot grow; endpoints
// beyond it are still delivered, only not counted per endpoint (the totals still are).
constexpr int kCountedEndpoints = 512;

struct EndpointCounters {
  char name[NAMEDATALEN + 8];
  uint64 sent;
  uint64 retried;
  uint64 dead;
};

// The undelivered messages of an endpoint that has a max_pending (pg/queued_count.cpp).
constexpr int kQueuedEndpoints = 128;

struct QueuedCount {
  char name[NAMEDATALEN + 8];  // "" : a free entry
  bool counted;                // the worker has counted the queue since the entry was made
  bool recounting;             // the worker is counting it again
  int64 committed;             // committed messages in the queue
  int64 reserved;              // enqueued by transactions still open
  int64 since_recount;         // committed changes since the recount began
};

// Why a worker ended, as it told its slot before exiting; anything else is a crash.
enum class WorkerExit : int {
  kUnknown = 0,      // no word from the worker: it crashed or was terminated
  kNoExtension = 1,  // pg_outbox is not (or no longer) installed in its database
};

// What the launcher tells a worker it starts (in bgw_extra; the slot index is the
// main argument): the database, and the assignment it was started for.
struct WorkerIdentity {
  Oid database;
  uint32 generation;
};

// How many groups of endpoints the versions of their keys' order are kept for.
constexpr int kSuccessionGroups = 64;

struct DatabaseSlot {
  pg_atomic_uint32 wake_requested;     // collapses many commits into one SetLatch
  pg_atomic_uint32 wake_for;           // what they asked the worker to do (WakeFor flags, commit_wake.hpp)
  pg_atomic_uint64 endpoints_version;  // bumped when a committed change touched outbox.endpoints
  // Bumped when someone but the worker reordered keyed messages of an endpoint, one per
  // group of endpoints (ordering/successors.cpp): a pull reader's acks leave the worker's
  // look-ahead of other endpoints alone.
  pg_atomic_uint64 successions_versions[kSuccessionGroups];
  pg_atomic_uint64 unmatched_publishes;  // outbox.publish calls that found no subscriber (producer/subscribers.cpp)
  pg_atomic_uint32 replays_waiting;      // a committed outbox.replay left messages in outbox.replay_queue
  Latch* worker_latch;                   // nullptr while no worker runs
  Oid database_oid;                      // InvalidOid: the slot is free (written by the launcher)

  LWLock* lock;       // guards everything below
  uint32 generation;  // bumped at every assignment: a worker started for an older one exits
  bool starting;      // registered by the launcher, not yet attached (or gone before it could)
  WorkerExit exit;    // written by the worker just before it exits cleanly
  int worker_pid;
  char database[NAMEDATALEN];
  char state[192];  // also "not served: <the launcher's reason>" (worker_status) must fit
  TimestampTz started_at;
  TimestampTz last_loop_at;
  TimestampTz config_loaded_at;  // PgReloadTime of the worker: the configuration it runs with
  int in_flight;
  uint64 sent;
  uint64 retried;
  uint64 dead_lettered;
  int counted_endpoints;
  EndpointCounters endpoints[kCountedEndpoints];
  bool queued_recount_due;  // rows left the queue otherwise than by the worker: count again
  QueuedCount queued[kQueuedEndpoints];
};

constexpr int kLauncherRequests = 64;  // databases asking for a worker, between two launcher rounds
constexpr int kDropHolds = 16;         // DROP DATABASE (and the like) in progress at once
constexpr int kNotServedNotes = 64;    // databases the launcher could not serve, with the reason

struct NotServedNote {
  Oid database_oid;
  char reason[160];
};

struct DropHold {
  Oid database_oid;
  int backend_pid;    // the backend running the statement; it lifts the hold at its end
  TimestampTz until;  // a bound in case that backend vanishes without lifting it
};

struct LauncherState {
  Latch* launcher_latch;  // nullptr while the launcher does not run
  LWLock* lock;           // guards everything below (never held while taking a slot's, or the reverse)
  int launcher_pid;
  int requested_count;
  bool rescan_requested;  // more requests than fit, or a database was dropped: read pg_database again
  Oid requested[kLauncherRequests];
  DropHold holds[kDropHolds];
  NotServedNote not_served[kNotServedNotes];
};

// Pull consumers waiting in outbox.read(wait => ...) (consumer/pull_wait.cpp): the
// commit of a transaction that enqueued in their database bumps `commits` and wakes
// them. A small table by database oid, apart from the worker slots: readers wait whether
// or not a worker serves their database; two databases sharing an entry only cost a
// reader a wake it checks and sleeps again after.
constexpr int kPullWakes = 16;

struct PullWake {
  pg_atomic_uint64 commits;
  ConditionVariable committed;
};

struct SharedState {
  LauncherState launcher;
  PullWake pull_wakes[kPullWakes];
  int slot_count;  // pg_outbox.max_workers at server start
  DatabaseSlot slots[FLEXIBLE_ARRAY_MEMBER];
};

// Null until shared memory is attached (always attached when the library is preloaded).
extern SharedState* shared_state;

void request_shared_state();  // from _PG_init, preload only

// The slot assigned to this database, or nullptr. A slot can be reassigned at any time;
// callers read its oid again when that matters.
DatabaseSlot* slot_of_database(Oid database);

// Any backend, at commit: wake this database's worker for `what` (WakeFor flags; none:
// it is not woken), collapsed, or ask the launcher to start one when none is assigned
// (whatever the commit wrote: the worker also keeps the database's partitions).
void wake_worker(uint32_t what);
// Any backend, at commit of a transaction that enqueued: wake this database's pull
// readers (outbox.read with a wait).
void wake_pull_readers();
PullWake* pull_wake_of(Oid database);  // nullptr without shared memory
// Any backend, at commit: this database's worker must re-read outbox.endpoints.
void endpoints_changed();
// Any backend, at commit: outbox.replay_queue holds messages for this database's worker
// to move into the queue (before wake_worker, which makes it look).
void replays_committed();
// Ask the launcher to start (or look again for) a worker for this database.
void request_launcher(Oid database);

// Whether a DROP DATABASE (or another statement that needs the database to itself)
// holds this database's worker off. Call with launcher.lock held.
bool database_held(const LauncherState& launcher, Oid database, TimestampTz now);

}  // namespace pg_outbox::pg
