// The checks of outbox.enqueue (enqueue.cpp) that outbox.publish (publish.cpp) makes the
// same way for each of its deliveries: same messages, same SQLSTATEs.
#pragma once

#include "pg/boundary/postgres.hpp"
#include "pg/runtime/commit_wake.hpp"

#include <array>
#include <string>

namespace pg_outbox::pg::enqueue {

// The size of a stored value uncompressed, from its header alone (never detoasted).
int64 stored_size(Datum value);

struct EndpointFacts {
  bool exists = false;
  bool may_send = false;
  bool has_max_pending = false;
  int64 max_pending = 0;
  bool ordered = false;
  bool cloudevents = false;             // a CloudEvents format: every message needs an event type
  uint32_t wake_for = kWakeEverything;  // what its messages give the worker to do (runtime/commit_wake.hpp)
};
// The endpoint's row read by its primary key with the statement's snapshot (no send
// right: may_send stays false). Call inside pg_call.
void read_endpoint(Datum endpoint, EndpointFacts& facts);

// event_type or ordering_key: 1 to 200 characters (and no control character for
// event_type, which travels in a header); throws SqlError (22023).
void check_key_text(Datum value, const char* name, bool no_control_characters);

// Whether max_pending undelivered messages of the endpoint are in the queue, counted
// from its rows (before the worker has counted the endpoint).
bool at_max_pending(const std::string& endpoint, int64 max_pending, Oid owner);
// The id of the endpoint's message with this idempotency key still in the queue, or 0.
int64 queued_with_key(Datum endpoint, Datum key, Oid owner);
// Where the caller's arguments hold a message's event type, payload, headers, ordering
// key and idempotency key (enqueue's and publish's differ).
using FieldPositions = std::array<int, 5>;
// The idempotent enqueue of a message with an idempotency key: INSERT ... ON CONFLICT DO
// NOTHING into the endpoint, with the fields of fcinfo's arguments at those positions,
// and when a message with the key is already queued (it wins), its id. Tried again only
// if that message left the queue in between; after three tries, 40001 ("could not
// <verb>: ...").
struct KeyedInsert {
  int64 id;        // the message in the queue
  int64 inserted;  // the same id if this call inserted it, 0 if it was already there
};
KeyedInsert insert_or_find_with_key(FunctionCallInfo fcinfo, const FieldPositions& fields, Datum endpoint,
                                    TimestampTz next_attempt_at, Oid owner, const char* verb);
// max_pending's refusal (54000).
void refuse_full(const std::string& endpoint, int64 max_pending);

}  // namespace pg_outbox::pg::enqueue
