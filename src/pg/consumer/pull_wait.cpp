// outbox.read(..., wait => ...) sleeps until a transaction that enqueued commits, not by
// polling the queue (docs/delivery.md, Pull endpoints). The committing backend bumps its
// database's counter and broadcasts a condition variable (runtime/shared_state.hpp,
// PullWake; runtime/commit_wake.cpp). A reader notes the counter before it looks at the
// queue (outbox._pull_commits), and when it found nothing sleeps only while the counter
// has not moved (outbox._pull_wait): a commit between its look and its sleep is never
// missed. After a wake it looks again with a new statement, so a fresh snapshot.
#include "pg/boundary/boundary.hpp"
#include "pg/runtime/shared_state.hpp"

extern "C" {
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/condition_variable.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

namespace pg_outbox::pg {

namespace {

// Without shared memory (the library not preloaded: no worker either) nobody broadcasts;
// the reader then looks again at this interval.
constexpr long kUnsharedLookMs = 100;

}  // namespace

}  // namespace pg_outbox::pg

// outbox._pull_commits() RETURNS bigint: the counter of this database's enqueuing commits.
PG_OUTBOX_FUNCTION(pg_outbox_pull_commits) {
  (void)fcinfo;
  pg_outbox::pg::PullWake* wake = pg_outbox::pg::pull_wake_of(MyDatabaseId);
  PG_RETURN_INT64(wake == nullptr ? 0 : static_cast<int64>(pg_atomic_read_u64(&wake->commits)));
}

// outbox._pull_wait(seen bigint, until timestamptz) RETURNS void: returns once the
// counter differs from seen, or at until. A cancel or termination interrupts it (the
// condition variable's sleep checks for interrupts; the abort cancels the sleep).
PG_OUTBOX_FUNCTION(pg_outbox_pull_wait) {
  using namespace pg_outbox::pg;
  const uint64 seen = static_cast<uint64>(PG_GETARG_INT64(0));
  const TimestampTz until = PG_GETARG_TIMESTAMPTZ(1);
  PullWake* wake = pull_wake_of(MyDatabaseId);
  pg_call([&] {
    if (wake != nullptr) ConditionVariablePrepareToSleep(&wake->committed);
    for (;;) {
      if (wake != nullptr && pg_atomic_read_u64(&wake->commits) != seen) break;
      const long remaining_ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), until);
      if (remaining_ms <= 0) break;
      if (wake == nullptr) {
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
                        remaining_ms < kUnsharedLookMs ? remaining_ms : kUnsharedLookMs, PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
        break;
      }
      // true: timed out; the loop then finds no time left.
      (void)ConditionVariableTimedSleep(&wake->committed, remaining_ms, PG_WAIT_EXTENSION);
    }
    if (wake != nullptr) ConditionVariableCancelSleep();
  });
  PG_RETURN_VOID();
}
