#include "pg/store/claims.hpp"

#include "pg/boundary/spi.hpp"

extern "C" {
#include "catalog/pg_type.h"
}

#include <algorithm>
#include <string>

namespace pg_outbox::pg::store {

// The claim writes nothing to the rows it takes, not even a row lock: a row another
// transaction holds (an operator's UPDATE or SELECT ... FOR UPDATE, a drop_endpoint) is
// left for a later claim instead of being sent under its feet, as FOR UPDATE SKIP LOCKED
// would, by outbox._claimable (row_locks.cpp), asked only about rows someone touched
// since their INSERT (xmax set). The worker is the only one to claim in its database,
// and it knows what it has in flight (`excluded`, $3).
//  - due: for each endpoint in turn (the worker rotates their order, so no endpoint
//    starves another), the LATERAL subquery walks that endpoint's part of the claim
//    index, oldest due first. Messages waiting behind their key's head are not in it
//    (ordering_seq, ordering/ordering.cpp): a blocked key is never visited. The keys'
//    next messages the worker holds ($7, each of endpoint $8: ordering/successors.cpp;
//    still waiting in the table, so not heads there) are read where their row version
//    was seen (a TID scan: one page a message, where the primary key's index took six,
//    a third of an ordered drain's claim), each endpoint its own, and compete with those,
//    oldest due first. A row found there that is not the message held (its place was
//    reused) is left out by the caller (worker/claim.cpp). The outer LIMIT stops
//    as soon as enough are found. The messages in flight are skipped by a
//    hashed subplan (NOT IN (SELECT unnest ...)), built once per claim: "<> ALL ($3)"
//    compared every row it walked past with every id in flight, a cost that grew with
//    the square of what is in flight (138 ms a claim with 5,000 in flight, against
//    2.7 ms: EXPLAIN ANALYZE of the generic plan, 8073606).
//  - budgeted: the byte budget ($4). Rows are taken, oldest due first, while the
//    payloads before them stay under it; a payload over max_payload_size ($5) counts
//    nothing and is never read (its size comes from the datum's header).
//  - budgeted sums int4 sizes (none is over max_payload_size, an int), so the running
//    total is a bigint: sum(int8) is numeric, 0.3 ms of a claim of 500.
//  - the rows are fetched again by their ctid (a TID scan, the version the statement's
//    snapshot saw), not by id through the primary key (two more page reads a row). They
//    come in the heap's order and are put in id order here: an ORDER BY let the planner
//    walk the whole primary key instead, whenever the statistics said the queue was
//    empty (just after a VACUUM), 80 ms a claim.
//  - the payload as jsonb prints it (a NOTIFY endpoint's envelope is built around it:
//    core/notify_envelope.hpp).
//  - $6: the enqueue time as unix microseconds, for CloudEvents endpoints only.
namespace {

// The claim's statement (see above), with the keys' next messages the worker holds ($7)
// or without them: an unordered drain pays nothing for them.
std::string claim_sql(bool next_in_line) {
  const std::string heads = R"sql(
          SELECT m.id, m.ctid, m.next_attempt_at, outbox._payload_size(m.payload) AS size FROM outbox.messages m
           WHERE m.endpoint = e.name AND m.next_attempt_at <= now() AND m.ordering_seq IS NULL
             AND m.id NOT IN (SELECT unnest($3::bigint[]))
             AND (m.xmax = '0'::xid OR outbox._claimable(m.tableoid, m.ctid))
           ORDER BY m.next_attempt_at
           LIMIT $2)sql";
  // Held messages compete with the heads oldest due first, as heads in the table did.
  const std::string due = next_in_line ? R"sql(
        SELECT u.* FROM (
          SELECT n.* FROM (
            SELECT m.id, m.ctid, m.next_attempt_at, outbox._payload_size(m.payload) AS size FROM outbox.messages m
             WHERE m.ctid = ANY (ARRAY(SELECT v.tid FROM unnest($7::tid[], $8::text[]) AS v(tid, endpoint)
                                        WHERE v.endpoint = e.name))
               AND m.endpoint = e.name AND m.next_attempt_at <= now()
               AND m.ordering_seq IS NOT NULL AND m.id NOT IN (SELECT unnest($3::bigint[]))
               AND (m.xmax = '0'::xid OR outbox._claimable(m.tableoid, m.ctid))) n
          UNION ALL
          SELECT h.* FROM ()sql" + heads + R"sql() h) u
        ORDER BY u.next_attempt_at LIMIT $2)sql"
                                       : heads;
  return R"sql(
    WITH due AS (
      SELECT d.id, d.ctid, d.next_attempt_at, d.size FROM unnest($1::text[]) AS e(name) CROSS JOIN LATERAL ()sql" +
         due + R"sql() d
      LIMIT $2),
    budgeted AS (SELECT b.ctid FROM (
       SELECT due.ctid, h.held, sum(h.held) OVER (ORDER BY due.next_attempt_at, due.id) AS total
         FROM due CROSS JOIN LATERAL (SELECT CASE WHEN due.size <= $5 THEN due.size::int4 ELSE 0 END AS held) h) b
       WHERE b.total - b.held < $4)
    SELECT m.id, m.endpoint, m.event_type,
           CASE WHEN s.size <= $5 THEN m.payload::text END,
           m.headers::text, m.idempotency_key, m.attempts + 1, s.size,
           m.ordering_key, CASE WHEN $6 THEN (extract(epoch FROM m.created_at) * 1000000)::bigint END,
           m.ordering_seq, m.ctid
      FROM outbox.messages m CROSS JOIN LATERAL (SELECT outbox._payload_size(m.payload) AS size) s
     WHERE m.ctid = ANY (ARRAY(SELECT ctid FROM budgeted))
  )sql";
}

}  // namespace

