// Endpoints that retire themselves (docs/operations.md, Endpoints that retire themselves):
// the worker keeps each endpoint's failing streak (core/endpoint_retirement.hpp), and
// pauses the endpoint when the streak has lasted pg_outbox.disable_after, or at once when
// its receiver answers 410 Gone. The pause is decided here and written by the next settle
// (Endpoints::save_breakers), in one transaction with the results that led to it.
#include "core/endpoint_retirement.hpp"
#include "pg/boundary/boundary.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/worker/steps.hpp"

extern "C" {
#include "utils/timestamp.h"
}

namespace pg_outbox::pg::worker {

namespace {

int64_t disable_after_ms() { return static_cast<int64_t>(settings.disable_after_s) * 1000; }

// Paused endpoints are not judged, nor one whose pause waits to be written.
bool judged(const Endpoint& endpoint) { return !endpoint.row.paused && !endpoint.retiring; }

void retire(WorkerState& state, Endpoint& endpoint, core::PauseReason reason, int64_t since_ms) {
  endpoint.retiring = Retiring{reason, since_ms};
  endpoint.row.paused = true;  // nothing more is claimed for it
  // Its requests not yet started would only fail (or be refused with 410): their
  // attempts are given back.
  give_back_requests_of(state, endpoint.row.name);
}

// Called inside pg_call: PostgreSQL's text of a unix time in milliseconds (a static buffer).
const char* timestamp_text(int64_t unix_ms) {
  TimestampTz t = time_t_to_timestamptz(static_cast<pg_time_t>(unix_ms / 1000)) + (unix_ms % 1000) * 1000;
  return timestamptz_to_str(t);
}

}  // namespace

void learn_health(WorkerState& state, Endpoint& endpoint, const core::ResponseJudgement& judged_response) {
  const int64_t now = state.now_ms();
  if (core::record_health(endpoint.row.failing, judged_response.health, now)) endpoint.breaker_dirty = true;
  if (!judged(endpoint)) return;
  if (judged_response.gone) {
    retire(state, endpoint, core::PauseReason::Gone, now);
  } else if (core::failing_long_enough(endpoint.row.failing, disable_after_ms(), now)) {
    retire(state, endpoint, core::PauseReason::Failing, endpoint.row.failing.since_ms);
  }
}

// An open (or half-open) circuit is failing too: its endpoint sends little or nothing
// while its failures go on, so it is judged without waiting for an answer.
void retire_failing_endpoints(WorkerState& state) {
  if (disable_after_ms() <= 0) return;
  const int64_t now = state.now_ms();
  state.endpoints.for_each([&](Endpoint& endpoint) {
    if (judged(endpoint) && endpoint.row.breaker.state != core::BreakerState::Closed &&
        core::failing_long_enough(endpoint.row.failing, disable_after_ms(), now))
      retire(state, endpoint, core::PauseReason::Failing, endpoint.row.failing.since_ms);
  });
}

// Once per pause, after the transaction that paused the endpoint has committed.
void log_retired(WorkerState& state) {
  for (const Retired& r : state.endpoints.take_retired()) {
    pg_call([&] {
      const char* since = timestamp_text(r.why.since_ms);
      ereport(LOG,
              (errmsg("pg_outbox: endpoint \"%s\" paused (%s)", r.name.c_str(), core::pause_reason_name(r.why.reason)),
               r.why.reason == core::PauseReason::Gone
                   ? errdetail("Its receiver answered 410 Gone at %s; that message waits with the others.", since)
                   : errdetail("It has answered nothing but failures since %s (pg_outbox.disable_after).", since),
               errhint("Its messages wait. Once the receiver is fixed: SELECT outbox.resume_endpoint('%s');",
                       r.name.c_str())));
    });
  }
}

}  // namespace pg_outbox::pg::worker
