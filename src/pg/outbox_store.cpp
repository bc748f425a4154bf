#include "pg/outbox_store.hpp"

#include "pg/boundary.hpp"

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
      "       (extract(epoch FROM e.breaker_open_until) * 1000)::bigint, e.breaker_cooldown_ms"
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
  }
  return endpoints;
}

int64_t OutboxStore::recover_in_flight() {
  // Only one worker serves a database, so at its start every claim is a dead one.
  static Statement statement(
      "WITH r AS (UPDATE outbox.messages SET status = 'pending', lease_until = NULL"
      "            WHERE status = 'in_flight' RETURNING 1) SELECT count(*) FROM r",
      {});
  return statement.run({}).int64(0, 0);
}

int64_t OutboxStore::expire_leases() {
  static Statement statement(
      "WITH r AS (UPDATE outbox.messages SET status = 'pending', lease_until = NULL"
      "            WHERE status = 'in_flight' AND lease_until < now() RETURNING 1) SELECT count(*) FROM r",
      {});
  return statement.run({}).int64(0, 0);
}

// The claim. For each endpoint in turn (the worker rotates their order, so no
// endpoint starves another), the LATERAL subquery walks that endpoint's part of the
// partial index of pending messages, oldest due first, skipping rows another
// transaction holds; for ordered endpoints it keeps a message only when no earlier
// undelivered message has its key (the key's head). The outer LIMIT stops as soon as
// enough are found. The attempt is counted here, at claim time, so a crash
// mid-delivery still counts. Every statement that writes rows by id names them with
// "m.id = ANY (...)", so that the kept generic plan reaches them through the primary
// key: joined to a CTE or unnest() of unknown size, the planner may otherwise choose a
// hash join over the whole table, hundreds of milliseconds per batch. Their status
// checks are written "(status = 'in_flight') IS TRUE" so that they filter the rows
// found, and never make the planner walk a status index (PostgreSQL 15 has no skip
// scan: the (endpoint, status) index would be read whole for every batch).
static const char* const kClaimSql =
    "WITH due AS ("
    "  SELECT d.id FROM unnest($1::text[]) AS e(name) CROSS JOIN LATERAL ("
    "    SELECT m.id FROM outbox.messages m"
    "     WHERE m.endpoint = e.name AND m.status = 'pending' AND m.next_attempt_at <= now()"
    "       AND (m.ordering_key IS NULL OR NOT (e.name = ANY($2)) OR NOT EXISTS ("
    "            SELECT 1 FROM outbox.messages h"
    "             WHERE h.endpoint = m.endpoint AND h.ordering_key = m.ordering_key"
    "               AND h.status <> 'sent' AND h.id < m.id))"
    "     ORDER BY m.next_attempt_at, m.id"
    "     LIMIT $3"
    "     FOR UPDATE SKIP LOCKED) d"
    "  LIMIT $3)"
    " UPDATE outbox.messages m"
    "    SET status = 'in_flight', attempts = m.attempts + 1,"
    "        lease_until = now() + make_interval(secs => $4)"
    "  WHERE m.id = ANY (ARRAY(SELECT id FROM due))"
    " RETURNING m.id, m.endpoint, m.event_type, %s, m.headers::text, m.idempotency_key, m.attempts";

std::vector<ClaimedMessage> OutboxStore::claim(const std::vector<std::string>& endpoints,
                                               const std::vector<std::string>& ordered, int limit, int lease_s,
                                               bool notify) {
  static std::string http_sql = [] {
    char buffer[2048];
    snprintf(buffer, sizeof buffer, kClaimSql, "m.payload::text");
    return std::string(buffer);
  }();
  // NOTIFY sends the envelope of SPEC §3, built by PostgreSQL so that it is valid JSON.
  static std::string notify_sql = [] {
    char buffer[2048];
    snprintf(buffer, sizeof buffer, kClaimSql,
             "jsonb_build_object('id', m.id, 'event_type', m.event_type, 'payload', m.payload)::text");
    return std::string(buffer);
  }();
  static Statement http_statement(http_sql.c_str(), {kTextArray, kTextArray, kInt4, kInt4});
  static Statement notify_statement(notify_sql.c_str(), {kTextArray, kTextArray, kInt4, kInt4});
  Statement& statement = notify ? notify_statement : http_statement;
  Rows rows = statement.run({text_array(endpoints), text_array(ordered), Int32GetDatum(limit), Int32GetDatum(lease_s)});
  std::vector<ClaimedMessage> claimed(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    ClaimedMessage& m = claimed[r];
    m.id = rows.int64(r, 0);
    m.endpoint = rows.text(r, 1);
    m.event_type = rows.text(r, 2);
    m.payload = rows.text(r, 3);
    m.headers_json = rows.text(r, 4);
    m.idempotency_key = rows.text(r, 5);
    m.attempts = static_cast<int>(rows.int64(r, 6));
  }
  return claimed;
}

