// The statement triggers of outbox.messages that tell this library what plain SQL did
// to the queue (outbox.enqueue inserts without a statement, and notes its own rows):
//  - outbox._note_inserts, AFTER INSERT with the statement's rows as a transition table:
//    the keyed rows take their place in their keys' order at commit (ordering/; now, if
//    the constraints are immediate), and
//    the rows count towards their endpoints' max_pending (queued_count.cpp);
//  - outbox._queue_changed, AFTER DELETE, UPDATE OF endpoint and TRUNCATE: rows left
//    the queue otherwise than by the worker, which then counts it again (and, for a
//    TRUNCATE, looks its keys up again: ordering/successors.cpp).
#include "pg/boundary/spi.hpp"
#include "pg/boundary/trigger_data.hpp"
#include "pg/ordering/ordering.hpp"
#include "pg/ordering/successors.hpp"
#include "pg/producer/queued_count.hpp"

PG_OUTBOX_FUNCTION(pg_outbox_note_inserts) {
  using namespace pg_outbox::pg;
  TriggerData* trigger = trigger_data(fcinfo, "outbox._note_inserts()");
  with_spi(
      [] {
        Rows keyed =
            run_once("SELECT id, endpoint, ordering_key, ordering_seq FROM inserted WHERE ordering_key IS NOT NULL");
        for (size_t r = 0; r < keyed.size(); ++r)
          order_at_commit(keyed.int64(r, 0), keyed.text(r, 1), keyed.text(r, 2), keyed.optional_int64(r, 3));
        Rows counts = run_once("SELECT endpoint, count(*) FROM inserted GROUP BY endpoint");
        for (size_t r = 0; r < counts.size(); ++r) note_queued(counts.text(r, 0), counts.int64(r, 1));
      },
      trigger);
  place_noted_if_asked(called_function_owner(fcinfo));
  return PointerGetDatum(nullptr);
}

PG_OUTBOX_FUNCTION(pg_outbox_queue_changed) {
  TriggerData* trigger = pg_outbox::pg::trigger_data(fcinfo, "outbox._queue_changed()");
  pg_outbox::pg::queue_changed();
  // A TRUNCATE takes keyed messages out without the DELETE trigger that says so to the
  // worker's lines of messages looked up ahead.
  if (TRIGGER_FIRED_BY_TRUNCATE(trigger->tg_event)) pg_outbox::pg::successors::reordered_everything_at_commit();
  return PointerGetDatum(nullptr);
}
