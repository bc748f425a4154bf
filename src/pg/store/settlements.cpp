#include "pg/store/settlements.hpp"

#include "core/ordering_lock.hpp"
#include "pg/boundary/spi.hpp"
#include "pg/ordering/ordering.hpp"
#include "pg/ordering/successors.hpp"
#include "pg/runtime/process_role.hpp"
#include "pg/runtime/settings.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "commands/async.h"
}

#include <iterator>
#include <stdexcept>
#include <string>

namespace pg_outbox::pg::store {

namespace {

template <typename T>
void move_all(std::vector<T>& to, std::vector<T>& from) {
  std::move(from.begin(), from.end(), std::back_inserter(to));
  from.clear();
}

// Every statement here runs its generic plan (Statement::Plan::kGeneric): each finds its
// rows by the primary key's index condition, or by place (Find below), whatever the
// arrays hold, and the plan cache
// would otherwise keep planning them for every call while its estimates favoured custom
// plans, which depends on when the queue was analyzed. With a queue analyzed while it held
// 300,000 pull messages, a pull reader's ack of one message spent 126 µs planning the move
// to the history against 101 µs running it (pg_stat_statements, track_planning).

// The keys whose head a settle took out of the queue: (endpoint, ordering_key) pairs,
// returned as rows by the statements that move rows by id, or as the claim read them
// (sent messages found where it read them). The messages settled are heads, in the table
// or claimed by the worker as their key's next (ordering/successors.cpp). A key may come
// twice (successors::find moves each on once).
struct Keys {
  std::vector<std::string> endpoints;
  std::vector<std::string> keys;
  void add(const Rows& rows) {
    for (size_t r = 0; r < rows.size(); ++r) {
      endpoints.push_back(rows.text(r, 0));
      keys.push_back(rows.text(r, 1));
    }
  }
  void add_claimed(const std::vector<Settlements::Sent>& sent) {
    for (const auto& s : sent) {
      if (!s.ordering_key) continue;
      endpoints.push_back(s.endpoint);
      keys.push_back(*s.ordering_key);
    }
  }
};

// How the statements that move sent rows find them.
//  - kById: by "m.id = ANY ($1)", the primary key's index condition: a pull reader's ack,
//    which knows no more.
//  - kByPlace: where the claim read each one ($4, tids in $1's order), checked to be that
//    message still: a TID scan reads one heap page a row, where each descent of the
//    primary key read two more, and on an ordered endpoint (whose followers' first row
//    versions, numbered at their commit, are dead beside them) six in all (EXPLAIN
//    (ANALYZE, BUFFERS) of the DELETE of 333 messages, ordered: 2,001 buffers against 333,
//    1.7-1.9 ms against 1.1-1.5). One TID scan of every place, joined by hash to the
//    (place, id) pairs (PlanLimits::tid_scan_hash_join): a TID scan for each place, in a
//    nested loop, asked the kernel for the table's size at each (the DELETE of 500: 1.9
//    ms against 0.8). A row that moved since (an operator's UPDATE) or left is not found
//    there; these statements return how many they moved, and the caller moves those
//    missing by id (settle_sent).
enum class Find { kById, kByPlace };

// The rows leaving the queue, RETURNING what is given.
std::string moved_sql(Find find, const char* returning) {
  return std::string("moved AS (DELETE FROM outbox.messages m ") +
         (find == Find::kById ? "WHERE m.id = ANY ($1)"
                              : "USING unnest($4::tid[], $1::bigint[]) AS t(tid, id) "
                                "WHERE m.ctid = ANY ($4) AND m.ctid = t.tid AND m.id = t.id") +
         " RETURNING " + returning + ")";
}

// By id, the keys whose heads left (Keys); by place, only how many rows moved: their
// keys are those the claim read (settle_sent).
std::string keys_left_sql(Find find) {
  return find == Find::kById ? "SELECT DISTINCT endpoint, ordering_key FROM moved WHERE ordering_key IS NOT NULL"
                             : "SELECT count(*) FROM moved";
}

// The statement that moves sent rows to the history: each row's status ($2) and attempt
// number ($3) from arrays in $1's order, or (shared) one of each for every row.
// The rows are joined to their results (unnest) only after they left the table: a join of
// unnest() to outbox.messages by id let the planner scan the whole primary key when the
// statistics said the queue was nearly empty (a drained queue vacuumed, then a backlog): a
// nested loop over a million rows per settle of 500 (100 s, helper-28). Nor
// "m.id = ANY ($1)" beside a join by id: it became an index condition of each inner scan
// of the nested loop, and every rescan sorted the whole array again (9.4 ms for a settle
// of 500, against 2.0 ms). By place, the rows are joined to the places by hash.
// One statement: the rows leave the queue for the history, and the counts of their
// partitions grow by as many, in this backend's slot (extension/src/35_engine_tables.sql).
std::string sent_sql(bool shared, Find find) {
  const std::string results =
      shared ? "" : "s AS (SELECT * FROM unnest($1::bigint[], $2::int[], $3::int[]) AS s(id, http_status, attempts)),";
  const std::string http_status = shared ? "$2" : "s.http_status", attempts = shared ? "$3" : "s.attempts";
  const std::string rows = shared ? "moved v" : "moved v JOIN s ON s.id = v.id";
  return "WITH " + moved_sql(find, "m.*") + ", " + results + R"sql(
    kept AS (INSERT INTO outbox.history (id, endpoint, event_type, payload, headers, ordering_key,
                    idempotency_key, attempts, last_http_status, created_at, sent_at)
             SELECT v.id, v.endpoint, v.event_type, v.payload, v.headers, v.ordering_key, v.idempotency_key,
                    )sql" +
         attempts + ", NULLIF(" + http_status + R"sql(, 0), v.created_at, now()
               FROM )sql" +
         rows + R"sql(
             RETURNING tableoid, endpoint),
    counted AS (INSERT INTO outbox.history_counts AS hc (partition, endpoint, slot, sent)
                SELECT k.tableoid::regclass, k.endpoint, pg_backend_pid() % 8, count(*) FROM kept k
                 WHERE k.tableoid <> 'outbox.history_default'::regclass GROUP BY 1, 2
                ON CONFLICT (partition, endpoint, slot) DO UPDATE SET sent = hc.sent + excluded.sent)
    )sql" +
         keys_left_sql(find);
}

