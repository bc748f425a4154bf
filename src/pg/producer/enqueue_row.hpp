// outbox.enqueue's row (enqueue.cpp is the function): inserted straight through
// the executor, as logical replication applies a row, and the owner's identity that the
// function's SQL and a changed table's triggers run with.
#pragma once

#include "pg/boundary/postgres.hpp"

extern "C" {
#include "datatype/timestamp.h"
#include "utils/guc.h"
}

namespace pg_outbox::pg::enqueue {

// outbox.enqueue's arguments, in order.
enum Argument { kEndpoint, kPayload, kEventType, kHeaders, kOrderingKey, kIdempotencyKey, kDeliverAt };

// Runs work as the extension's owner, as a SECURITY DEFINER function with
// search_path = pg_catalog, pg_temp would: a trigger or function an operator added to
// the outbox tables then never resolves a name through the caller's search_path with
// the owner's rights. Switches back after (an ERROR on the way is undone by the
// (sub)transaction's abort, which restores the user and the setting too).
template <typename Fn>
void as_owner(Oid owner, Fn&& fn) {
  Oid saved_user;
  int saved_context;
  GetUserIdAndSecContext(&saved_user, &saved_context);
  SetUserIdAndSecContext(owner, saved_context | SECURITY_LOCAL_USERID_CHANGE);
  const int nest_level = NewGUCNestLevel();
  (void)set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0,
                          false);
  fn();
  AtEOXact_GUC(true, nest_level);
  SetUserIdAndSecContext(saved_user, saved_context);
}

// One row into outbox.messages with the function's arguments; returns its id. `ordered`:
// the endpoint is ordered (its keyed message is placed in commit order at commit).
int64 insert_row(FunctionCallInfo fcinfo, TimestampTz next_attempt_at, Oid owner, bool ordered);

}  // namespace pg_outbox::pg::enqueue
