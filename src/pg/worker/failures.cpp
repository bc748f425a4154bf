#include "pg/worker/failures.hpp"

#include "pg/boundary/spi.hpp"

namespace pg_outbox::pg::worker {

std::optional<Failure> rolled_back_on_error(const std::function<void()>& attempt) {
  try {
    attempt();
    return std::nullopt;
  } catch (const PgError& e) {
    // The error lives in the transaction's memory, which the abort frees: one that goes
    // on to the loop leaves the transaction to it (Worker::recover_from_error reads the
    // error, then aborts); one handled here is copied first.
    if (extension_may_be_gone(e.data()->sqlerrcode)) throw;
    Failure failure{e.data()->sqlerrcode, e.what()};
    abort_transaction();
    return failure;
  }
}

void log_failure_once_a_minute(const Failure& failure, const char* what, const char* detail, int64_t now_ms,
                               int64_t& quiet_until_ms) {
  if (now_ms < quiet_until_ms) return;
  quiet_until_ms = now_ms + 60000;
  pg_call([&] {
    ereport(LOG, (errcode(failure.sqlstate), errmsg("pg_outbox worker: %s failed: %s", what, failure.message.c_str()),
                  errdetail("%s", detail)));
  });
}

}  // namespace pg_outbox::pg::worker
