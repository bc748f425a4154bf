#include "pg/store/housekeeping.hpp"

#include "pg/boundary/spi.hpp"

extern "C" {
#include "catalog/pg_type.h"
}

namespace pg_outbox::pg::store {

namespace {

Datum table_name(TimePartitioned table) {
  return text_datum(table == TimePartitioned::kHistory ? "outbox.history" : "outbox.attempts");
}

}  // namespace

int64_t prepare_partitions(TimePartitioned table, int width_s) {
  static Statement statement("SELECT (extract(epoch FROM outbox._partitions_prepare($1::regclass, $2)) * 1000)::bigint",
                             {TEXTOID, INT4OID});
  return statement.run({table_name(table), Int32GetDatum(width_s)}).int64(0, 0);
}

void retire_partitions(TimePartitioned table, int retention_s, int width_s) {
  static Statement statement(R"sql(
    SELECT outbox._partitions_retire($1::regclass, now() - make_interval(secs => $2), false, make_interval(secs => $3))
  )sql",
                             {TEXTOID, INT4OID, INT4OID});
  statement.run({table_name(table), Int32GetDatum(retention_s), Int32GetDatum(width_s)});
}

// The bounded delete below picks its ids in an ARRAY() subquery: it runs once, as an
// InitPlan, and the delete is then primary-key lookups. The ORDER BY keeps the kept
// generic plan on the time index: without it, the planner may pick a sequential scan
// "until LIMIT rows match", which reads the whole table every second when none do.
int64_t purge_dead_letters(int retention_s, int limit) {
  static Statement statement(R"sql(
    WITH p AS (DELETE FROM dlq.dead_letters WHERE id = ANY (ARRAY(
       SELECT id FROM dlq.dead_letters
        WHERE (requeued_at IS NOT NULL OR discarded_at IS NOT NULL)
          AND COALESCE(requeued_at, discarded_at) < now() - make_interval(secs => $1)
        ORDER BY COALESCE(requeued_at, discarded_at) LIMIT $2 FOR UPDATE SKIP LOCKED))
       RETURNING 1)
    SELECT count(*) FROM p
  )sql",
                             {INT4OID, INT4OID});
  return statement.run({Int32GetDatum(retention_s), Int32GetDatum(limit)}).int64(0, 0);
}

std::vector<Orphan> find_orphans(const std::vector<int64_t>& excluded, int limit) {
  // The queue's distinct endpoints, one index probe each (a loose index scan), then
  // the rows of those that are not in outbox.endpoints.
  static Statement statement(R"sql(
    WITH RECURSIVE names AS (
      (SELECT m.endpoint FROM outbox.messages m WHERE m.ordering_seq IS NULL ORDER BY m.endpoint LIMIT 1)
      UNION ALL
      SELECT (SELECT m.endpoint FROM outbox.messages m WHERE m.endpoint > n.endpoint AND m.ordering_seq IS NULL
               ORDER BY m.endpoint LIMIT 1)
        FROM names n WHERE n.endpoint IS NOT NULL)
    SELECT o.id, o.attempts, n.endpoint, o.ordering_key FROM names n CROSS JOIN LATERAL (
       SELECT m.id, m.attempts, m.ordering_key
         FROM outbox.messages m
        WHERE m.endpoint = n.endpoint AND m.ordering_seq IS NULL AND m.id NOT IN (SELECT unnest($1::bigint[]))
        ORDER BY m.endpoint, m.next_attempt_at LIMIT $2) o
     WHERE n.endpoint IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM outbox.endpoints e WHERE e.name = n.endpoint)
     LIMIT $2
  )sql",
                             {INT8ARRAYOID, INT4OID});
  Rows rows = statement.run({int8_array(excluded), Int32GetDatum(limit)});
  std::vector<Orphan> orphans(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    orphans[r] = {rows.int64(r, 0), static_cast<int>(rows.int64(r, 1)), rows.text(r, 2), std::nullopt};
    if (!rows.is_null(r, 3)) orphans[r].ordering_key = rows.text(r, 3);
  }
  return orphans;
}

}  // namespace pg_outbox::pg::store
