// What the steps of a round share: the worker's state, one owner per concern. Steps are
// free functions of it (claim.cpp, notify.cpp, outcomes.cpp, settle.cpp,
// housekeeping.cpp), so that each file holds one concern and the state's parts have one
// owner each; the loop (worker.cpp) calls them in order.
#pragma once

#include "core/clock.hpp"
#include "core/quiet_endpoints.hpp"
#include "core/request_headers.hpp"
#include "core/settle_timing.hpp"
#include "core/wake_coalescer.hpp"
#include "http/delivery_thread.hpp"
#include "pg/worker/endpoints.hpp"
#include "pg/worker/in_flight.hpp"
#include "pg/worker/parking.hpp"
#include "pg/worker/results.hpp"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace pg_outbox::pg {
struct DatabaseSlot;
}

namespace pg_outbox::pg::worker {

// When the worker claims next.
struct Schedule {
  bool more_due = true;  // the last claim was full (or room was made): claim again at once
  // Room held messages back: a claim was not worth running (wants_claim), had no byte
  // budget, or stopped at its limit or budget. Results that leave the worker's hands
  // then call the next claim at once (settle.cpp, written); without it the claim before
  // saw everything due, and a commit's wake or a due time calls the next one.
  bool room_wanted = false;
  int64_t next_claim_ms = 0;  // otherwise: when something becomes due (or the poll interval)
  size_t claim_round = 0;     // rotates the endpoints' order (core::plan_claim)
  core::WakeCoalescer wakes;
  // NOTIFY endpoints are claimed in a transaction of their own at each claim. Once one
  // found nothing, the next waits for a reason (notify.cpp, notify_round_due): a commit's
  // wake since, one of their messages coming due (due_ms, at most a poll interval away),
  // or another set of NOTIFY endpoints (one parked, resumed, added). An HTTP drain beside
  // an idle NOTIFY endpoint no longer pays an empty transaction per claim.
  struct NotifyRounds {
    bool woken = false;                  // a commit's wake came since the last NOTIFY round
    bool quiet = false;                  // the last NOTIFY round found nothing to claim
    int64_t due_ms = 0;                  // when quiet: when one of their messages comes due
    std::vector<std::string> endpoints;  // when quiet: the NOTIFY endpoints it looked at
  };
  NotifyRounds notify;
  // HTTP endpoints a claim found with nothing to take: left out of the claims until a
  // commit's wake, a result of theirs, a due time or an endpoint change (core/
  // quiet_endpoints.hpp). A claim with nothing else to take is not run at all.
  core::QuietEndpoints quiet_http;
  core::LastSettle last_settle;  // results that can wait are written kSettleEveryMs after it
  int64_t next_housekeeping_ms = 0;
  int64_t next_orphan_check_ms = 0;
  int64_t housekeeping_quiet_until_ms = 0;  // its failures are logged once a minute
  bool recount_queued = true;               // max_pending's counts must be made (again)
  // outbox.replay_queue may hold messages to move into the queue (replays.cpp); after a
  // failed move, the next waits until replays_retry_ms.
  bool replays_waiting = true;
  int64_t replays_retry_ms = 0;
  int64_t replays_quiet_until_ms = 0;  // failed moves are logged once a minute
  // A table partitioned by time has partitions until covered_ms, of width_s; after a
  // failed attempt to create them, the next one waits until retry_ms.
  struct Partitions {
    int64_t covered_ms = 0;
    int width_s = 0;
    int64_t retry_ms = 0;
  };
  Partitions history;   // outbox.history
  Partitions attempts;  // outbox.attempts
};

struct WorkerState {
  WorkerState(DatabaseSlot& slot_, const core::Clock& clock_, http::DeliveryThread& delivery_)
      : slot(slot_), clock(clock_), delivery(delivery_), random(std::random_device{}()) {}

  DatabaseSlot& slot;  // this database's shared state (latch, status, counters)
  const core::Clock& clock;
  http::DeliveryThread& delivery;  // libcurl, on its own thread
  Endpoints endpoints;
  InFlight in_flight;
  Results results;
  Parking parking;
  Schedule schedule;
  core::WebhookIdSource webhook_ids;  // this database's instance id (read when ready)
  uint32_t extension_oid = 0;         // of the extension whose tables the deliveries belong to
  std::mt19937_64 random;

  int64_t now_ms() const { return clock.now_ms(); }
  // The messages the next claim must not take again: queued in the thread, answered
  // with their results not yet written, and those whose results wait with a parked
  // endpoint.
  std::vector<int64_t> in_flight_ids() const;
  // Drops every delivery in flight and every result not yet written: they belong to
  // tables that no longer exist.
  void forget_deliveries();
};

// Called first in every transaction that claims or settles: message ids belong to one
// incarnation of the extension's tables, and must never settle rows of the next one.
void require_same_extension(const WorkerState& state);

}  // namespace pg_outbox::pg::worker
