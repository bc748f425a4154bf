// outbox.enqueue's row (enqueue.cpp is the function): inserted straight through the
// executor, as logical replication applies a row.
#pragma once

#include "pg/boundary/postgres.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

namespace pg_outbox::pg::enqueue {

// outbox.enqueue's arguments, in order.
enum Argument { kEndpoint, kPayload, kEventType, kHeaders, kOrderingKey, kIdempotencyKey, kDeliverAt };

// One row into outbox.messages with the function's arguments; returns its id. `ordered`:
// the endpoint is ordered (its keyed message is placed in commit order at commit).
// `owner`: the extension's owner, whom the executor's checks of a changed table run as.
int64 insert_row(FunctionCallInfo fcinfo, TimestampTz next_attempt_at, Oid owner, bool ordered);

}  // namespace pg_outbox::pg::enqueue
