#include "pg/runtime/shared_state.hpp"

#include "pg/runtime/settings.hpp"

extern "C" {
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"
}

namespace pg_outbox::pg {

SharedState* shared_state = nullptr;

namespace {

constexpr const char* kLockTranche = "pg_outbox";

shmem_request_hook_type previous_request_hook = nullptr;
shmem_startup_hook_type previous_startup_hook = nullptr;

Size shared_state_size() {
  return add_size(offsetof(SharedState, slots), mul_size(sizeof(DatabaseSlot), settings.max_workers));
}

void on_shmem_request() {
  if (previous_request_hook) previous_request_hook();
  RequestAddinShmemSpace(MAXALIGN(shared_state_size()));
  RequestNamedLWLockTranche(kLockTranche, settings.max_workers + 1);  // the slots', then the launcher's
}

void on_shmem_startup() {
  if (previous_startup_hook) previous_startup_hook();
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  bool found = false;
  auto* state = static_cast<SharedState*>(ShmemInitStruct("pg_outbox", shared_state_size(), &found));
  if (!found) {
    memset(state, 0, shared_state_size());
    LWLockPadded* locks = GetNamedLWLockTranche(kLockTranche);
    state->slot_count = settings.max_workers;
    state->launcher.lock = &locks[state->slot_count].lock;
    for (PullWake& wake : state->pull_wakes) {
      pg_atomic_init_u64(&wake.commits, 0);
      ConditionVariableInit(&wake.committed);
    }
    for (int i = 0; i < state->slot_count; ++i) {
      DatabaseSlot& slot = state->slots[i];
      pg_atomic_init_u32(&slot.wake_requested, 0);
      pg_atomic_init_u32(&slot.wake_for, 0);
      pg_atomic_init_u64(&slot.endpoints_version, 0);
      for (pg_atomic_uint64& version : slot.successions_versions) pg_atomic_init_u64(&version, 0);
      pg_atomic_init_u64(&slot.unmatched_publishes, 0);
      pg_atomic_init_u32(&slot.replays_waiting, 0);
      slot.lock = &locks[i].lock;
      slot.database_oid = InvalidOid;
    }
  }
  shared_state = state;
  LWLockRelease(AddinShmemInitLock);
}

// The slot this backend found last time: under steady traffic every commit of a
// session wakes the same worker, so the scan is skipped while the slot still matches.
int cached_slot = -1;

}  // namespace

void request_shared_state() {
  previous_request_hook = shmem_request_hook;
  shmem_request_hook = on_shmem_request;
  previous_startup_hook = shmem_startup_hook;
  shmem_startup_hook = on_shmem_startup;
}

DatabaseSlot* slot_of_database(Oid database) {
  if (shared_state == nullptr || database == InvalidOid) return nullptr;
  if (cached_slot >= 0 && shared_state->slots[cached_slot].database_oid == database)
    return &shared_state->slots[cached_slot];
  for (int i = 0; i < shared_state->slot_count; ++i) {
    if (shared_state->slots[i].database_oid == database) {
      cached_slot = i;
      return &shared_state->slots[i];
    }
  }
  return nullptr;
}

void request_launcher(Oid database) {
  if (shared_state == nullptr) return;
  LauncherState& launcher = shared_state->launcher;
  LWLockAcquire(launcher.lock, LW_EXCLUSIVE);
  bool known = false;
  for (int i = 0; i < launcher.requested_count; ++i) known = known || launcher.requested[i] == database;
  if (!known) {
    if (launcher.requested_count < kLauncherRequests)
      launcher.requested[launcher.requested_count++] = database;
    else
      launcher.rescan_requested = true;  // the launcher then probes every database it does not serve
  }
  Latch* latch = launcher.launcher_latch;
  LWLockRelease(launcher.lock);
  if (latch != nullptr) SetLatch(latch);
}

void wake_worker(uint32_t what) {
  DatabaseSlot* slot = slot_of_database(MyDatabaseId);
  if (slot == nullptr) {
    // No worker serves this database (restricted away, or not served for want of a
    // slot): a producer committing thousands of times a second asks the launcher at most
    // once a second. CREATE EXTENSION asks on its own (request_launcher_at_commit).
    static TimestampTz last_asked = 0;
    const TimestampTz now = GetCurrentTimestamp();
    if (now - last_asked >= USECS_PER_SEC) {
      last_asked = now;
      request_launcher(MyDatabaseId);
    }
    return;
  }
  // Only the first wake since the worker last looked sets the latch. What it is for is
  // set first: the worker that takes the wake finds it (both are full barriers).
  if (what != 0) {
    pg_atomic_fetch_or_u32(&slot->wake_for, what);
    if (pg_atomic_exchange_u32(&slot->wake_requested, 1) == 0) {
      Latch* latch = slot->worker_latch;
      if (latch != nullptr) SetLatch(latch);
    }
  } else {
    pg_memory_barrier();  // as the exchange: before reading the slot's database
  }
  // The launcher may have freed the slot meanwhile (its worker found no extension, just
  // before this transaction's CREATE EXTENSION committed). It frees the slot first and
  // reads wake_requested after; the exchange above is a full barrier: either it sees
  // the wake, or this read sees the slot gone, and the launcher hears of the database.
  if (slot->database_oid != MyDatabaseId) request_launcher(MyDatabaseId);
}

PullWake* pull_wake_of(Oid database) {
  if (shared_state == nullptr) return nullptr;
  return &shared_state->pull_wakes[database % kPullWakes];
}

// The bump comes first: a reader that read the counter before this commit and finds it
// changed does not sleep, and one already asleep is woken by the broadcast.
void wake_pull_readers() {
  PullWake* wake = pull_wake_of(MyDatabaseId);
  if (wake == nullptr) return;
  pg_atomic_fetch_add_u64(&wake->commits, 1);
  ConditionVariableBroadcast(&wake->committed);
}

void endpoints_changed() {
  DatabaseSlot* slot = slot_of_database(MyDatabaseId);
  if (slot != nullptr) pg_atomic_fetch_add_u64(&slot->endpoints_version, 1);
}

void replays_committed() {
  DatabaseSlot* slot = slot_of_database(MyDatabaseId);
  if (slot != nullptr) pg_atomic_write_u32(&slot->replays_waiting, 1);
}

bool database_held(const LauncherState& launcher, Oid database, TimestampTz now) {
  for (const DropHold& hold : launcher.holds)
    if (hold.database_oid == database && hold.until > now) return true;
  return false;
}

}  // namespace pg_outbox::pg
