#include "pg/store/endpoints.hpp"

#include "pg/boundary/spi.hpp"

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

}  // namespace

std::vector<EndpointRow> load_endpoints() {
  static Statement statement(R"sql(
    SELECT e.name, e.url, e.channel, e.headers::text, s.secret, e.timeout_ms, e.max_attempts,
           e.ordered, e.paused, e.breaker_state, e.breaker_failures,
           (extract(epoch FROM e.breaker_open_until) * 1000)::bigint, e.breaker_cooldown_ms, e.concurrency,
           e.rate_limit, e.max_pending IS NOT NULL, e.format, e.source, e.batch_size, current_database()
      FROM outbox.endpoints e LEFT JOIN outbox.endpoint_secrets s ON s.endpoint = e.name
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
    // The table's CHECK allows only the three formats.
    e.format = core::parse_format(rows.text(r, 16)).value_or(core::Format::StandardWebhooks);
    e.source = rows.is_null(r, 17) ? core::default_source(rows.text(r, 19), e.name) : rows.text(r, 17);
    e.batch_size = static_cast<int>(rows.int64(r, 18));
  }
  return endpoints;
}

bool save_breaker(const std::string& endpoint, const core::Breaker& b) {
  static Statement statement(R"sql(
    WITH free AS (SELECT e.name FROM outbox.endpoints e WHERE e.name = $1 FOR NO KEY UPDATE SKIP LOCKED)
    UPDATE outbox.endpoints e SET breaker_state = $2, breaker_failures = $3,
           breaker_open_until = CASE WHEN $4 > 0 THEN to_timestamp($4 / 1000.0) END,
           breaker_cooldown_ms = $5
      FROM free WHERE e.name = free.name
    RETURNING 1
  )sql",
                             {TEXTOID, TEXTOID, INT4OID, INT8OID, INT8OID});
  return statement
             .run({text_datum(endpoint), text_datum(core::breaker_state_name(b.state)),
                   Int32GetDatum(b.consecutive_failures), Int64GetDatum(b.open_until_ms), Int64GetDatum(b.cooldown_ms)})
             .size() == 1;
}

}  // namespace pg_outbox::pg::store
