// The steps of the worker's round, each a function of the worker's state (state.hpp).
// The loop (worker.cpp) calls them; they call each other only where a step's result is
// another's input (a claim gives back the requests of changed endpoints first, a settle
// that fails parks an endpoint).
#pragma once

#include "core/response_judgement.hpp"
#include "pg/store/claims.hpp"
#include "pg/worker/state.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pg_outbox::pg::worker {

// state.cpp
// Re-reads the endpoints if they changed (or the poll interval passed); a new set of
// max_pending endpoints asks for a recount.
void refresh_endpoints(WorkerState& state);

// outcomes.cpp: what the delivery thread answered, and requests taken back unstarted.
void take_responses(WorkerState& state);
void give_back_stale_requests(WorkerState& state);
void give_back_requests_of_changed_endpoints(WorkerState& state);
// The endpoint's half-open probe ended without an answer of the receiver (it could not be
// sent, or was taken back): the next message may go as the probe at once.
void lose_probe(WorkerState& state, const std::string& endpoint);
// The endpoint's requests not yet started are taken back, their attempts not counted.
void give_back_requests_of(WorkerState& state, const std::string& endpoint);
// ... and every endpoint's (the worker is stopping).
void give_back_every_unstarted_request(WorkerState& state);

// retirement.cpp: endpoints that retire themselves.
// What a response tells about its endpoint's health: the failing streak, and a pause
// (410 Gone, or nothing but failures for pg_outbox.disable_after).
void learn_health(WorkerState& state, Endpoint& endpoint, const core::ResponseJudgement& judged);
// Endpoints whose circuit is open judged between answers.
void retire_failing_endpoints(WorkerState& state);
// Logs the pauses that committed, once each.
void log_retired(WorkerState& state);

// claim.cpp: claim due messages, hand HTTP requests to the thread.
size_t claim_and_deliver(WorkerState& state);  // how many messages it claimed
// The keys' next messages the worker holds that it may no longer claim are written into
// the table as heads (successors::settle_stale, for the endpoints it serves). SPI connected.
uint64_t settle_stale(const WorkerState& state);
// store::claim, with the keys' next messages the worker holds for these endpoints
// (ordering/successors.hpp), which it forgets once claimed; held ones the worker may no
// longer claim are written into the table as heads first (settle_stale). SPI connected.
std::vector<store::ClaimedMessage> claim_messages(const WorkerState& state, const std::vector<std::string>& endpoints,
                                                  int limit, const std::vector<int64_t>& excluded, int64_t budget_bytes,
                                                  store::ClaimFor purpose);
// The endpoints as the claim sees them now: parked and quiet ones marked.
std::vector<core::EndpointView> claim_views(const WorkerState& state, int64_t now);
// Whether a claim is worth its transaction: the worker holds little enough for endpoints
// that may still be claimed (core::wants_claim), and one of them is not quiet, a probe
// is due or a NOTIFY round is. When not, the schedule says when to look again (at a
// result, a commit, or when something of theirs comes due).
bool claim_worth_running(WorkerState& state);
// requests.cpp: the claimed HTTP messages to the delivery thread (claimed -> queued), or
// to the DLQ when they cannot be sent as they stand. Their payloads are moved into the
// requests.
void start_http(WorkerState& state, std::vector<store::ClaimedMessage>& claimed, int64_t claim_id);
// A claimed message that goes to the DLQ without a request: this attempt was never made,
// so the attempts recorded stay those before it.
void dead_letter_unsent(WorkerState& state, const store::ClaimedMessage& m, core::DeadReason reason, std::string error);

// notify.cpp: NOTIFY endpoints, claimed, notified and settled in one transaction, when
// a round is due (Schedule::NotifyRounds); how many messages it claimed.
size_t notify_if_due(WorkerState& state, const std::vector<std::string>& endpoints);
// Whether the NOTIFY endpoints are worth a round now (Schedule::NotifyRounds).
bool notify_round_due(const WorkerState& state, const std::vector<std::string>& notify, int64_t now);

// replays.cpp: replayed messages moved from outbox.replay_queue into the queue, a batch
// a round while any wait; and when the next move is due (INT64_MAX: none wait).
void queue_replays(WorkerState& state);
int64_t replays_due_at(const WorkerState& state);

// settle.cpp: writing results back, when they are due (core/settle_timing.hpp) or now
// (when delivery is disabled: nothing else would wake the worker for them).
enum class Settling { kWhenDue, kNow };
void settle(WorkerState& state, Settling when);
// When the results waiting are due to be written (INT64_MAX when none wait).
int64_t results_due_at(const WorkerState& state);
// A transaction that may settle results (the claim, with NOTIFY's, and housekeeping). If
// it fails, the results and counts go back to what they were before it; counts are
// published only once it has committed.
void in_settling_transaction(WorkerState& state, const char* activity, const std::function<void()>& body);
// After a transaction that wrote these results has committed.
void written(WorkerState& state, const store::Settlements& results);

// housekeeping.cpp
void housekeeping(WorkerState& state);
void recount_queued(WorkerState& state);

// status.cpp: what worker_status() and metrics() read.
void publish_status(WorkerState& state, const char* what);
void publish_counts(WorkerState& state);
void publish_config_loaded(WorkerState& state);

}  // namespace pg_outbox::pg::worker
