// The order matters at commit: a DROP DATABASE's hold is lifted first; max_pending's
// reservations become committed counts before the worker is woken to deliver (and count
// down) the same messages; the commit order's notes of the transaction are forgotten, and
// the worker's claim learns the keys' next messages its settle found;
// the wake comes last, once everything it may lead the worker to see is in place.
#include "pg/runtime/transaction_events.hpp"

namespace pg_outbox::pg {

namespace {

void on_transaction_event(XactEvent event, void*) {
  database_hold_at_transaction_end(event);
  queued_count_at_transaction_end(event);
  ordering_at_transaction_end(event);
  successors_at_transaction_end(event);
  commit_wake_at_transaction_end(event);
}

void on_subtransaction_event(SubXactEvent event, SubTransactionId sub, SubTransactionId parent, void*) {
  queued_count_at_subtransaction_end(event, sub, parent);
  ordering_at_subtransaction_end(event, sub);
}

}  // namespace

void register_transaction_events() {
  RegisterXactCallback(on_transaction_event, nullptr);
  RegisterSubXactCallback(on_subtransaction_event, nullptr);
}

}  // namespace pg_outbox::pg
