// How long the worker's loop may sleep before its next round. Commits (its latch) and
// the delivery thread's results (their fd) wake it whatever the timeout says; the
// timeout is for what nobody announces: the end of an error pause, a message or a
// retry coming due, housekeeping, a parked endpoint's next try, and the poll interval,
// which bounds every sleep so that direct edits of the tables are noticed.
#pragma once

#include <cstdint>
#include <vector>

namespace pg_outbox::core {

struct LoopState {
  int64_t error_pause_until_ms = 0;  // the worker pauses after an error until then
  bool ready = false;                // the extension is there, at this library's version
  bool enabled = true;               // pg_outbox.enabled
  int poll_interval_ms = 1000;
  bool more_due = false;  // the last claim was full: claim again at once
  // Results not yet written back are due then (settle_timing.hpp; INT64_MAX: none wait).
  int64_t settle_at_ms = INT64_MAX;
  int64_t next_claim_ms = 0;
  int64_t next_housekeeping_ms = 0;
  // Replayed messages wait to be moved into the queue from then (INT64_MAX: none wait).
  int64_t replays_at_ms = INT64_MAX;
  std::vector<int64_t> parked_until_ms;  // of each parked endpoint
};

// The wait, in ms (0: do not sleep):
//  - during an error pause, until it ends (however long the poll interval);
//  - not ready or disabled: the poll interval (nothing else is due);
//  - more due: 0;
//  - else until the earliest of the next claim, housekeeping, the write of the results
//    waiting, the next move of replayed messages and the parked endpoints' next tries
//    still ahead (one whose time has passed is tried in this round, not waited for), at
//    least 0 and at most the poll interval.
int wait_timeout_ms(const LoopState& state, int64_t now_ms);

}  // namespace pg_outbox::core
