// What a pull consumer's answer does to the messages it holds (docs/delivery.md, Pull
// endpoints): outbox.ack, outbox.nack and outbox.read (extension/src/45_pull_consumers.sql)
// check their arguments and rights, then settle through the worker's own settle
// (store/settlements.cpp): an acknowledged message goes to the history as a 2xx does, a
// refused one is retried with the endpoint's backoff or dead-lettered, and a keyed head
// that leaves hands its place to its key's next message by the one promotion rule
// (ordering/ordering.hpp).
//
// "Held by a reader" is precise: the message is listed in a row of outbox.holds (written
// by outbox.read) whose held_until is still ahead of the clock. Once it has passed, the
// row is a lapsed attempt (counted by the next read, outbox._pull_lapsed) and an ack or
// nack that comes later finds nothing.
#include "core/clock.hpp"
#include "core/delivery_policy.hpp"
#include "pg/boundary/boundary.hpp"
#include "pg/boundary/spi.hpp"
#include "pg/runtime/commit_wake.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/store/settlements.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/builtins.h"
}

#include <random>
#include <string>
#include <vector>

namespace pg_outbox::pg {

namespace {

struct Held {
  int64_t id;
  int attempts;  // with the read's attempt
  std::optional<std::string> ordering_key;
  int64_t lapsed_at_ms;  // unix ms when the read's visibility passed (take_lapsed only)
};

std::vector<Held> held_messages(const Rows& rows) {
  std::vector<Held> found(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    found[r] = {rows.int64(r, 0), static_cast<int>(rows.int64(r, 1)) + 1, std::nullopt, rows.int64(r, 3)};
    if (!rows.is_null(r, 2)) found[r].ordering_key = rows.text(r, 2);
  }
  return found;
}

// The endpoint's messages among ids that a read holds now, taken out of their holds (a
// hold left empty is deleted): the caller settles them. Here and in take_lapsed the
// messages are found by the primary key's index condition: a join of the held ids to the
// queue could scan the whole primary key per id when the statistics said the queue was
// nearly empty (an ack of 500: minutes, helper-28). The hold rows are locked first,
// so that an ack and a nack of the same message, or an answer and the count of a lapsed
// read, never both take it. Both statements run their generic plans, as the settle's do
// (store/settlements.cpp): the same index probes whatever the endpoint and the ids.
std::vector<Held> take_held(Datum endpoint, Datum ids) {
  static Statement statement(R"sql(
    WITH h AS (SELECT h.id, h.message_ids FROM outbox.holds h
                WHERE h.endpoint = $1 AND h.held_until > clock_timestamp() AND h.message_ids && $2
                ORDER BY h.id FOR UPDATE),
    emptied AS (DELETE FROM outbox.holds x USING h WHERE x.id = h.id AND h.message_ids <@ $2),
    left_over AS (UPDATE outbox.holds x SET message_ids = ARRAY(SELECT u FROM unnest(h.message_ids) AS u
                                                                 WHERE u <> ALL ($2))
                    FROM h WHERE x.id = h.id AND NOT h.message_ids <@ $2)
    SELECT m.id, m.attempts, m.ordering_key, NULL::bigint FROM outbox.messages m
     WHERE m.id = ANY (ARRAY(SELECT u.id FROM h CROSS JOIN unnest(h.message_ids) AS u(id) WHERE u.id = ANY ($2)))
  )sql",
                             {TEXTOID, INT8ARRAYOID}, Statement::Plan::kGeneric);
  return held_messages(statement.run({endpoint, ids}));
}

// The messages of the endpoint's reads whose visibility has passed, taken out of them
// (the hold rows are deleted; those another read is counting now are left to it).
std::vector<Held> take_lapsed(Datum endpoint) {
  static Statement statement(R"sql(
    WITH l AS (DELETE FROM outbox.holds h
                WHERE h.id IN (SELECT o.id FROM outbox.holds o
                                WHERE o.endpoint = $1 AND o.held_until <= clock_timestamp()
                                  FOR UPDATE SKIP LOCKED)
               RETURNING h.message_ids, h.held_until),
    lapsed AS (SELECT u.id, l.held_until FROM l CROSS JOIN unnest(l.message_ids) AS u(id)),
    found AS MATERIALIZED (SELECT m.id, m.attempts, m.ordering_key FROM outbox.messages m
                            WHERE m.id = ANY (ARRAY(SELECT x.id FROM lapsed x)))
    SELECT f.id, f.attempts, f.ordering_key, (extract(epoch FROM x.held_until) * 1000)::bigint
      FROM found f JOIN lapsed x ON x.id = f.id
  )sql",
                             {TEXTOID}, Statement::Plan::kGeneric);
  return held_messages(statement.run({endpoint}));
}

std::string text_argument(FunctionCallInfo fcinfo, int n) {
  return pg_call([&] { return static_cast<const char*>(TextDatumGetCString(PG_GETARG_DATUM(n))); });
}

// A reader's answer (ack, nack, or the visibility let pass) as the attempt log records
// it: at the time of the answer (for a visibility let pass, the moment it passed), not
// timed (the reader's work is its own), the error in the result (docs/operations.md, The
// attempt log).
store::Settlements::Attempt answered(int64_t at_ms = core::SystemClock().now_ms()) {
  store::Settlements::Attempt a;
  a.started_ms = at_ms;
  return a;
}