std::optional<int64_t> OutboxStore::next_due_ms(const std::vector<std::string>& endpoints) {
  // One index probe per endpoint: the oldest pending message of each.
  static Statement statement(
      "SELECT (extract(epoch FROM min(n.next_attempt_at)) * 1000)::bigint"
      "  FROM unnest($1::text[]) AS e(name) CROSS JOIN LATERAL ("
      "    SELECT m.next_attempt_at FROM outbox.messages m"
      "     WHERE m.endpoint = e.name AND m.status = 'pending'"
      "     ORDER BY m.next_attempt_at LIMIT 1) n",
      {kTextArray});
  Rows rows = statement.run({text_array(endpoints)});
  if (rows.size() == 0 || !rows.at(0, 0)) return std::nullopt;
  return rows.int64(0, 0);
}

void OutboxStore::settle(const Settlements& s, bool delete_sent) {
  if (!s.sent.empty()) {
    std::vector<int64_t> ids;
    std::vector<int32_t> statuses;
    for (const auto& sent : s.sent) {
      ids.push_back(sent.id);
      statuses.push_back(sent.http_status);
    }
    if (delete_sent) {
      static Statement statement(
          "DELETE FROM outbox.messages WHERE id = ANY($1) AND (status = 'in_flight') IS TRUE", {kInt8Array});
      statement.run({int8_array(ids)});
    } else {
      static Statement statement(
          "UPDATE outbox.messages m SET status = 'sent', sent_at = now(), lease_until = NULL,"
          "       last_http_status = NULLIF(s.http_status, 0)"
          "  FROM unnest($1::bigint[], $2::int[]) AS s(id, http_status)"
          " WHERE m.id = ANY ($1) AND m.id = s.id AND (m.status = 'in_flight') IS TRUE",
          {kInt8Array, kInt4Array});
      statement.run({int8_array(ids), int4_array(statuses)});
    }
  }
  if (!s.retry.empty()) {
    std::vector<int64_t> ids, delays;
    std::vector<std::string> errors;
    std::vector<int32_t> statuses;
    for (const auto& retry : s.retry) {
      ids.push_back(retry.id);
      delays.push_back(retry.delay_ms);
      errors.push_back(retry.error);
      statuses.push_back(retry.http_status);
    }
    static Statement statement(
        "UPDATE outbox.messages m SET status = 'pending', lease_until = NULL,"
        "       next_attempt_at = now() + r.delay_ms * interval '1 millisecond',"
        "       last_error = r.error, last_http_status = NULLIF(r.http_status, 0),"
        "       first_failed_at = coalesce(m.first_failed_at, now())"
        "  FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::int[]) AS r(id, delay_ms, error, http_status)"
        " WHERE m.id = ANY ($1) AND m.id = r.id AND (m.status = 'in_flight') IS TRUE",
        {kInt8Array, kInt8Array, kTextArray, kInt4Array});
    statement.run({int8_array(ids), int8_array(delays), text_array(errors), int4_array(statuses)});
  }
  if (!s.dead.empty()) {
    std::vector<int64_t> ids;
    std::vector<std::string> reasons, errors, bodies;
    std::vector<int32_t> statuses;
    for (const auto& dead : s.dead) {
      ids.push_back(dead.id);
      reasons.push_back(core::reason_code(dead.reason));
      errors.push_back(dead.error);
      statuses.push_back(dead.http_status);
      bodies.push_back(dead.body);
    }
    // One statement moves the rows: deleted from the outbox and inserted into the
    // DLQ together, with every field an operator needs to fix and requeue them.
    static Statement statement(
        "WITH d AS (SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::int[], $5::text[])"
        "             AS d(id, reason, error, http_status, body)),"
        " moved AS (DELETE FROM outbox.messages m USING d"
        "           WHERE m.id = ANY ($1) AND m.id = d.id AND (m.status = 'in_flight') IS TRUE"
        "           RETURNING m.*, d.reason, d.error, d.http_status AS dead_status, d.body)"
        " INSERT INTO dlq.dead_letters (message_id, endpoint, event_type, payload, headers, ordering_key,"
        "        idempotency_key, reason_code, error_message, http_status, response_body, attempts,"
        "        first_failed_at, last_failed_at, message_created_at)"
        " SELECT id, endpoint, event_type, payload, headers, ordering_key, idempotency_key, reason,"
        "        error, NULLIF(dead_status, 0), NULLIF(body, ''), attempts,"
        "        coalesce(first_failed_at, now()), now(), created_at"
        "   FROM moved",
        {kInt8Array, kTextArray, kTextArray, kInt4Array, kTextArray});
    statement.run({int8_array(ids), text_array(reasons), text_array(errors), int4_array(statuses),
                   text_array(bodies)});
  }
  if (!s.released.empty()) {
    static Statement statement(
        "UPDATE outbox.messages SET status = 'pending', lease_until = NULL, attempts = attempts - 1"
        " WHERE id = ANY($1) AND (status = 'in_flight') IS TRUE",
        {kInt8Array});
    statement.run({int8_array(s.released)});
  }
}

