// Whether this process is a delivery worker. The worker settles its own messages: its
// deletes are counted by itself (max_pending's counts) and its settles promote each
// key's next message in the statement that moves the head (ordering), so the triggers
// and callbacks that do this work for every other session stand aside in it.
#pragma once

namespace pg_outbox::pg {

inline bool delivery_worker_process = false;  // set once, by the worker's entry

inline void mark_delivery_worker() { delivery_worker_process = true; }
inline bool is_delivery_worker() { return delivery_worker_process; }

}  // namespace pg_outbox::pg
