#include "pg/worker/failures.hpp"

#include "pg/boundary/spi.hpp"

namespace pg_outbox::pg::worker {

std::optional<Failure> rolled_back_on_error(const std::function<void()>& attempt) {
  try {
    attempt();
    return std::nullopt;
  } catch (const PgError& e) {
    // Copied before the abort: the error lives in the transaction's memory.
    Failure failure{e.data()->sqlerrcode, e.what()};
    abort_transaction();
    if (extension_may_be_gone(failure.sqlstate)) throw;
    return failure;
  }
}

}  // namespace pg_outbox::pg::worker
