// What the worker does with an error of the database in one of its transactions: it is
// rolled back, and either handled where it happened (an endpoint parked, housekeeping
// tried again later) or, when it may mean the extension was dropped, passed on to the
// loop, which finds out (Worker::recover_from_error).
#pragma once

#include "pg/boundary/postgres.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace pg_outbox::pg::worker {

// Errors that may mean DROP EXTENSION committed while a statement waited: the loop's
// recover_from_error tells that apart; nothing else may take them for an endpoint's own.
inline bool extension_may_be_gone(int sqlstate) {
  return sqlstate == ERRCODE_UNDEFINED_TABLE || sqlstate == ERRCODE_INVALID_SCHEMA_NAME ||
         sqlstate == ERRCODE_UNDEFINED_FUNCTION;
}

struct Failure {
  int sqlstate;
  std::string message;
};

// Runs `attempt` (which opens and commits its own transaction). A PostgreSQL error in it
// is rolled back and returned; one that may mean the extension is gone propagates with
// its transaction still open, so that the error stays readable until the loop aborts it.
std::optional<Failure> rolled_back_on_error(const std::function<void()>& attempt);

// Logs the failure of a step that is tried again later ("pg_outbox worker: <what>
// failed: <message>", with detail), at most once a minute: quiet_until_ms is the step's own.
void log_failure_once_a_minute(const Failure& failure, const char* what, const char* detail, int64_t now_ms,
                               int64_t& quiet_until_ms);

}  // namespace pg_outbox::pg::worker