std::vector<ClaimedMessage> claim(const std::vector<std::string>& endpoints, int limit,
                                  const std::vector<int64_t>& excluded, int64_t budget_bytes, int64_t max_payload_size,
                                  ClaimFor purpose, const successors::Ready& next_in_line) {
  static const std::vector<Oid> types = {TEXTARRAYOID, INT4OID, INT8ARRAYOID, INT8OID,
                                         INT8OID,      BOOLOID, TIDARRAYOID,  TEXTARRAYOID};
  static const std::string with_next_sql = claim_sql(true), heads_only_sql = claim_sql(false);
  // Generic plans: with the held messages' arrays the plan cache kept planning each claim
  // for its values (2.1-2.4 µs a message of an ordered drain, pg_stat_statements with
  // track_planning), to the same plan: each endpoint's index probe, the held messages by
  // ctid, the rows again by ctid.
  static Statement with_next(with_next_sql.c_str(), types, Statement::Plan::kGeneric),
      heads_only(heads_only_sql.c_str(), types, Statement::Plan::kGeneric);
  Statement& statement = next_in_line.ids.empty() ? heads_only : with_next;
  Rows rows =
      statement.run({text_array(endpoints), Int32GetDatum(limit), int8_array(excluded), Int64GetDatum(budget_bytes),
                     Int64GetDatum(max_payload_size), BoolGetDatum(purpose == ClaimFor::kPayloadWithTime),
                     tid_array(next_in_line.tids), text_array(next_in_line.endpoints)});
  std::vector<ClaimedMessage> claimed(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    ClaimedMessage& m = claimed[r];
    m.id = rows.int64(r, 0);
    m.endpoint = rows.text(r, 1);
    m.event_type = rows.text(r, 2);
    m.has_event_type = !rows.is_null(r, 2);
    m.too_large = rows.is_null(r, 3);
    m.payload = rows.take_text(r, 3);
    m.headers_json = rows.text(r, 4);
    m.idempotency_key = rows.text(r, 5);
    m.attempts = static_cast<int>(rows.int64(r, 6));
    m.payload_size = rows.int64(r, 7);
    if (!rows.is_null(r, 8)) m.ordering_key = rows.text(r, 8);
    m.created_unix_us = rows.int64(r, 9);
    m.ordering_seq = rows.optional_int64(r, 10);
    m.tid = rows.int64(r, 11);
  }
  std::sort(claimed.begin(), claimed.end(),
            [](const ClaimedMessage& a, const ClaimedMessage& b) { return a.id < b.id; });
  return claimed;
}

int64_t record_claim(const std::vector<int64_t>& ids, const std::vector<int32_t>& attempts) {
  static Statement statement("INSERT INTO outbox.claims (message_ids, attempts) VALUES ($1, $2) RETURNING id",
                             {INT8ARRAYOID, INT4ARRAYOID});
  return statement.run({int8_array(ids), int4_array(attempts)}).int64(0, 0);
}

std::optional<int64_t> next_due_in_ms(const std::vector<std::string>& endpoints, const std::vector<int64_t>& excluded) {
  // One index probe per endpoint: the oldest message of each that is not in flight.
  // Measured against the transaction's now(), the clock the claim used: a message
  // that came due after the claim's now() is "due in N ms", never "due already".
  static Statement statement(R"sql(
    SELECT ceil(extract(epoch FROM min(n.next_attempt_at) - now()) * 1000)::bigint
      FROM unnest($1::text[]) AS e(name) CROSS JOIN LATERAL (
        SELECT m.next_attempt_at FROM outbox.messages m
         WHERE m.endpoint = e.name AND m.ordering_seq IS NULL AND m.id NOT IN (SELECT unnest($2::bigint[]))
         ORDER BY m.next_attempt_at LIMIT 1) n
  )sql",
                             {TEXTARRAYOID, INT8ARRAYOID}, Statement::Plan::kGeneric);
  Rows rows = statement.run({text_array(endpoints), int8_array(excluded)});
  if (rows.size() == 0) return std::nullopt;
  return rows.optional_int64(0, 0);
}

int64_t recover_claims(bool log_attempts) {
  // Only one worker serves a database, so at its start every claim is a dead one. The
  // attempts it records on the queue's rows are those not settled (a settled retry
  // already counts its attempt), and only those are logged: the settled ones were logged
  // by their settle.
  static Statement statement(R"sql(
    WITH c AS (DELETE FROM outbox.claims RETURNING message_ids, attempts, claimed_at),
    a AS (SELECT u.id, max(u.attempt) AS attempt, max(c.claimed_at) AS claimed_at
            FROM c CROSS JOIN LATERAL unnest(c.message_ids, c.attempts) AS u(id, attempt) GROUP BY u.id),
    r AS (UPDATE outbox.messages m SET attempts = a.attempt FROM a
           WHERE m.id = a.id AND m.attempts < a.attempt
           RETURNING m.id, m.endpoint, a.attempt, a.claimed_at),
    logged AS (INSERT INTO outbox.attempts (attempted_at, endpoint, message_id, attempt, error)
               SELECT r.claimed_at, r.endpoint, r.id, r.attempt, 'worker restarted: the outcome is unknown'
                 FROM r WHERE $1)
    SELECT count(*) FROM a
  )sql",
                             {BOOLOID});
  return statement.run({BoolGetDatum(log_attempts)}).int64(0, 0);
}

}  // namespace pg_outbox::pg::store