store::Settlements::Dead dead(const Held& m, const std::string& endpoint, core::DeadReason reason, std::string error,
                              store::Settlements::Attempt attempt) {
  store::Settlements::Dead d;
  d.id = m.id;
  d.reason = reason;
  d.error = std::move(error);
  d.attempts = m.attempts;
  d.endpoint = endpoint;
  d.ordering_key = m.ordering_key;
  d.attempt = std::move(attempt);
  return d;
}

}  // namespace

}  // namespace pg_outbox::pg

using pg_outbox::pg::Held;

// outbox._pull_ack(endpoint text, ids bigint[]) RETURNS bigint: the held messages
// among ids are delivered; returns how many.
PG_OUTBOX_FUNCTION(pg_outbox_pull_ack) {
  using namespace pg_outbox::pg;
  int64_t count = 0;
  with_spi([&] {
    const std::string endpoint = text_argument(fcinfo, 0);
    store::Settlements settlements;
    for (const Held& m : take_held(PG_GETARG_DATUM(0), PG_GETARG_DATUM(1)))
      settlements.sent.push_back({m.id, 0, m.attempts, endpoint, m.ordering_key, answered()});
    count = static_cast<int64_t>(settlements.sent.size());
    if (count > 0) {
      store::settle(settlements, store::kept());
      wake_at_commit(kWakeReadersOnly);  // a key's next message may now be due (as nack, below)
    }
  });
  PG_RETURN_INT64(count);
}

// outbox._pull_nack(endpoint text, id bigint, error text, retry_after_ms bigint,
// permanent boolean, max_attempts int) RETURNS boolean: the held message is retried
// (after retry_after_ms when not NULL, else with the backoff) or dead-lettered with the
// consumer's error; false when the endpoint's reader does not hold it.
PG_OUTBOX_FUNCTION(pg_outbox_pull_nack) {
  using namespace pg_outbox;
  using namespace pg_outbox::pg;
  bool found = false;
  with_spi([&] {
    const std::string endpoint = text_argument(fcinfo, 0);
    const Datum ids = int8_array({PG_GETARG_INT64(1)});
    std::vector<Held> held = take_held(PG_GETARG_DATUM(0), ids);
    if (held.empty()) return;
    found = true;
    const Held& m = held.front();
    std::string error = text_argument(fcinfo, 2);
    std::optional<int64_t> retry_after_ms;
    if (!PG_ARGISNULL(3)) retry_after_ms = PG_GETARG_INT64(3);
    const bool permanent = PG_GETARG_BOOL(4);
    const int max_attempts = PG_ARGISNULL(5) ? settings.max_attempts : PG_GETARG_INT32(5);
    static std::mt19937_64 random{std::random_device{}()};
    const core::Outcome outcome = permanent ? core::Outcome{core::Verdict::Dead, core::DeadReason::RejectedByConsumer}
                                            : core::Outcome{core::Verdict::Retry, core::DeadReason::None};
    const core::Settlement settled = core::settle_attempt(
        outcome, m.attempts, max_attempts, core::BackoffPolicy(settings.backoff_base_ms, settings.backoff_max_ms),
        retry_after_ms, std::uniform_real_distribution<double>(0.0, 1.0)(random));
    store::Settlements settlements;
    if (settled.verdict == core::Verdict::Retry)
      settlements.retry.push_back(
          {m.id, settled.retry_delay_ms, std::move(error), 0, m.attempts, endpoint, answered()});
    else
      settlements.dead.push_back(dead(m, endpoint, settled.reason, std::move(error), answered()));
    store::settle(settlements, store::kept());
    // A retry may come due before what the waiting readers looked at, and a settle may
    // promote a key's next message: they look again once this commits.
    wake_at_commit(kWakeReadersOnly);
  });
  PG_RETURN_BOOL(found);
}

// outbox._pull_lapsed(endpoint text, max_attempts int) RETURNS void: the endpoint's
// reads whose visibility has passed are attempts that ended unanswered (outbox.read counts
// them before it takes messages): each message is pending again at once, or dead-lettered
// (RETRY_EXHAUSTED) when that was its last attempt, and the attempt is logged at the
// moment its visibility passed.
PG_OUTBOX_FUNCTION(pg_outbox_pull_lapsed) {
  using namespace pg_outbox;
  using namespace pg_outbox::pg;
  with_spi([&] {
    const std::string endpoint = text_argument(fcinfo, 0);
    const int max_attempts = PG_GETARG_INT32(1);
    static const std::string kLapsed = "not acknowledged within its visibility timeout";
    store::Settlements settlements;
    for (const Held& m : take_lapsed(PG_GETARG_DATUM(0))) {
      if (m.attempts >= max_attempts)
        settlements.dead.push_back(
            dead(m, endpoint, core::DeadReason::RetryExhausted, kLapsed, answered(m.lapsed_at_ms)));
      else
        settlements.retry.push_back({m.id, 0, kLapsed, 0, m.attempts, endpoint, answered(m.lapsed_at_ms)});
    }
    if (settlements.has_results()) store::settle(settlements, store::kept());
  });
  PG_RETURN_VOID();
}
