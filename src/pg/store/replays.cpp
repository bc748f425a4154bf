#include "pg/store/replays.hpp"

#include "pg/boundary/spi.hpp"

extern "C" {
#include "catalog/pg_type.h"
}

namespace pg_outbox::pg::store {

int64_t move_replayed(int limit) {
  static Statement statement("SELECT outbox._replays_move($1)", {INT8OID});
  return statement.run({Int64GetDatum(limit)}).int64(0, 0);
}

bool replays_waiting() {
  // The primary key's first entry: an index path, as every statement of the worker has.
  static Statement statement("SELECT EXISTS (SELECT FROM outbox.replay_queue q ORDER BY q.n LIMIT 1)", {});
  return statement.run({}).boolean(0, 0);
}

}  // namespace pg_outbox::pg::store
