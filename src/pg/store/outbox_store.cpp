#include "pg/store/outbox_store.hpp"

#include "pg/boundary/boundary.hpp"
#include "pg/ordering/ordering.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/extension.h"
}

#include <cstdlib>

namespace pg_outbox::pg {

namespace {

const Oid kText = TEXTOID;
const Oid kTextArray = TEXTARRAYOID;
const Oid kInt4 = INT4OID;
const Oid kInt8Array = INT8ARRAYOID;
const Oid kInt4Array = INT4ARRAYOID;

std::optional<int> optional_int(const Rows& rows, size_t r, size_t c) {
  if (!rows.at(r, c)) return std::nullopt;
  return static_cast<int>(rows.int64(r, c));
}

}  // namespace

uint32_t OutboxStore::extension_oid() {
  return pg_call([] { return static_cast<uint32_t>(get_extension_oid("pg_outbox", true)); });
}

std::vector<EndpointRow> OutboxStore::load_endpoints() {
  static Statement statement(
      "SELECT e.name, e.url, e.channel, e.headers::text, s.secret, e.timeout_ms, e.max_attempts,"
      "       e.ordered, e.paused, e.breaker_state, e.breaker_failures,"
      "       (extract(epoch FROM e.breaker_open_until) * 1000)::bigint, e.breaker_cooldown_ms, e.concurrency,"
      "       e.rate_limit, e.max_pending IS NOT NULL"
      "  FROM outbox.endpoints e LEFT JOIN outbox.endpoint_secrets s ON s.endpoint = e.name",
      {});
  Rows rows = statement.run({});
  std::vector<EndpointRow> endpoints(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    EndpointRow& e = endpoints[r];
    e.name = rows.text(r, 0);
    e.url = rows.text(r, 1);
    e.channel = rows.text(r, 2);
    e.headers_json = rows.text(r, 3);
    e.secret = rows.text(r, 4);
    e.timeout_ms = optional_int(rows, r, 5);
    e.max_attempts = optional_int(rows, r, 6);
    e.ordered = rows.boolean(r, 7);
    e.paused = rows.boolean(r, 8);
    e.breaker.state = core::parse_breaker_state(rows.text(r, 9)).value_or(core::BreakerState::Closed);
    e.breaker.consecutive_failures = static_cast<int>(rows.int64(r, 10));
    e.breaker.open_until_ms = rows.int64(r, 11);
    e.breaker.cooldown_ms = rows.int64(r, 12);
    e.concurrency = optional_int(rows, r, 13);
    e.rate_limit = optional_int(rows, r, 14);
    e.has_max_pending = rows.boolean(r, 15);
  }
  return endpoints;
}

std::string OutboxStore::extension_version() {
  static Statement statement("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_outbox'", {});
  Rows rows = statement.run({});
  return rows.size() == 0 ? std::string() : rows.text(0, 0);
}

core::WebhookIdSource OutboxStore::webhook_id_source() {
  static Statement statement("SELECT id, legacy_below FROM outbox._instance()", {});
  Rows rows = statement.run({});
  core::WebhookIdSource source;
  if (rows.size() == 1) {
    source.instance = rows.text(0, 0);
    source.legacy_below = rows.int64(0, 1);
  }
  return source;
}

int64_t OutboxStore::recover_claims() {
  // Only one worker serves a database, so at its start every claim is a dead one.
  static Statement statement(
      "WITH c AS (DELETE FROM outbox.claims RETURNING message_ids, attempts),"
      " a AS (SELECT u.id, max(u.attempt) AS attempt"
      "         FROM c CROSS JOIN LATERAL unnest(c.message_ids, c.attempts) AS u(id, attempt) GROUP BY u.id),"
      " r AS (UPDATE outbox.messages m SET attempts = a.attempt FROM a"
      "        WHERE m.id = ANY (ARRAY(SELECT id FROM a)) AND m.id = a.id AND m.attempts < a.attempt RETURNING 1)"
      " SELECT count(*) FROM a",
      {});
  return statement.run({}).int64(0, 0);
}

// The claim writes nothing to the rows it takes but a row lock for its own short
// transaction (FOR UPDATE SKIP LOCKED): a row another transaction holds (an operator's
// UPDATE, a drop_endpoint) is left for a later claim instead of being sent under its
// feet. The worker is the only one to claim in its database, and it knows what it has
// in flight (`excluded`, $3).
//  - due: for each endpoint in turn (the worker rotates their order, so no endpoint
//    starves another), the LATERAL subquery walks that endpoint's part of the claim
//    index, oldest due first. Messages waiting behind their key's head are not in it
//    (ordering_seq, pg/ordering.cpp): a blocked key is never visited. The outer LIMIT
//    stops as soon as enough are found.
//  - budgeted: the byte budget ($4). Rows are taken, oldest due first, while the
//    payloads before them stay under it; a payload over max_payload_size ($5) counts
//    nothing and is never read (its size comes from the datum's header).
//  - the rows are fetched by "m.id = ANY (...)", which only the primary key answers.
static const char* const kClaimSql =
    "WITH due AS ("
    "  SELECT d.id, d.next_attempt_at, d.size FROM unnest($1::text[]) AS e(name) CROSS JOIN LATERAL ("
    "    SELECT m.id, m.next_attempt_at, outbox._payload_size(m.payload) AS size FROM outbox.messages m"
    "     WHERE m.endpoint = e.name AND m.next_attempt_at <= now() AND m.ordering_seq IS NULL"
    "       AND m.id <> ALL ($3)"
    "     ORDER BY m.next_attempt_at"
    "     LIMIT $2"
    "     FOR UPDATE SKIP LOCKED) d"
    "  LIMIT $2),"
    " budgeted AS (SELECT b.id FROM ("
    "   SELECT due.id, h.held, sum(h.held) OVER (ORDER BY due.next_attempt_at, due.id) AS total"
    "     FROM due CROSS JOIN LATERAL (SELECT CASE WHEN due.size <= $5 THEN due.size ELSE 0 END AS held) h) b"
    "   WHERE b.total - b.held < $4)"
    " SELECT m.id, m.endpoint, m.event_type, CASE WHEN s.size <= $5 THEN %s END,"
    "        m.headers::text, m.idempotency_key, m.attempts + 1, s.size,"
    "        CASE WHEN m.ordering_key IS NOT NULL THEN outbox._ordering_lock(m.endpoint, m.ordering_key) END"
    "   FROM outbox.messages m CROSS JOIN LATERAL (SELECT outbox._payload_size(m.payload) AS size) s"
    "  WHERE m.id = ANY (ARRAY(SELECT id FROM budgeted))";

std::vector<ClaimedMessage> OutboxStore::claim(const std::vector<std::string>& endpoints, int limit,
                                               const std::vector<int64_t>& excluded, int64_t budget_bytes,
                                               int64_t max_payload_size, bool notify) {
  static std::string http_sql = [] {
    char buffer[4096];
    snprintf(buffer, sizeof buffer, kClaimSql, "m.payload::text");
    return std::string(buffer);
  }();
  // NOTIFY sends the envelope of SPEC §3, built by PostgreSQL so that it is valid JSON.
  static std::string notify_sql = [] {
    char buffer[4096];
    snprintf(buffer, sizeof buffer, kClaimSql,
             "jsonb_build_object('id', m.id, 'event_type', m.event_type, 'payload', m.payload)::text");
    return std::string(buffer);
  }();
  const std::vector<Oid> types = {kTextArray, kInt4, kInt8Array, INT8OID, INT8OID};
  static Statement http_statement(http_sql.c_str(), types);
  static Statement notify_statement(notify_sql.c_str(), types);
  Statement& statement = notify ? notify_statement : http_statement;
  Rows rows = statement.run({text_array(endpoints), Int32GetDatum(limit), int8_array(excluded),
                             Int64GetDatum(budget_bytes), Int64GetDatum(max_payload_size)});
  std::vector<ClaimedMessage> claimed(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    ClaimedMessage& m = claimed[r];
    m.id = rows.int64(r, 0);
    m.endpoint = rows.text(r, 1);
    m.event_type = rows.text(r, 2);
    m.too_large = !rows.at(r, 3);
    m.payload = rows.text(r, 3);
    m.headers_json = rows.text(r, 4);
    m.idempotency_key = rows.text(r, 5);
    m.attempts = static_cast<int>(rows.int64(r, 6));
    m.payload_size = rows.int64(r, 7);
    if (rows.at(r, 8)) m.ordering_lock = static_cast<int32_t>(rows.int64(r, 8));
  }
  return claimed;
}

int64_t OutboxStore::record_claim(const std::vector<int64_t>& ids, const std::vector<int32_t>& attempts) {
  static Statement statement("INSERT INTO outbox.claims (message_ids, attempts) VALUES ($1, $2) RETURNING id",
                             {kInt8Array, kInt4Array});
  return statement.run({int8_array(ids), int4_array(attempts)}).int64(0, 0);
}

std::optional<int64_t> OutboxStore::next_due_in_ms(const std::vector<std::string>& endpoints,
                                                   const std::vector<int64_t>& excluded) {
  // One index probe per endpoint: the oldest message of each that is not in flight.
  // Measured against the transaction's now(), the clock the claim used: a message
  // that came due after the claim's now() is "due in N ms", never "due already".
  static Statement statement(
      "SELECT ceil(extract(epoch FROM min(n.next_attempt_at) - now()) * 1000)::bigint"
      "  FROM unnest($1::text[]) AS e(name) CROSS JOIN LATERAL ("
      "    SELECT m.next_attempt_at FROM outbox.messages m"
      "     WHERE m.endpoint = e.name AND m.ordering_seq IS NULL AND m.id <> ALL ($2)"
      "     ORDER BY m.next_attempt_at LIMIT 1) n",
      {kTextArray, kInt8Array});
  Rows rows = statement.run({text_array(endpoints), int8_array(excluded)});
  if (rows.size() == 0 || !rows.at(0, 0)) return std::nullopt;
  return rows.int64(0, 0);
}

// Part of each statement that moves messages out of the queue (CTE "moved", their ids
// $1): for each key whose head leaves, the next message becomes the head, unless the key
// still has one (pg/ordering.cpp does it row by row for everyone else). The statement's
// snapshot still shows the moved rows; they are left out by id. The keys' locks are
// held (settle takes them first), so no producer decides for these keys meanwhile.
#define PROMOTE_NEXT_IN_ORDER                                                           \
  " promoted AS (UPDATE outbox.messages p SET ordering_seq = NULL"                      \
  "   FROM (SELECT (SELECT f.id FROM outbox.messages f"                                 \
  "                  WHERE f.endpoint = k.endpoint AND f.ordering_key = k.ordering_key" \
  "                    AND f.id <> ALL ($1)"                                            \
  "                  ORDER BY f.ordering_seq NULLS FIRST LIMIT 1) AS id"                \
  "           FROM (SELECT DISTINCT endpoint, ordering_key FROM moved"                  \
  "                  WHERE ordering_key IS NOT NULL AND ordering_seq IS NULL) k) n"     \
  "  WHERE p.id = n.id AND p.ordering_seq IS NOT NULL)"

void OutboxStore::settle(const Settlements& s, bool keep_history) {
  // Before any head leaves: the keys' locks, under which its next message is promoted.
  std::vector<int32_t> locks;
  for (const auto& sent : s.sent)
    if (sent.ordering_lock) locks.push_back(*sent.ordering_lock);
  for (const auto& dead : s.dead)
    if (dead.ordering_lock) locks.push_back(*dead.ordering_lock);
  if (!locks.empty()) lock_orderings(std::move(locks));
  if (!s.sent.empty()) {
    std::vector<int64_t> ids;
    std::vector<int32_t> statuses, attempts;
    for (const auto& sent : s.sent) {
      ids.push_back(sent.id);
      statuses.push_back(sent.http_status);
      attempts.push_back(sent.attempts);
    }
    if (keep_history) {
      // One statement: the rows leave the queue for the history, and the counts of
      // their partitions (one row per partition and endpoint) grow by as many.
      static Statement statement(
          "WITH s AS (SELECT * FROM unnest($1::bigint[], $2::int[], $3::int[]) AS s(id, http_status, attempts)),"
          " moved AS (DELETE FROM outbox.messages m USING s WHERE m.id = ANY ($1) AND m.id = s.id"
          "           RETURNING m.*, s.http_status AS sent_status, s.attempts AS sent_attempts),"
          " kept AS (INSERT INTO outbox.history (id, endpoint, event_type, payload, headers, ordering_key,"
          "                 idempotency_key, attempts, last_http_status, created_at, sent_at)"
          "          SELECT id, endpoint, event_type, payload, headers, ordering_key, idempotency_key,"
          "                 sent_attempts, NULLIF(sent_status, 0), created_at, now() FROM moved"
          "          RETURNING tableoid, endpoint)," PROMOTE_NEXT_IN_ORDER
          " INSERT INTO outbox.history_counts AS hc (partition, endpoint, sent)"
          " SELECT k.tableoid::regclass, k.endpoint, count(*) FROM kept k"
          "  WHERE k.tableoid <> 'outbox.history_default'::regclass GROUP BY 1, 2"
          " ON CONFLICT (partition, endpoint) DO UPDATE SET sent = hc.sent + excluded.sent",
          {kInt8Array, kInt4Array, kInt4Array});
      statement.run({int8_array(ids), int4_array(statuses), int4_array(attempts)});
    } else {
      static Statement statement(
          "WITH moved AS (DELETE FROM outbox.messages m WHERE m.id = ANY ($1)"
          "               RETURNING m.endpoint, m.ordering_key, m.ordering_seq)," PROMOTE_NEXT_IN_ORDER
          " SELECT count(*) FROM moved",
          {kInt8Array});
      statement.run({int8_array(ids)});
    }
  }
  if (!s.retry.empty()) {
    std::vector<int64_t> ids, delays;
    std::vector<std::string> errors;
    std::vector<int32_t> statuses, attempts;
    for (const auto& retry : s.retry) {
      ids.push_back(retry.id);
      delays.push_back(retry.delay_ms);
      errors.push_back(retry.error);
      statuses.push_back(retry.http_status);
      attempts.push_back(retry.attempts);
    }
    static Statement statement(
        "UPDATE outbox.messages m SET attempts = r.attempts,"
        "       next_attempt_at = now() + r.delay_ms * interval '1 millisecond',"
        "       last_error = r.error, last_http_status = NULLIF(r.http_status, 0),"
        "       first_failed_at = coalesce(m.first_failed_at, now())"
        "  FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::int[], $5::int[])"
        "       AS r(id, delay_ms, error, http_status, attempts)"
        " WHERE m.id = ANY ($1) AND m.id = r.id",
        {kInt8Array, kInt8Array, kTextArray, kInt4Array, kInt4Array});
    statement.run(
        {int8_array(ids), int8_array(delays), text_array(errors), int4_array(statuses), int4_array(attempts)});
  }
  if (!s.dead.empty()) {
    std::vector<int64_t> ids;
    std::vector<std::string> reasons, errors, bodies;
    std::vector<int32_t> statuses, attempts;
    for (const auto& dead : s.dead) {
      ids.push_back(dead.id);
      reasons.push_back(core::reason_code(dead.reason));
      errors.push_back(dead.error);
      statuses.push_back(dead.http_status);
      bodies.push_back(dead.body);
      attempts.push_back(dead.attempts);
    }
    // One statement moves the rows: deleted from the outbox and inserted into the
    // DLQ together, with every field an operator needs to fix and requeue them.
    static Statement statement(
        "WITH d AS (SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::int[], $5::text[], $6::int[])"
        "             AS d(id, reason, error, http_status, body, attempts)),"
        " moved AS (DELETE FROM outbox.messages m USING d"
        "           WHERE m.id = ANY ($1) AND m.id = d.id"
        "           RETURNING m.*, d.reason, d.error, d.http_status AS dead_status, d.body,"
        "                     d.attempts AS dead_attempts)," PROMOTE_NEXT_IN_ORDER
        " INSERT INTO dlq.dead_letters (message_id, endpoint, event_type, payload, headers, ordering_key,"
        "        idempotency_key, reason_code, error_message, http_status, response_body, attempts,"
        "        first_failed_at, last_failed_at, message_created_at)"
        " SELECT id, endpoint, event_type, payload, headers, ordering_key, idempotency_key, reason,"
        "        error, NULLIF(dead_status, 0), NULLIF(body, ''), dead_attempts,"
        "        coalesce(first_failed_at, now()), now(), created_at"
        "   FROM moved",
        {kInt8Array, kTextArray, kTextArray, kInt4Array, kTextArray, kInt4Array});
    statement.run({int8_array(ids), text_array(reasons), text_array(errors), int4_array(statuses), text_array(bodies),
                   int4_array(attempts)});
  }
  if (!s.given_back.empty()) {
    // Out of their claims' rows: outbox.message() says pending, and a worker that starts
    // again does not count an attempt that was never made.
    static Statement statement(
        "UPDATE outbox.claims c SET message_ids = k.ids, attempts = k.attempts"
        "  FROM (SELECT c2.id, array_agg(u.m ORDER BY u.i) AS ids, array_agg(u.a ORDER BY u.i) AS attempts"
        "          FROM outbox.claims c2 CROSS JOIN LATERAL"
        "               unnest(c2.message_ids, c2.attempts) WITH ORDINALITY AS u(m, a, i)"
        "         WHERE c2.message_ids && $1 AND u.m <> ALL ($1)"
        "         GROUP BY c2.id) k"
        " WHERE c.id = k.id",
        {kInt8Array});
    statement.run({int8_array(s.given_back)});
  }
  if (!s.finished_claims.empty()) {
    static Statement statement("DELETE FROM outbox.claims WHERE id = ANY($1)", {kInt8Array});
    statement.run({int8_array(s.finished_claims)});
  }
}

bool OutboxStore::save_breaker(const std::string& endpoint, const core::Breaker& b) {
  static Statement statement(
      "WITH free AS (SELECT e.name FROM outbox.endpoints e WHERE e.name = $1 FOR NO KEY UPDATE SKIP LOCKED)"
      " UPDATE outbox.endpoints e SET breaker_state = $2, breaker_failures = $3,"
      "       breaker_open_until = CASE WHEN $4 > 0 THEN to_timestamp($4 / 1000.0) END,"
      "       breaker_cooldown_ms = $5"
      "  FROM free WHERE e.name = free.name"
      " RETURNING 1",
      {kText, kText, kInt4, INT8OID, INT8OID});
  return statement
             .run({text_datum(endpoint), text_datum(core::breaker_state_name(b.state)),
                   Int32GetDatum(b.consecutive_failures), Int64GetDatum(b.open_until_ms), Int64GetDatum(b.cooldown_ms)})
             .size() == 1;
}

void OutboxStore::notify(const std::string& channel, const std::string& payload) {
  pg_call([&] { Async_Notify(channel.c_str(), payload.c_str()); });
}

int64_t OutboxStore::prepare_history(int width_s) {
  static Statement statement("SELECT (extract(epoch FROM outbox._history_prepare($1)) * 1000)::bigint", {kInt4});
  return statement.run({Int32GetDatum(width_s)}).int64(0, 0);
}

int64_t OutboxStore::retire_history(int retention_s, int width_s) {
  static Statement statement(
      "SELECT outbox._history_retire(now() - make_interval(secs => $1), false, make_interval(secs => $2))",
      {kInt4, kInt4});
  return statement.run({Int32GetDatum(retention_s), Int32GetDatum(width_s)}).int64(0, 0);
}

// The bounded delete below picks its ids in an ARRAY() subquery: it runs once, as an
// InitPlan, and the delete is then primary-key lookups. The ORDER BY keeps the kept
// generic plan on the time index: without it, the planner may pick a sequential scan
// "until LIMIT rows match", which reads the whole table every second when none do.
int64_t OutboxStore::purge_dead_letters(int retention_s, int limit) {
  static Statement statement(
      "WITH p AS (DELETE FROM dlq.dead_letters WHERE id = ANY (ARRAY("
      "   SELECT id FROM dlq.dead_letters"
      "    WHERE (requeued_at IS NOT NULL OR discarded_at IS NOT NULL)"
      "      AND COALESCE(requeued_at, discarded_at) < now() - make_interval(secs => $1)"
      "    ORDER BY COALESCE(requeued_at, discarded_at) LIMIT $2 FOR UPDATE SKIP LOCKED))"
      "   RETURNING 1)"
      " SELECT count(*) FROM p",
      {kInt4, kInt4});
  return statement.run({Int32GetDatum(retention_s), Int32GetDatum(limit)}).int64(0, 0);
}

std::vector<int64_t> OutboxStore::count_queued(const std::vector<std::string>& endpoints) {
  // Each endpoint's heads (claim index) and the messages waiting behind them (ordering
  // index), in the statement's own snapshot (see queued_count.cpp).
  static Statement statement(
      "SELECT (SELECT count(*) FROM outbox.messages m WHERE m.endpoint = e.name AND m.ordering_seq IS NULL)"
      "     + (SELECT count(*) FROM outbox.messages m"
      "         WHERE m.endpoint = e.name AND m.ordering_key IS NOT NULL AND m.ordering_seq IS NOT NULL)"
      "  FROM unnest($1::text[]) WITH ORDINALITY AS e(name, i) ORDER BY e.i",
      {kTextArray});
  Rows rows = statement.run({text_array(endpoints)});
  std::vector<int64_t> counts(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) counts[r] = rows.int64(r, 0);
  return counts;
}

std::vector<OutboxStore::Orphan> OutboxStore::find_orphans(const std::vector<int64_t>& excluded, int limit) {
  // The queue's distinct endpoints, one index probe each (a loose index scan), then
  // the rows of those that are not in outbox.endpoints.
  static Statement statement(
      "WITH RECURSIVE names AS ("
      "  (SELECT m.endpoint FROM outbox.messages m WHERE m.ordering_seq IS NULL ORDER BY m.endpoint LIMIT 1)"
      "  UNION ALL"
      "  SELECT (SELECT m.endpoint FROM outbox.messages m WHERE m.endpoint > n.endpoint AND m.ordering_seq IS NULL"
      "           ORDER BY m.endpoint LIMIT 1)"
      "    FROM names n WHERE n.endpoint IS NOT NULL)"
      " SELECT o.id, o.attempts, n.endpoint FROM names n CROSS JOIN LATERAL ("
      "   SELECT m.id, m.attempts FROM outbox.messages m"
      "    WHERE m.endpoint = n.endpoint AND m.ordering_seq IS NULL AND m.id <> ALL ($1)"
      "    ORDER BY m.endpoint, m.next_attempt_at LIMIT $2) o"
      "  WHERE n.endpoint IS NOT NULL"
      "    AND NOT EXISTS (SELECT 1 FROM outbox.endpoints e WHERE e.name = n.endpoint)"
      "  LIMIT $2",
      {kInt8Array, kInt4});
  Rows rows = statement.run({int8_array(excluded), Int32GetDatum(limit)});
  std::vector<Orphan> orphans(rows.size());
  for (size_t r = 0; r < rows.size(); ++r)
    orphans[r] = {rows.int64(r, 0), static_cast<int>(rows.int64(r, 1)), rows.text(r, 2)};
  return orphans;
}

}  // namespace pg_outbox::pg