// Without the history: the rows only leave the queue.
std::string sent_unkept_sql(Find find) {
  return "WITH " + moved_sql(find, "m.endpoint, m.ordering_key") + " " + keys_left_sql(find);
}

// A statement that moves sent rows, with its text: ids ($1), statuses and attempt numbers
// ($2, $3: arrays, or one of each when shared), places ($4).
struct SentStatement {
  SentStatement(bool keep_history, bool shared, Find find)
      : sql(keep_history ? sent_sql(shared, find) : sent_unkept_sql(find)),
        statement(sql.c_str(), {INT8ARRAYOID, results_type(shared), results_type(shared), TIDARRAYOID},
                  Statement::Plan::kGeneric, limits(find)) {}
  SentStatement(const SentStatement&) = delete;
  SentStatement& operator=(const SentStatement&) = delete;
  static Oid results_type(bool shared) { return shared ? INT4OID : INT4ARRAYOID; }
  // By place, one TID scan joined by hash, and the primary key hidden: after an ANALYZE
  // that counted no row, the join to the places was planned as a walk of the whole
  // primary key, its rows filtered by place (575 µs a message in one drain) (t/058).
  static std::optional<PlanLimits> limits(Find find) {
    if (find == Find::kById) return std::nullopt;
    return PlanLimits{IndexName{"outbox", "messages_pkey"}, true};
  }
  std::string sql;
  Statement statement;  // reads sql
};

void settle_sent(const std::vector<Settlements::Sent>& sent, bool keep_history, Keys& left) {
  std::vector<int64_t> ids, tids;
  std::vector<int32_t> statuses, attempts;
  bool placed = true;  // every row's place is known: the worker claimed them all
  for (const auto& s : sent) {
    ids.push_back(s.id);
    tids.push_back(s.tid);
    statuses.push_back(s.http_status);
    attempts.push_back(s.attempts);
    placed = placed && s.tid != 0;
  }
  // A settle whose results share one status and one attempt number (a drain's first
  // attempts, a NOTIFY round, a pull reader's ack of one read) passes them as two values:
  // joining the rows to their results cost a third of the statement (1.2 µs a message,
  // docs/performance-history.md, seventeenth step).
  // Without the history the results are not written: one statement for each way of finding.
  bool shared = keep_history;
  for (size_t k = 1; k < ids.size() && shared; ++k) shared = statuses[k] == statuses[0] && attempts[k] == attempts[0];
  static SentStatement unkept[2] = {SentStatement(false, false, Find::kById),
                                    SentStatement(false, false, Find::kByPlace)};
  static SentStatement kept[2][2] = {
      {SentStatement(true, false, Find::kById), SentStatement(true, false, Find::kByPlace)},
      {SentStatement(true, true, Find::kById), SentStatement(true, true, Find::kByPlace)}};
  const auto run = [&](Find find) {
    const bool by_place = find == Find::kByPlace;
    Statement& statement = (keep_history ? kept[shared][by_place] : unkept[by_place]).statement;
    return statement.run({int8_array(ids), shared ? Int32GetDatum(statuses[0]) : int4_array(statuses),
                          shared ? Int32GetDatum(attempts[0]) : int4_array(attempts), tid_array(tids)});
  };
  if (placed) {
    // The keys of the rows moved are those the claim read: a message being delivered
    // keeps its endpoint and key (ordering/moves.cpp refuses to move it). Returned by the
    // statement, as text and made distinct, they cost the main thread of an ordered drain
    // 4 µs a message (27.1 -> 23.0, medians of four drains each, alternating builds).
    const int64_t moved = run(Find::kByPlace).int64(0, 0);
    left.add_claimed(sent);
    if (moved == static_cast<int64_t>(ids.size())) return;
    // Some were not where the claim read them: moved by id (those just moved are gone).
    // Their keys are in `left` already: each such message has left its key, by this
    // settle or by someone else's DELETE, whose trigger made the key's next message a
    // head in the table and moved the endpoint's group's version: the key is looked up
    // again, and the lookup finds that head.
  }
  left.add(run(Find::kById));
}

