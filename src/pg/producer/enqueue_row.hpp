// outbox.enqueue's row (enqueue.cpp is the function): inserted straight through the
// executor, as logical replication applies a row.
#pragma once

#include "pg/boundary/postgres.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

#include <vector>

namespace pg_outbox::pg::enqueue {

// outbox.enqueue's arguments, in order.
enum Argument { kEndpoint, kPayload, kEventType, kHeaders, kOrderingKey, kIdempotencyKey, kDeliverAt };

// A row inserted: its id, and whether it went in with a provisional number (RowValues).
struct Inserted {
  int64 id;
  bool provisional;
};
// One row into outbox.messages with the function's arguments. `ordered`: the endpoint is
// ordered (its keyed message is placed in commit order at commit). `owner`: the
// extension's owner, whom the executor's checks of a changed table run as.
Inserted insert_row(FunctionCallInfo fcinfo, TimestampTz next_attempt_at, Oid owner, bool ordered);

// A row's values (outbox.publish's rows: one per subscriber). `id`: taken from the
// identity sequence before the insert when not 0 (publish needs its first row's id to
// name the others' webhook-id).
struct RowValues {
  int64 id = 0;
  NullableDatum endpoint, event_type, payload, headers, ordering_key, idempotency_key;
  bool ordered = false;  // the endpoint is ordered
  // Set by the insert: the row went in with a provisional number (ordering.hpp,
  // kProvisionalSeq), which its note (order_at_commit) must carry.
  bool provisional = false;
};
// The next id of the queue's identity sequence.
int64 next_message_id();
// Every row into outbox.messages in one opening of the table, in order; fills in the ids.
void insert_rows(std::vector<RowValues>& rows, TimestampTz next_attempt_at, Oid owner);

}  // namespace pg_outbox::pg::enqueue
