#include "pg/runtime/settings.hpp"

#include "pg/boundary/postgres.hpp"

extern "C" {
#include "miscadmin.h"
#include "utils/guc.h"
}

#include <climits>
#include <stdexcept>
#include <vector>

namespace pg_outbox::pg {

Settings settings;

namespace {

// GUC check hook of the egress lists: PostgreSQL's usual refusal, naming the rule.
// PostgreSQL calls it: no C++ exception may leave it, and the message is reported
// only after every C++ object of the check is gone (GUC_check_errmsg may longjmp).
bool check_egress_rules(char** value, void**, GucSource) {
  char message[512] = "";
  try {
    std::vector<core::EgressRule> rules;
    if (auto error = core::parse_egress_rules(*value ? *value : "", rules))
      strlcpy(message, error->c_str(), sizeof message);
  } catch (...) {
    strlcpy(message, "could not check the egress rules (out of memory)", sizeof message);
  }
  if (message[0] == '\0') return true;
  GUC_check_errmsg("%s", message);
  return false;
}

void define_int(const char* name, const char* description, int* target, int boot, int min, int max, GucContext context,
                int flags) {
  DefineCustomIntVariable(name, description, nullptr, target, boot, min, max, context, flags, nullptr, nullptr,
                          nullptr);
}

}  // namespace

void define_settings() {
  // Read by the launcher, started at server start: restart settings. A session that
  // loads the library later (no shared_preload_libraries) may not define them, so
  // there they are plain reloadable settings that nothing uses.
  const GucContext at_start = process_shared_preload_libraries_in_progress ? PGC_POSTMASTER : PGC_SIGHUP;
  DefineCustomStringVariable("pg_outbox.database",
                             "Serve only this database (empty: every database where the extension is created).",
                             nullptr, &settings.database, "", at_start, 0, nullptr, nullptr, nullptr);
  define_int("pg_outbox.max_workers", "Most delivery workers, one per served database.", &settings.max_workers, 8, 1,
             1024, at_start, 0);
  DefineCustomBoolVariable("pg_outbox.enabled", "Deliver messages (off pauses all delivery).", nullptr,
                           &settings.enabled, true, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
  define_int("pg_outbox.poll_interval", "Longest the worker sleeps when it is not woken by a commit.",
             &settings.poll_interval_ms, 1000, 10, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS);
  define_int("pg_outbox.batch_size", "Most messages claimed in one transaction.", &settings.batch_size, 500, 1, 100000,
             PGC_SIGHUP, 0);
  define_int("pg_outbox.max_concurrency", "Most HTTP requests in flight at once.", &settings.max_concurrency, 64, 1,
             4096, PGC_SIGHUP, 0);
  define_int("pg_outbox.endpoint_concurrency",
             "Most HTTP requests in flight to one endpoint (its concurrency option overrides it).",
             &settings.endpoint_concurrency, 32, 1, 4096, PGC_SIGHUP, 0);
  define_int("pg_outbox.http_timeout", "Default whole-request HTTP timeout of an endpoint.", &settings.http_timeout_ms,
             5000, 1, 300 * 1000, PGC_SIGHUP, GUC_UNIT_MS);
  define_int("pg_outbox.max_attempts", "Default delivery attempts before a message is dead-lettered.",
             &settings.max_attempts, 10, 1, 1000000, PGC_SIGHUP, 0);
  define_int("pg_outbox.backoff_base", "First retry delay; it doubles with every attempt.", &settings.backoff_base_ms,
             1000, 1, INT_MAX, PGC_SIGHUP, GUC_UNIT_MS);
  define_int("pg_outbox.backoff_max", "Longest retry delay (also caps Retry-After).", &settings.backoff_max_ms,
             3600 * 1000, 1, INT_MAX, PGC_SIGHUP, GUC_UNIT_MS);
  define_int("pg_outbox.lease",
             "Longest a claimed message waits in the worker for its request to start before it is given back.",
             &settings.lease_s, 300, 1, INT_MAX / 1000, PGC_SIGHUP, GUC_UNIT_S);
  define_int("pg_outbox.breaker_threshold",
             "Consecutive retryable failures of an endpoint that open its circuit breaker.",
             &settings.breaker_threshold, 10, 1, 1000000, PGC_SIGHUP, 0);
  define_int("pg_outbox.disable_after",
             "How long an endpoint may answer nothing but failures before the worker pauses it (0: never).",
             &settings.disable_after_s, 5 * 86400, 0, INT_MAX, PGC_SIGHUP, GUC_UNIT_S);
  define_int("pg_outbox.sent_retention", "How long sent messages are kept (0: deleted at once).",
             &settings.sent_retention_s, 86400, 0, INT_MAX, PGC_SIGHUP, GUC_UNIT_S);
  define_int("pg_outbox.attempt_retention",
             "How long the attempt log (outbox.attempts) keeps each delivery attempt (0: none is logged).",
             &settings.attempt_retention_s, 7 * 86400, 0, INT_MAX, PGC_SIGHUP, GUC_UNIT_S);
  define_int("pg_outbox.dlq_retention",
             "How long handled (requeued or discarded) dead letters are kept (-1: for ever); open ones always are.",
             &settings.dlq_retention_s, -1, -1, INT_MAX, PGC_SIGHUP, GUC_UNIT_S);
  define_int("pg_outbox.max_payload_size",
             "Largest payload enqueue accepts; a larger row inserted directly is dead-lettered.",
             &settings.max_payload_size, 1 << 20, 1, INT_MAX, PGC_SIGHUP, GUC_UNIT_BYTE);
  define_int("pg_outbox.max_inflight_bytes",
             "Most bytes of payload the worker holds at once (claimed and not yet settled).",
             &settings.max_inflight_bytes, 64 << 20, 1 << 20, INT_MAX, PGC_SIGHUP, GUC_UNIT_BYTE);
  // Where the server may send: superuser settings (SIGHUP context), hidden from other
  // roles (GUC_SUPERUSER_ONLY), refused at SET/reload when a rule does not parse.
  DefineCustomStringVariable(
      "pg_outbox.egress_allow", "Host patterns and CIDR ranges deliveries may go to (empty: anywhere not denied).",
      nullptr, &settings.egress_allow, "", PGC_SIGHUP, GUC_SUPERUSER_ONLY, check_egress_rules, nullptr, nullptr);
  DefineCustomStringVariable(
      "pg_outbox.egress_deny", "Host patterns and CIDR ranges deliveries may never go to (deny wins).", nullptr,
      &settings.egress_deny, "", PGC_SIGHUP, GUC_SUPERUSER_ONLY, check_egress_rules, nullptr, nullptr);
  MarkGUCPrefixReserved("pg_outbox");
}

core::EgressPolicy egress_policy() {
  core::EgressPolicy policy;
  // Values that reached the variables passed check_egress_rules; a failure here
  // would leave an empty list, so be loud rather than permissive.
  if (core::parse_egress_rules(settings.egress_allow ? settings.egress_allow : "", policy.allow) ||
      core::parse_egress_rules(settings.egress_deny ? settings.egress_deny : "", policy.deny))
    throw std::runtime_error("pg_outbox: the egress policy settings do not parse");
  return policy;
}

}  // namespace pg_outbox::pg