// A retried message that the worker claimed as its key's next one (ordering/successors.cpp)
// becomes its key's head in the table here, with its new due time: ordering_seq is NULL.
void settle_retry(const std::vector<Settlements::Retry>& retry) {
  std::vector<int64_t> ids, delays;
  std::vector<std::string> errors;
  std::vector<int32_t> statuses, attempts;
  for (const auto& r : retry) {
    ids.push_back(r.id);
    delays.push_back(r.delay_ms);
    errors.push_back(r.error);
    statuses.push_back(r.http_status);
    attempts.push_back(r.attempts);
  }
  // Each row's values by its place in the arrays, not by a join (see settle_sent): linear
  // searches of a few hundred entries.
  static Statement statement(R"sql(
    UPDATE outbox.messages m SET attempts = ($5::int[])[array_position($1::bigint[], m.id)],
           next_attempt_at = now() + ($2::bigint[])[array_position($1::bigint[], m.id)] * interval '1 millisecond',
           ordering_seq = NULL, last_error = ($3::text[])[array_position($1::bigint[], m.id)],
           last_http_status = NULLIF(($4::int[])[array_position($1::bigint[], m.id)], 0),
           first_failed_at = coalesce(m.first_failed_at, now())
     WHERE m.id = ANY ($1)
  )sql",
                             {INT8ARRAYOID, INT8ARRAYOID, TEXTARRAYOID, INT4ARRAYOID, INT4ARRAYOID},
                             Statement::Plan::kGeneric);
  statement.run({int8_array(ids), int8_array(delays), text_array(errors), int4_array(statuses), int4_array(attempts)});
}

void settle_dead(const std::vector<Settlements::Dead>& dead, Keys& left) {
  std::vector<int64_t> ids;
  std::vector<std::string> reasons, errors, bodies;
  std::vector<int32_t> statuses, attempts;
  for (const auto& d : dead) {
    ids.push_back(d.id);
    reasons.push_back(core::reason_code(d.reason));
    errors.push_back(d.error);
    statuses.push_back(d.http_status);
    bodies.push_back(d.body);
    attempts.push_back(d.attempts);
  }
  // One statement moves the rows: deleted from the outbox and inserted into the DLQ
  // together, with every field an operator needs to fix and requeue them.
  // Found by the primary key's index condition, joined to their results after (settle_sent).
  static Statement statement(R"sql(
    WITH moved AS (DELETE FROM outbox.messages m WHERE m.id = ANY ($1) RETURNING m.*),
    d AS (SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::int[], $5::text[], $6::int[])
            AS d(id, reason, error, http_status, body, attempts)),
    dead AS (INSERT INTO dlq.dead_letters (message_id, endpoint, event_type, payload, headers, ordering_key,
                    idempotency_key, reason_code, error_message, http_status, response_body, attempts,
                    first_failed_at, last_failed_at, message_created_at)
             SELECT v.id, v.endpoint, v.event_type, v.payload, v.headers, v.ordering_key, v.idempotency_key,
                    d.reason, d.error, NULLIF(d.http_status, 0), NULLIF(d.body, ''), d.attempts,
                    coalesce(v.first_failed_at, now()), now(), v.created_at
               FROM moved v JOIN d ON d.id = v.id)
    SELECT DISTINCT endpoint, ordering_key FROM moved WHERE ordering_key IS NOT NULL
  )sql",
                             {INT8ARRAYOID, TEXTARRAYOID, TEXTARRAYOID, INT4ARRAYOID, TEXTARRAYOID, INT4ARRAYOID},
                             Statement::Plan::kGeneric);
  left.add(statement.run({int8_array(ids), text_array(reasons), text_array(errors), int4_array(statuses),
                          text_array(bodies), int4_array(attempts)}));
}

