// Replayed messages (outbox.replay) on their way from outbox.replay_queue into the queue.
#pragma once

#include <cstdint>

namespace pg_outbox::pg::store {

// Moves the first `limit` replayed messages into the queue (outbox._replays_move);
// returns how many it took from the replay queue.
int64_t move_replayed(int limit);
// Whether the replay queue holds any message (a replay committed by COMMIT PREPARED
// wakes no one; the worker looks once a second).
bool replays_waiting();

}  // namespace pg_outbox::pg::store
