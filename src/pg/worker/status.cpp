// What worker_status() and metrics() read from this database's slot in shared memory:
// the worker's state, and the counts of committed results. Under the slot's LWLock: the
// per-endpoint table is walked by name.
#include "pg/boundary/boundary.hpp"
#include "pg/runtime/shared_state.hpp"
#include "pg/worker/steps.hpp"

extern "C" {
#include "utils/timestamp.h"
}

#include <cstring>

namespace pg_outbox::pg::worker {

void publish_status(WorkerState& state, const char* what) {
  DatabaseSlot& slot = state.slot;
  const TimestampTz now = GetCurrentTimestamp();
  const int in_flight = static_cast<int>(state.in_flight.size());
  pg_call([&] {
    LWLockAcquire(slot.lock, LW_EXCLUSIVE);
    strlcpy(slot.state, what, sizeof slot.state);
    slot.last_loop_at = now;
    slot.in_flight = in_flight;
    LWLockRelease(slot.lock);
  });
}

void publish_counts(WorkerState& state) {
  if (!state.results.has_counts()) return;
  DatabaseSlot& slot = state.slot;
  pg_call([&] { LWLockAcquire(slot.lock, LW_EXCLUSIVE); });
  auto counts = state.results.take_counts();  // (taken once the lock is held: nothing is lost to a failed acquire)
  for (const auto& [name, c] : counts) {
    int i = 0;
    while (i < slot.counted_endpoints && strcmp(slot.endpoints[i].name, name.c_str()) != 0) ++i;
    if (i == slot.counted_endpoints && i < kCountedEndpoints) {
      strlcpy(slot.endpoints[i].name, name.c_str(), sizeof slot.endpoints[i].name);
      slot.counted_endpoints++;
    }
    if (i < kCountedEndpoints) {
      slot.endpoints[i].sent += c[0];
      slot.endpoints[i].retried += c[1];
      slot.endpoints[i].dead += c[2];
    }
    slot.sent += c[0];
    slot.retried += c[1];
    slot.dead_lettered += c[2];
  }
  pg_call([&] { LWLockRelease(slot.lock); });
}

// Shown by worker_status(): tests and operators wait for this, not for a sleep.
// PgReloadTime is this process's own last read of the files (a fresh worker inherits the
// postmaster's), so it never claims a load the worker has not seen.
void publish_config_loaded(WorkerState& state) {
  pg_call([&] {
    LWLockAcquire(state.slot.lock, LW_EXCLUSIVE);
    state.slot.config_loaded_at = PgReloadTime;
    LWLockRelease(state.slot.lock);
  });
}

}  // namespace pg_outbox::pg::worker