// The INSERT of log_attempts: each attempt's time ($1), message ($2) and duration ($3),
// and its endpoint, attempt number, status, error and body ($4 to $8) from arrays, or
// (shared) one of each for every attempt.
std::string attempts_sql(bool shared) {
  const std::string source =
      shared ? "unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS a(started_ms, id, duration_us)"
             : "unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::int[], $6::int[], $7::text[], "
               "$8::text[]) AS a(started_ms, id, duration_us, endpoint, attempt, http_status, error, body)";
  const auto shared_or = [shared](const char* value, const char* column) {
    return std::string(shared ? value : column);
  };
  return R"sql(
    INSERT INTO outbox.attempts (attempted_at, endpoint, message_id, attempt, http_status, error, duration_ms,
                                 response_body)
    SELECT to_timestamp(a.started_ms / 1000.0::float8), )sql" +
         shared_or("$4", "a.endpoint") + ", a.id, " + shared_or("$5", "a.attempt") + ", NULLIF(" +
         shared_or("$6", "a.http_status") + ", 0), NULLIF(" + shared_or("$7", "a.error") + R"sql(, ''),
           CASE WHEN a.duration_us >= 0 THEN a.duration_us / 1000.0::float8 END, NULLIF()sql" +
         shared_or("$8", "a.body") + R"sql(, '')
      FROM )sql" +
         source;
}

// The attempts these results made, in one INSERT: a settle of any size adds one statement
// and one heap record per attempt (the time partitions' only index is a BRIN,
// extension/src/37_attempts.sql), in the transaction that records their outcome. The
// times are divided as float8, which the columns are: a numeric division per row cost
// more than the rest of the row's expressions together.
void log_attempts(const Settlements& s) {
  // Each attempt's fields where they lie: a drain's attempts share everything but time,
  // id and duration, and only those three become arrays then (copying every attempt's
  // strings first took 1.4 % of an HTTP drain's main thread, 0.5 % without).
  struct Logged {
    const Settlements::Attempt* attempt;
    int64_t id;
    const std::string* endpoint;
    int number;
    int32_t status;
    const std::string* error;
  };
  std::vector<Logged> logged;
  logged.reserve(s.sent.size() + s.retry.size() + s.dead.size());
  static const std::string kNoError;
  for (const auto& x : s.sent)
    if (x.attempt) logged.push_back({&*x.attempt, x.id, &x.endpoint, x.attempts, x.http_status, &kNoError});
  for (const auto& x : s.retry)
    if (x.attempt) logged.push_back({&*x.attempt, x.id, &x.endpoint, x.attempts, x.http_status, &x.error});
  for (const auto& x : s.dead)
    if (x.attempt) logged.push_back({&*x.attempt, x.id, &x.endpoint, x.attempts, x.http_status, &x.error});
  if (logged.empty()) return;
  for (Logged& l : logged)
    if (l.attempt->number != 0) l.number = l.attempt->number;
  std::vector<int64_t> started, ids, durations;
  started.reserve(logged.size());
  ids.reserve(logged.size());
  durations.reserve(logged.size());
  for (const Logged& l : logged) {
    started.push_back(l.attempt->started_ms);
    ids.push_back(l.id);
    durations.push_back(l.attempt->duration_us);
  }
  // As in settle_sent: what every attempt shares (one endpoint, attempt number, status,
  // error and body, as a drain's first attempts do) is passed once, not as arrays.
  const Logged& first = logged.front();
  bool uniform = true;
  for (size_t k = 1; k < logged.size() && uniform; ++k) {
    const Logged& l = logged[k];
    uniform = *l.endpoint == *first.endpoint && l.number == first.number && l.status == first.status &&
              *l.error == *first.error && l.attempt->body == first.attempt->body;
  }
  static const std::string each_sql = attempts_sql(false), shared_sql = attempts_sql(true);
  static Statement each(
      each_sql.c_str(),
      {INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, TEXTARRAYOID, INT4ARRAYOID, INT4ARRAYOID, TEXTARRAYOID, TEXTARRAYOID},
      Statement::Plan::kGeneric);
  static Statement shared(shared_sql.c_str(),
                          {INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, TEXTOID, INT4OID, INT4OID, TEXTOID, TEXTOID},
                          Statement::Plan::kGeneric);
  if (uniform) {
    shared.run({int8_array(started), int8_array(ids), int8_array(durations), text_datum(*first.endpoint),
                Int32GetDatum(first.number), Int32GetDatum(first.status), text_datum(*first.error),
                text_datum(first.attempt->body)});
    return;
  }
  std::vector<std::string> endpoints, errors, bodies;
  std::vector<int32_t> numbers, statuses;
  for (const Logged& l : logged) {
    endpoints.push_back(*l.endpoint);
    errors.push_back(*l.error);
    bodies.push_back(l.attempt->body);
    numbers.push_back(l.number);
    statuses.push_back(l.status);
  }
  each.run({int8_array(started), int8_array(ids), int8_array(durations), text_array(endpoints), int4_array(numbers),
            int4_array(statuses), text_array(errors), text_array(bodies)});
}