void OutboxStore::save_breaker(const std::string& endpoint, const core::Breaker& b) {
  static Statement statement(
      "UPDATE outbox.endpoints SET breaker_state = $2, breaker_failures = $3,"
      "       breaker_open_until = CASE WHEN $4 > 0 THEN to_timestamp($4 / 1000.0) END,"
      "       breaker_cooldown_ms = $5"
      " WHERE name = $1",
      {kText, kText, kInt4, INT8OID, INT8OID});
  statement.run({text_datum(endpoint), text_datum(core::breaker_state_name(b.state)),
                 Int32GetDatum(b.consecutive_failures), Int64GetDatum(b.open_until_ms),
                 Int64GetDatum(b.cooldown_ms)});
}

void OutboxStore::notify(const std::string& channel, const std::string& payload) {
  pg_call([&] { Async_Notify(channel.c_str(), payload.c_str()); });
}

// The bounded deletes below pick their ids in an ARRAY() subquery: it runs once, as an
// InitPlan, and the delete is then primary-key lookups. The ORDER BY keeps the kept
// generic plan on the time index: without it, the planner may pick a sequential scan
// "until LIMIT rows match", which reads the whole table every second when none do.
int64_t OutboxStore::purge_sent(int retention_s, int limit) {
  static Statement statement(
      "WITH p AS (DELETE FROM outbox.messages WHERE id = ANY (ARRAY("
      "   SELECT id FROM outbox.messages WHERE status = 'sent'"
      "      AND sent_at < now() - make_interval(secs => $1) ORDER BY sent_at LIMIT $2)) RETURNING 1)"
      " SELECT count(*) FROM p",
      {kInt4, kInt4});
  return statement.run({Int32GetDatum(retention_s), Int32GetDatum(limit)}).int64(0, 0);
}

int64_t OutboxStore::purge_dead_letters(int retention_s, int limit) {
  static Statement statement(
      "WITH p AS (DELETE FROM dlq.dead_letters WHERE id = ANY (ARRAY("
      "   SELECT id FROM dlq.dead_letters"
      "    WHERE (requeued_at IS NOT NULL OR discarded_at IS NOT NULL)"
      "      AND COALESCE(requeued_at, discarded_at) < now() - make_interval(secs => $1)"
      "    ORDER BY COALESCE(requeued_at, discarded_at) LIMIT $2))"
      "   RETURNING 1)"
      " SELECT count(*) FROM p",
      {kInt4, kInt4});
  return statement.run({Int32GetDatum(retention_s), Int32GetDatum(limit)}).int64(0, 0);
}

std::vector<int64_t> OutboxStore::claim_orphans(int limit) {
  static Statement statement(
      "UPDATE outbox.messages m SET status = 'in_flight', attempts = m.attempts + 1, lease_until = now()"
      " WHERE m.id = ANY (ARRAY(SELECT o.id FROM outbox.messages o"
      "                 WHERE o.status = 'pending'"
      "                   AND NOT EXISTS (SELECT 1 FROM outbox.endpoints e WHERE e.name = o.endpoint)"
      "                 LIMIT $1 FOR UPDATE SKIP LOCKED))"
      " RETURNING m.id",
      {kInt4});
  Rows rows = statement.run({Int32GetDatum(limit)});
  std::vector<int64_t> ids(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) ids[r] = rows.int64(r, 0);
  return ids;
}

}  // namespace pg_outbox::pg
