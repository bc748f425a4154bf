// What the worker decides before a claim runs its SQL: which endpoints may be claimed
// now, in which order, how many messages and how many payload bytes it may take, and
// when an open circuit lets its endpoint be tried again. Pure functions of a snapshot
// of the worker's state, so the rules of fairness and backpressure can be tested
// without a database.
//
// The rules, in short:
//  - The worker keeps about claim_target() messages claimed: enough to keep every
//    connection busy between two claims. It claims again once less than half of that
//    is held for endpoints that may still be claimed (wants_claim).
//  - Each HTTP endpoint may hold its share of that target (share_of), its part of the
//    connections; one that holds it is left out of the claim, so that one slow
//    endpoint's queue never takes every other endpoint's room.
//  - The order of the endpoints handed to the claim rotates by one every claim, so that
//    a batch that cannot take everyone is spread across endpoints over time.
#pragma once

#include "core/circuit_breaker.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pg_outbox::core {

// The settings a claim is sized by (pg_outbox.batch_size, max_concurrency,
// max_inflight_bytes; the defaults are the settings' defaults).
struct ClaimSettings {
  int batch_size = 500;
  int max_concurrency = 64;
  int64_t max_inflight_bytes = 64 << 20;
};

// One endpoint as the claim sees it. Names are unique within a list of views.
struct EndpointView {
  std::string name;
  bool notify = false;  // delivered by NOTIFY (it has a channel), not HTTP
  bool paused = false;
  bool parked = false;  // held up now (its results wait to be written alone, or its parking time runs)
  bool quiet = false;   // an HTTP endpoint found with nothing to claim since (quiet_endpoints.hpp)
  Breaker breaker;
  int concurrency = 32;           // its own cap on requests in flight, else pg_outbox.endpoint_concurrency
  std::optional<int> rate_limit;  // most requests started per second; none: no limit
  size_t outstanding = 0;         // its messages the worker holds (handed to HTTP, not yet settled)
  int batch_size = 1;             // most messages in one of its requests (docs/delivery.md, Batches)
};

// Enough claimed work to keep every connection busy between two claims:
// max(batch_size, 2 * max_concurrency).
size_t claim_target(const ClaimSettings& settings);

// The endpoint's share of the claim target: its part of the connections (its
// concurrency, at most max_concurrency, out of max_concurrency) applied to the target,
// and never less than its concurrency. A rate-limited endpoint holds at most what it
// can send in 10 s (at least 1): its claimed messages wait in the worker, and must not
// wait there for minutes. A batching endpoint's request carries batch_size messages: its
// share is that many times as large, in messages.
size_t share_of(const EndpointView& endpoint, const ClaimSettings& settings);
// The same from the endpoint's concurrency, rate limit and batch size alone.
size_t share_of(int concurrency, std::optional<int> rate_limit, const ClaimSettings& settings, int batch_size = 1);

// Whether the endpoint holds its share (and at least one request): it is left out of
// the HTTP claim, its results make room. Only meaningful for HTTP endpoints.
bool holds_its_share(const EndpointView& endpoint, const ClaimSettings& settings);

// What the worker holds for endpoints that may still be claimed: in_flight (every
// request it holds) less what the endpoints that hold their share hold. Requests of
// endpoints missing from the list (dropped since they were claimed) count as claimable.
size_t claimable_outstanding(size_t in_flight, const std::vector<EndpointView>& endpoints,
                             const ClaimSettings& settings);

// Whether a claim has room to be worth running: less than half the claim target is
// held for endpoints that may still be claimed. A claim for every few results would
// spend the database's time on tiny batches.
// widest: the largest batch size of the endpoints (widest_batch), whose requests carry
// that many messages each.
bool wants_claim(size_t claimable_outstanding, const ClaimSettings& settings, int widest = 1);
// The largest batch size of the HTTP endpoints that are not paused (1 when none batches).
int widest_batch(const std::vector<EndpointView>& endpoints);

struct ClaimPlan {
  // HTTP endpoints claimed together (circuit closed, not holding their share, not
  // quiet), in the caller's order rotated left by round % size.
  std::vector<std::string> http;
  // HTTP endpoints whose open circuit's cool-down is over: one message each, claimed
  // alone, goes as the probe. In the caller's order.
  std::vector<std::string> probes;
  // NOTIFY endpoints (breakers do not apply), rotated left like http; see next_round.
  std::vector<std::string> notify;
  // http and notify in the caller's order (not rotated): the endpoints asked when their
  // next message comes due, when this claim leaves nothing more due now.
  std::vector<std::string> all_active;
  // Messages the HTTP claim may take: the room left under the claim target (times the
  // largest batch size of the endpoints claimed: their requests carry that many
  // messages), at most pg_outbox.batch_size; 0 when the byte budget is spent.
  int limit = 0;
  // Payload bytes the worker may still take on: max_inflight_bytes less what it holds
  // (never negative). The probes are bound by neither the limit nor this budget: each
  // takes one message within max_inflight_bytes, so a circuit can close while the
  // worker is full.
  int64_t byte_budget = 0;
  // The earliest open_until of the open circuits still cooling down (INT64_MAX when
  // none): the claim is due again then, to send their probes.
  int64_t next_breaker_ms = INT64_MAX;
  // The rotation counter for the next claim: round + 1 when http is non-empty, round
  // otherwise. The notify rotation uses this value (the counter after the http
  // rotation advanced it), so with both present they rotate by round and round + 1.
  size_t next_round = 0;
};

// The plan of one claim. endpoints: every endpoint, in a stable order of the caller's
// choosing (the rotation is applied to it); in_flight: every request the worker holds;
// held_bytes: their payload bytes; round: the rotation counter (ClaimPlan::next_round
// of the previous claim, 0 at first).
//
// Left out: paused and parked endpoints; HTTP endpoints that hold their share (even
// when their circuit is open: they do not count towards next_breaker_ms); HTTP endpoints
// whose circuit is open and cooling down, or half-open (their probe is in flight); quiet
// HTTP endpoints whose circuit is closed (an open one's probe still goes).
ClaimPlan plan_claim(const std::vector<EndpointView>& endpoints, const ClaimSettings& settings, size_t in_flight,
                     int64_t held_bytes, size_t round, int64_t now_ms);

// When to claim next after a claim that left nothing more due now: at the earliest of
// the poll interval, the next open circuit's end of cool-down, and the time the next
// message comes due (due_in_ms from now; nullopt or <= 0 leaves only the others: a
// message due already is one that the claim cannot take now, blocked behind an ordered
// head in flight or claimed otherwise, and a settle or a commit wakes the worker for it).
int64_t next_claim_at(int64_t now_ms, int poll_interval_ms, int64_t next_breaker_ms, std::optional<int64_t> due_in_ms);

}  // namespace pg_outbox::core
