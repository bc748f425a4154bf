#include "pg/store/endpoints.hpp"

#include "pg/boundary/spi.hpp"
#include "pg/store/settlements.hpp"

#include <unordered_map>

extern "C" {
#include "catalog/pg_type.h"
}

namespace pg_outbox::pg::store {

namespace {

std::optional<int> optional_int(const Rows& rows, size_t r, size_t c) {
  auto value = rows.optional_int64(r, c);
  if (!value) return std::nullopt;
  return static_cast<int>(*value);
}

// Each endpoint's secrets, current first then the one its rotation keeps for a while
// (at most two, outbox.rotate_secret). Expired ones too, until housekeeping has deleted
// them: the worker no longer signs with them (core::keys_in_force), and knows that it
// has rows to delete.
void attach_secrets(std::vector<EndpointRow>& endpoints) {
  static Statement statement(R"sql(
    SELECT s.endpoint, s.secret, (extract(epoch FROM s.expires_at) * 1000)::bigint
      FROM outbox.endpoint_secrets s
     ORDER BY s.endpoint, s.expires_at DESC NULLS FIRST
  )sql",
                             {});
  Rows rows = statement.run({});
  if (rows.size() == 0) return;
  std::unordered_map<std::string, EndpointRow*> by_name;
  for (EndpointRow& e : endpoints) by_name.emplace(e.name, &e);
  for (size_t r = 0; r < rows.size(); ++r) {
    auto e = by_name.find(rows.text(r, 0));
    if (e != by_name.end()) e->second->secrets.push_back({rows.take_text(r, 1), rows.int64(r, 2)});
  }
}

}  // namespace

std::vector<EndpointRow> load_endpoints() {
  static Statement statement(R"sql(
    SELECT e.name, e.url, e.channel, e.headers::text, e.timeout_ms, e.max_attempts,
           e.ordered, e.paused, e.breaker_state, e.breaker_failures,
           (extract(epoch FROM e.breaker_open_until) * 1000)::bigint, e.breaker_cooldown_ms, e.concurrency,
           e.rate_limit, e.max_pending IS NOT NULL, e.pull,
           coalesce((extract(epoch FROM e.failing_since) * 1000)::bigint, 0),
           coalesce((extract(epoch FROM e.resumed_at) * 1000)::bigint, 0),
           e.format, e.source, e.batch_size, current_database()
      FROM outbox.endpoints e
  )sql",
                             {});
  Rows rows = statement.run({});
  std::vector<EndpointRow> endpoints(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    EndpointRow& e = endpoints[r];
    e.name = rows.text(r, 0);
    e.url = rows.text(r, 1);
    e.channel = rows.text(r, 2);
    e.headers_json = rows.text(r, 3);
    e.timeout_ms = optional_int(rows, r, 4);
    e.max_attempts = optional_int(rows, r, 5);
    e.ordered = rows.boolean(r, 6);
    e.paused = rows.boolean(r, 7);
    e.breaker.state = core::parse_breaker_state(rows.text(r, 8)).value_or(core::BreakerState::Closed);
    e.breaker.consecutive_failures = static_cast<int>(rows.int64(r, 9));
    e.breaker.open_until_ms = rows.int64(r, 10);
    e.breaker.cooldown_ms = rows.int64(r, 11);
    e.concurrency = optional_int(rows, r, 12);
    e.rate_limit = optional_int(rows, r, 13);
    e.has_max_pending = rows.boolean(r, 14);
    e.pull = rows.boolean(r, 15);
    e.failing.since_ms = rows.int64(r, 16);
    e.resumed_at_ms = rows.int64(r, 17);
    // The table's CHECK allows only the three formats.
    e.format = core::parse_format(rows.text(r, 18)).value_or(core::Format::StandardWebhooks);
    e.source = rows.is_null(r, 19) ? core::default_source(rows.text(r, 21), e.name) : rows.text(r, 19);
    e.batch_size = static_cast<int>(rows.int64(r, 20));
  }
  attach_secrets(endpoints);
  return endpoints;
}

int64_t delete_expired_secrets() {
  static Statement statement(R"sql(
    WITH expired AS (SELECT s.endpoint, s.secret FROM outbox.endpoint_secrets s
                      WHERE s.expires_at <= now() FOR UPDATE SKIP LOCKED),
         gone AS (DELETE FROM outbox.endpoint_secrets s USING expired x
                   WHERE s.endpoint = x.endpoint AND s.secret = x.secret RETURNING 1)
    SELECT count(*) FROM gone
  )sql",
                             {});
  return statement.run({}).int64(0, 0);
}

bool save_breaker(const std::string& endpoint, const core::Breaker& b, const core::FailingStreak& failing) {
  static Statement statement(R"sql(
    WITH free AS (SELECT e.name FROM outbox.endpoints e WHERE e.name = $1 FOR NO KEY UPDATE SKIP LOCKED)
    UPDATE outbox.endpoints e SET breaker_state = $2, breaker_failures = $3,
           breaker_open_until = CASE WHEN $4 > 0 THEN to_timestamp($4 / 1000.0) END,
           breaker_cooldown_ms = $5,
           failing_since = CASE WHEN $6 > 0 THEN to_timestamp($6 / 1000.0) END
      FROM free WHERE e.name = free.name
    RETURNING 1
  )sql",
                             {TEXTOID, TEXTOID, INT4OID, INT8OID, INT8OID, INT8OID});
  return statement
             .run({text_datum(endpoint), text_datum(core::breaker_state_name(b.state)),
                   Int32GetDatum(b.consecutive_failures), Int64GetDatum(b.open_until_ms), Int64GetDatum(b.cooldown_ms),
                   Int64GetDatum(failing.since_ms)})
             .size() == 1;
}

RetireResult retire_endpoint(const std::string& endpoint, core::PauseReason reason, int64_t since_ms) {
  // The row is locked first (skipped if busy), then updated under the conditions: an
  // operator's resume that committed meanwhile is the row the UPDATE re-checks
  // (READ COMMITTED), so it is never undone by failures judged before it.
  static Statement statement(R"sql(
    WITH free AS (SELECT e.name FROM outbox.endpoints e WHERE e.name = $1 FOR NO KEY UPDATE SKIP LOCKED),
    retired AS (UPDATE outbox.endpoints e SET paused = true, paused_reason = $2,
                       failing_since = coalesce(e.failing_since, to_timestamp($3 / 1000.0))
                  FROM free
                 WHERE e.name = free.name AND NOT e.paused
                   AND (e.resumed_at IS NULL OR e.resumed_at <= to_timestamp($3 / 1000.0))
                RETURNING e.name, e.paused_reason, e.failing_since)
    SELECT (SELECT count(*) FROM free) > 0,
           (SELECT json_build_object('event', 'endpoint_disabled', 'database', current_database(),
                                     'endpoint', r.name, 'reason', r.paused_reason, 'since', r.failing_since,
                                     'paused_at', now())::text
              FROM retired r)
  )sql",
                             {TEXTOID, TEXTOID, INT8OID});
  Rows rows =
      statement.run({text_datum(endpoint), text_datum(core::pause_reason_name(reason)), Int64GetDatum(since_ms)});
  if (!rows.boolean(0, 0)) return RetireResult::RowBusy;
  if (rows.is_null(0, 1)) return RetireResult::NotRetired;
  notify(kEventsChannel, rows.text(0, 1));
  return RetireResult::Retired;
}

}  // namespace pg_outbox::pg::store
