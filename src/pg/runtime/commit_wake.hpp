#pragma once

#include <cstdint>

namespace pg_outbox::pg {

// What a commit that wrote messages gives the worker to do, by the kinds of endpoint it
// wrote them for: flags, or'ed over the transaction and over the commits the worker has
// not looked at yet (DatabaseSlot::wake_for). A claim of HTTP endpoints' messages, a
// NOTIFY round, or nothing when it wrote only for pull endpoints, whose readers take
// them (every such commit wakes those). Without these, every commit ran both: at 1,000
// messages a second to an HTTP endpoint, a NOTIFY endpoint beside it doubled the
// worker's claims, and a pull endpoint's producers and readers woke the worker for
// nothing at every commit.
enum WakeFor : uint32_t {
  kWakeReadersOnly = 0,
  kWakeClaim = 1,
  kWakeNotifyRound = 2,
  kWakeEverything = kWakeClaim | kWakeNotifyRound,  // kinds unknown (a plain INSERT, a change of order)
};

// The current transaction wrote messages: if it commits, wake the pull readers, and the
// worker for `what`.
void wake_at_commit(uint32_t what = kWakeEverything);

// The current transaction changed the extension (CREATE, ALTER, DROP EXTENSION): if it
// commits, the launcher looks at this database again, whatever it last saw there.
void request_launcher_at_commit();

}  // namespace pg_outbox::pg