// Out of their claims' rows: outbox.message() says pending, and a worker that starts
// again does not count an attempt that was never made. One the worker claimed as its
// key's next message (ordering/successors.cpp) becomes its key's head in the table.
void settle_given_back(const std::vector<int64_t>& given_back) {
  static Statement heads(
      "UPDATE outbox.messages m SET ordering_seq = NULL WHERE m.id = ANY ($1) AND m.ordering_seq IS NOT NULL",
      {INT8ARRAYOID}, Statement::Plan::kGeneric);
  heads.run({int8_array(given_back)});
  static Statement statement(R"sql(
    UPDATE outbox.claims c SET message_ids = k.ids, attempts = k.attempts
      FROM (SELECT c2.id, array_agg(u.m ORDER BY u.i) AS ids, array_agg(u.a ORDER BY u.i) AS attempts
              FROM outbox.claims c2 CROSS JOIN LATERAL
                   unnest(c2.message_ids, c2.attempts) WITH ORDINALITY AS u(m, a, i)
             WHERE c2.message_ids && $1 AND u.m <> ALL ($1)
             GROUP BY c2.id) k
     WHERE c.id = k.id
  )sql",
                             {INT8ARRAYOID}, Statement::Plan::kGeneric);
  statement.run({int8_array(given_back)});
}

void finish_claims(const std::vector<int64_t>& claims) {
  static Statement statement("DELETE FROM outbox.claims WHERE id = ANY ($1)", {INT8ARRAYOID},
                             Statement::Plan::kGeneric);
  statement.run({int8_array(claims)});
}

}  // namespace

void Settlements::take_results(Settlements& from) {
  move_all(sent, from.sent);
  move_all(retry, from.retry);
  move_all(dead, from.dead);
}

Keep kept() { return {settings.sent_retention_s > 0, settings.attempt_retention_s > 0}; }

void settle(const Settlements& s, Keep keep, Succession succession) {
  // The worker's moving statements fire no promoting trigger: it claims the next ones.
  if (succession == Succession::kInTable && is_delivery_worker())
    throw std::logic_error("the worker settles with Succession::kClaimedByWorker");
  // Before any head leaves: the keys' locks, under which its next message is promoted.
  std::vector<int32_t> locks;
  for (const auto& sent : s.sent)
    if (sent.ordering_key) locks.push_back(core::ordering_lock(sent.endpoint, *sent.ordering_key));
  for (const auto& dead : s.dead)
    if (dead.ordering_key) locks.push_back(core::ordering_lock(dead.endpoint, *dead.ordering_key));
  if (!locks.empty()) lock_orderings(std::move(locks));
  Keys left;  // keys whose head left the queue
  if (!s.sent.empty()) settle_sent(s.sent, keep.history, left);
  if (!s.retry.empty()) settle_retry(s.retry);
  if (!s.dead.empty()) settle_dead(s.dead, left);
  // In the table (a pull reader's answer), the statements that moved the heads made each
  // key's next message its head already: their AFTER DELETE trigger (outbox._heads_gone,
  // ordering/ordering.cpp), which fires for every session but the worker. (With triggers
  // off, session_replication_role = replica, no commit orders a key either.)
  if (!left.keys.empty() && succession == Succession::kClaimedByWorker) successors::find(left.endpoints, left.keys);
  if (keep.attempts) log_attempts(s);
  if (!s.given_back.empty()) settle_given_back(s.given_back);
  if (!s.finished_claims.empty()) finish_claims(s.finished_claims);
}

void notify(const std::string& channel, const std::string& payload) {
  pg_call([&] { Async_Notify(channel.c_str(), payload.c_str()); });
}

}  // namespace pg_outbox::pg::store
