// Wake the worker when a transaction that wrote messages commits, never on rollback:
// outbox.enqueue, the AFTER INSERT statement trigger on outbox.messages (plain INSERTs)
// and the endpoint functions only note the wish; the transaction callback acts on it at commit, when the rows
// are already visible to the worker's next snapshot.
#include "pg/boundary/boundary.hpp"
#include "pg/runtime/commit_wake.hpp"
#include "pg/runtime/shared_state.hpp"
#include "pg/runtime/transaction_events.hpp"
#include "pg/boundary/trigger_data.hpp"

extern "C" {
#include "access/xact.h"
#include "commands/trigger.h"
#include "miscadmin.h"
}

namespace pg_outbox::pg {

namespace {

bool messages_written = false;     // this backend's current transaction wrote messages
uint32_t wake_for = 0;             // ... and what they give the worker to do (WakeFor)
bool endpoints_at_commit = false;  // ... and changed an endpoint (create/alter/pause/resume/drop)
bool launcher_at_commit = false;   // ... and changed the extension itself
bool replays_at_commit = false;    // ... and left replayed messages for the worker to queue

}  // namespace

void commit_wake_at_transaction_end(XactEvent event) {
  switch (event) {
    case XACT_EVENT_PRE_COMMIT:
      // Also before the change is visible: the worker's claim, which reads the version
      // before and after its statement, then knows whether its snapshot may have seen it
      // (ordering/successors.cpp). The bump at commit is the one that makes the worker
      // re-read the endpoints once it can see them.
      if (endpoints_at_commit) endpoints_changed();
      break;
    case XACT_EVENT_COMMIT:
      if (endpoints_at_commit) endpoints_changed();
      if (replays_at_commit) replays_committed();
      if (messages_written) {
        wake_worker(wake_for);
        wake_pull_readers();  // any commit that wrote messages: cheap, and no list of pull endpoints to keep
      }
      if (launcher_at_commit) request_launcher(MyDatabaseId);
      messages_written = endpoints_at_commit = launcher_at_commit = replays_at_commit = false;
      wake_for = 0;
      break;
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PREPARE:  // COMMIT PREPARED runs elsewhere; the next poll finds the rows
    case XACT_EVENT_PARALLEL_ABORT:
      messages_written = endpoints_at_commit = launcher_at_commit = replays_at_commit = false;
      wake_for = 0;
      break;
    default:
      break;
  }
}

void wake_at_commit(uint32_t what) {
  messages_written = true;
  wake_for |= what;
}

void request_launcher_at_commit() { launcher_at_commit = true; }

}  // namespace pg_outbox::pg

PG_OUTBOX_FUNCTION(pg_outbox_wake_at_commit) {
  (void)pg_outbox::pg::trigger_data(fcinfo, "outbox._wake_at_commit()");
  pg_outbox::pg::wake_at_commit();  // a plain INSERT: for endpoints of any kind
  return PointerGetDatum(nullptr);
}

// Called by the endpoint functions: at commit the worker re-reads outbox.endpoints
// and claims what the change made deliverable (a resume, a new URL).
PG_OUTBOX_FUNCTION(pg_outbox_request_wake) {
  (void)fcinfo;
  pg_outbox::pg::wake_at_commit();
  pg_outbox::pg::endpoints_at_commit = true;
  PG_RETURN_VOID();
}

// Called by outbox.replay: at commit the worker moves the replayed messages into the
// queue (worker/replays.cpp).
PG_OUTBOX_FUNCTION(pg_outbox_replays_at_commit) {
  (void)fcinfo;
  pg_outbox::pg::wake_at_commit();
  pg_outbox::pg::replays_at_commit = true;
  PG_RETURN_VOID();
}
