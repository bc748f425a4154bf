// What the worker shares with every backend: its latch (so a committing producer can
// wake it), its status, and its delivery counters for worker_status() and metrics().
// The worker is the only writer of everything but wake_requested.
#pragma once

#include "pg/postgres.hpp"

extern "C" {
#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/spin.h"
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

struct SharedState {
  pg_atomic_uint32 wake_requested;     // collapses many commits into one SetLatch
  pg_atomic_uint64 endpoints_version;  // bumped when a committed change touched outbox.endpoints
  Latch* worker_latch;                 // nullptr while no worker runs

  slock_t mutex;  // guards everything below
  int worker_pid;
  char database[NAMEDATALEN];
  char state[64];  // "waiting for CREATE EXTENSION pg_outbox" must fit
  TimestampTz started_at;
  TimestampTz last_loop_at;
  TimestampTz config_loaded_at;  // PgReloadTime of the worker: the configuration it runs with
  int in_flight;
  uint64 sent;
  uint64 retried;
  uint64 dead_lettered;
  int counted_endpoints;
  EndpointCounters endpoints[kCountedEndpoints];
};

// Null until shared memory is attached (always attached when the library is preloaded).
extern SharedState* shared_state;

void request_shared_state();  // from _PG_init, preload only
void wake_worker();           // any backend: set the worker's latch (collapsed)
void endpoints_changed();     // any backend, at commit: the worker must re-read outbox.endpoints

}  // namespace pg_outbox::pg
