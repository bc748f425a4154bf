// The library's one transaction callback and one subtransaction callback (registered by
// _PG_init in every backend). Each concern keeps its own per-transaction state and is
// told the end of a transaction here, in a fixed order; none registers a callback of its
// own, so that the order in which they act is written in one place.
#pragma once

#include "pg/boundary/postgres.hpp"

extern "C" {
#include "access/xact.h"
}

namespace pg_outbox::pg {

void register_transaction_events();

// What each concern does when its transaction ends (defined in its own file).
void database_hold_at_transaction_end(XactEvent event);  // launcher/database_hold.cpp
void queued_count_at_transaction_end(XactEvent event);   // producer/queued_count.cpp
void queued_count_at_subtransaction_end(SubXactEvent event, SubTransactionId sub, SubTransactionId parent);
void ordering_at_transaction_end(XactEvent event);  // ordering/ordering.cpp
void ordering_at_subtransaction_end(SubXactEvent event, SubTransactionId sub);
void successors_at_transaction_end(XactEvent event);   // ordering/successors.cpp
void commit_wake_at_transaction_end(XactEvent event);  // runtime/commit_wake.cpp

}  // namespace pg_outbox::pg
