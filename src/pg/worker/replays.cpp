// Replays (docs/delivery.md, Replay): outbox.replay writes the window's messages to
// outbox.replay_queue and says so at commit (DatabaseSlot::replays_waiting); the worker
// moves them into the queue, kReplayBatch a round, each batch in a transaction of its
// own, until the replay queue is empty. The caller of a replay of 100,000 messages thus
// waits for one plain write; the queue's indexes are paid here, a batch at a time,
// between deliveries. (An ordered or a pull endpoint's replay queues its messages
// itself.)
#include "pg/boundary/spi.hpp"
#include "pg/runtime/shared_state.hpp"
#include "pg/store/replays.hpp"
#include "pg/worker/constants.hpp"
#include "pg/worker/failures.hpp"
#include "pg/worker/steps.hpp"

#include <cstdint>

namespace pg_outbox::pg::worker {

void queue_replays(WorkerState& state) {
  Schedule& schedule = state.schedule;
  if (pg_atomic_exchange_u32(&state.slot.replays_waiting, 0) != 0) schedule.replays_waiting = true;
  const int64_t now = state.now_ms();
  if (!schedule.replays_waiting || now < schedule.replays_retry_ms) return;
  int64_t moved = 0;
  auto failed = rolled_back_on_error([&] {
    in_transaction("pg_outbox: moving replayed messages into the queue", [&] {
      require_same_extension(state);
      moved = store::move_replayed(kReplayBatch);
    });
  });
  if (!failed) {
    // Until a move finds nothing: one that found fewer than a batch may have met rows a
    // drop_endpoint was deleting while more wait behind them.
    schedule.replays_waiting = moved > 0;
    return;
  }
  // A lock an operator holds on an endpoint past the lock timeout, say: deliveries go
  // on, and the move is tried again a second later, not at every round.
  schedule.replays_retry_ms = now + kHousekeepingEveryMs;
  log_failure_once_a_minute(*failed, "moving replayed messages into the queue",
                            "They wait in outbox.replay_queue; the move is tried again every second.", now,
                            schedule.replays_quiet_until_ms);
}

int64_t replays_due_at(const WorkerState& state) {
  const Schedule& schedule = state.schedule;
  return schedule.replays_waiting ? schedule.replays_retry_ms : INT64_MAX;
}

}  // namespace pg_outbox::pg::worker
