#include "pg/settings.hpp"

#include "pg/postgres.hpp"

extern "C" {
#include "miscadmin.h"
#include "utils/guc.h"
}

#include <climits>

namespace pg_outbox::pg {

Settings settings;

namespace {

void define_int(const char* name, const char* description, int* target, int boot, int min, int max,
                GucContext context, int flags) {
  DefineCustomIntVariable(name, description, nullptr, target, boot, min, max, context, flags, nullptr,
                          nullptr, nullptr);
}

}  // namespace

void define_settings() {
  // Only the worker, registered at server start, reads it: a restart setting. A session
  // that loads the library later (no shared_preload_libraries) may not define one, so
  // there it is a plain reloadable setting that nothing uses.
  DefineCustomStringVariable("pg_outbox.database", "Database whose outbox the background worker serves.",
                             nullptr, &settings.database, "postgres",
                             process_shared_preload_libraries_in_progress ? PGC_POSTMASTER : PGC_SIGHUP, 0,
                             nullptr, nullptr, nullptr);
  DefineCustomBoolVariable("pg_outbox.enabled", "Deliver messages (off pauses all delivery).", nullptr,
                           &settings.enabled, true, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
  define_int("pg_outbox.poll_interval", "Longest the worker sleeps when it is not woken by a commit.",
             &settings.poll_interval_ms, 1000, 10, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS);
  define_int("pg_outbox.batch_size", "Most messages claimed in one transaction.", &settings.batch_size,
             500, 1, 100000, PGC_SIGHUP, 0);
  define_int("pg_outbox.max_concurrency", "Most HTTP requests in flight at once.",
             &settings.max_concurrency, 64, 1, 4096, PGC_SIGHUP, 0);
  define_int("pg_outbox.http_timeout", "Default whole-request HTTP timeout of an endpoint.",
             &settings.http_timeout_ms, 5000, 1, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS);
  define_int("pg_outbox.max_attempts", "Default delivery attempts before a message is dead-lettered.",
             &settings.max_attempts, 10, 1, 1000000, PGC_SIGHUP, 0);
  define_int("pg_outbox.backoff_base", "First retry delay; it doubles with every attempt.",
             &settings.backoff_base_ms, 1000, 1, INT_MAX, PGC_SIGHUP, GUC_UNIT_MS);
  define_int("pg_outbox.backoff_max", "Longest retry delay (also caps Retry-After).",
             &settings.backoff_max_ms, 3600 * 1000, 1, INT_MAX, PGC_SIGHUP, GUC_UNIT_MS);
  define_int("pg_outbox.lease", "How long a claimed message stays claimed before another claim may take it.",
             &settings.lease_s, 300, 1, INT_MAX / 1000, PGC_SIGHUP, GUC_UNIT_S);
  define_int("pg_outbox.breaker_threshold",
             "Consecutive retryable failures of an endpoint that open its circuit breaker.",
             &settings.breaker_threshold, 10, 1, 1000000, PGC_SIGHUP, 0);
  define_int("pg_outbox.sent_retention", "How long sent messages are kept (0: deleted at once).",
             &settings.sent_retention_s, 86400, 0, INT_MAX, PGC_SIGHUP, GUC_UNIT_S);
  define_int("pg_outbox.dlq_retention", "How long handled (requeued or discarded) dead letters are kept (-1: for ever); open ones always are.",
             &settings.dlq_retention_s, -1, -1, INT_MAX, PGC_SIGHUP, GUC_UNIT_S);
  MarkGUCPrefixReserved("pg_outbox");
}

}  // namespace pg_outbox::pg
