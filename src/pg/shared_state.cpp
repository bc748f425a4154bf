#include "pg/shared_state.hpp"

extern "C" {
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
}

namespace pg_outbox::pg {

SharedState* shared_state = nullptr;

namespace {

shmem_request_hook_type previous_request_hook = nullptr;
shmem_startup_hook_type previous_startup_hook = nullptr;

void on_shmem_request() {
  if (previous_request_hook) previous_request_hook();
  RequestAddinShmemSpace(MAXALIGN(sizeof(SharedState)));
}

void on_shmem_startup() {
  if (previous_startup_hook) previous_startup_hook();
  LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
  bool found = false;
  auto* state = static_cast<SharedState*>(ShmemInitStruct("pg_outbox", sizeof(SharedState), &found));
  if (!found) {
    memset(state, 0, sizeof(SharedState));
    pg_atomic_init_u32(&state->wake_requested, 0);
    pg_atomic_init_u64(&state->endpoints_version, 0);
    SpinLockInit(&state->mutex);
    strlcpy(state->state, "not started", sizeof state->state);
  }
  shared_state = state;
  LWLockRelease(AddinShmemInitLock);
}

}  // namespace

void request_shared_state() {
  previous_request_hook = shmem_request_hook;
  shmem_request_hook = on_shmem_request;
  previous_startup_hook = shmem_startup_hook;
  shmem_startup_hook = on_shmem_startup;
}

void endpoints_changed() {
  if (shared_state != nullptr) pg_atomic_fetch_add_u64(&shared_state->endpoints_version, 1);
}

void wake_worker() {
  if (shared_state == nullptr) return;
  // Only the first wake since the worker last looked sets the latch.
  if (pg_atomic_exchange_u32(&shared_state->wake_requested, 1) != 0) return;
  Latch* latch = shared_state->worker_latch;
  if (latch != nullptr) SetLatch(latch);
}

}  // namespace pg_outbox::pg
