// The statement triggers of outbox.messages that tell this library what plain SQL did
// to the queue (outbox.enqueue inserts without a statement, and notes its own rows):
//  - outbox._note_inserts, AFTER INSERT with the statement's rows as a transition table:
//    the keyed rows take their place in their keys' order at commit (ordering.cpp), and
//    the rows count towards their endpoints' max_pending (queued_count.cpp);
//  - outbox._queue_changed, AFTER DELETE, UPDATE OF endpoint and TRUNCATE: rows left
//    the queue otherwise than by the worker, which then counts it again.
#include "pg/boundary/boundary.hpp"
#include "pg/ordering/ordering.hpp"
#include "pg/producer/queued_count.hpp"
#include "pg/boundary/trigger_data.hpp"

extern "C" {
#include "commands/trigger.h"
#include "executor/spi.h"
}

namespace {

// Runs a query over the transition table "inserted"; `row` gets each row's text cells.
template <typename Row>
void each_inserted(TriggerData* trigger, const char* query, int columns, Row&& row) {
  using pg_outbox::pg::pg_call;
  pg_call([&] {
    if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "pg_outbox: SPI_connect failed");
    if (SPI_register_trigger_data(trigger) != SPI_OK_TD_REGISTER)
      elog(ERROR, "pg_outbox: SPI_register_trigger_data failed");
    if (SPI_execute(query, true, 0) != SPI_OK_SELECT) elog(ERROR, "pg_outbox: reading the inserted rows failed");
  });
  for (uint64 r = 0; r < SPI_processed; ++r) {
    std::vector<std::string> cells(columns);
    for (int c = 0; c < columns; ++c) {
      char* value = pg_call([&] { return SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, c + 1); });
      cells[c] = value != nullptr ? value : "";
    }
    row(cells);
  }
  pg_call([] { SPI_finish(); });
}

}  // namespace

PG_OUTBOX_FUNCTION(pg_outbox_note_inserts) {
  TriggerData* trigger = pg_outbox::pg::trigger_data(fcinfo, "outbox._note_inserts()");
  each_inserted(trigger, "SELECT id, endpoint, ordering_key, ordering_seq FROM inserted WHERE ordering_key IS NOT NULL",
                4, [](const std::vector<std::string>& c) {
                  pg_outbox::pg::order_at_commit(
                      std::stoll(c[0]), c[1], c[2],
                      c[3].empty() ? std::nullopt : std::optional<int64_t>(std::stoll(c[3])));
                });
  each_inserted(trigger, "SELECT endpoint, count(*) FROM inserted GROUP BY endpoint", 2,
                [](const std::vector<std::string>& c) { pg_outbox::pg::note_queued(c[0], std::stoll(c[1])); });
  return PointerGetDatum(nullptr);
}

PG_OUTBOX_FUNCTION(pg_outbox_queue_changed) {
  (void)pg_outbox::pg::trigger_data(fcinfo, "outbox._queue_changed()");
  pg_outbox::pg::queue_changed();
  return PointerGetDatum(nullptr);
}
