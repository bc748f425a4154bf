// outbox.enqueue(): the producer's hot path, as cheap as the INSERT a team would write
// into a hand-made outbox table.
//
// It is not SECURITY DEFINER, so that it sees the role that really calls it (GetUserId:
// SET ROLE, and callers inside other SECURITY DEFINER functions, included); it reads the
// endpoint and the send right as the function's owner (the extension's owner), which no
// producer can do itself. The checks are made here, in the order the SQL contract lists
// them, with its messages and SQLSTATEs. The row is then inserted straight through the
// executor (enqueue_row.cpp): no SQL statement, no plan, and so no statement trigger;
// the commit wake is registered directly. The CHECK constraints of outbox.messages hold
// for plain INSERTs, whose wake messages_wake registers; enqueue has checked the same
// rules before it inserts (table_as_installed). Only the rare paths use SQL: max_pending
// before the worker has counted the endpoint, and the idempotent INSERT ... ON CONFLICT.
#include "core/validation.hpp"
#include "pg/boundary/spi.hpp"
#include "pg/producer/argument_checks.hpp"
#include "pg/boundary/boundary.hpp"
#include "pg/runtime/commit_wake.hpp"
#include "pg/producer/enqueue_row.hpp"
#include "pg/producer/enqueue_checks.hpp"
#include "pg/ordering/ordering.hpp"
#include "pg/producer/queued_count.hpp"
#include "pg/runtime/settings.hpp"

extern "C" {
#include "access/detoast.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "parser/parse_relation.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
}

#include <string>
#include <string_view>

namespace pg_outbox::pg::enqueue {

constexpr int kKeyLengthMax = 200;  // event_type, ordering_key (the table's CHECKs say the same)

// The size of a stored value uncompressed, from its header alone (never detoasted).
int64 stored_size(Datum value) { return static_cast<int64>(toast_raw_datum_size(value)) - VARHDRSZ; }

// A statement of enqueue's, run as the extension's owner (boundary/spi.hpp, as_owner).
// Every name in these statements is schema-qualified, operators included, so the
// caller's search_path cannot change what they mean. They return a row at most; the
// executor stops at the first (max_rows), except for an INSERT (0: run to the end).
Rows run_as_owner(Oid owner, Statement& statement, const std::vector<Datum>& arguments,
                  Statement::Visibility visibility = Statement::Visibility::kStatement, const std::string& nulls = {},
                  long max_rows = 1) {
  Rows rows;
  as_owner(owner, [&] { with_spi([&] { rows = statement.run(arguments, visibility, nulls, max_rows); }); });
  return rows;
}

// The endpoint's row, read by its primary key with the statement's snapshot (what a
// SELECT would see), without a statement: this is on every enqueue's path.
void read_endpoint(Datum endpoint, EndpointFacts& facts) {
  Oid schema = get_namespace_oid("outbox", false);
  Oid relid = get_relname_relid("endpoints", schema);
  Oid index = get_relname_relid("endpoints_pkey", schema);
  if (!OidIsValid(relid) || !OidIsValid(index))
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE), errmsg("outbox.endpoints does not exist")));
  Relation rel = table_open(relid, AccessShareLock);
  AttrNumber name_column = attnameAttNum(rel, "name", false);
  AttrNumber max_pending_column = attnameAttNum(rel, "max_pending", false);
  AttrNumber ordered_column = attnameAttNum(rel, "ordered", false);
  // 0.4.0's column (missing while the update has not run: every endpoint is then a
  // Standard Webhooks one).
  AttrNumber format_column = attnameAttNum(rel, "format", true);
  AttrNumber channel_column = attnameAttNum(rel, "channel", false);
  AttrNumber pull_column = attnameAttNum(rel, "pull", true);  // 0.4.0's too
  if (name_column != 1 || max_pending_column == InvalidAttrNumber || ordered_column == InvalidAttrNumber ||
      channel_column == InvalidAttrNumber)
    elog(ERROR, "pg_outbox: outbox.endpoints is not as installed");
  // The key compares under the column's collation, the one its index is sorted by.
  ScanKeyData key;
  ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid,
                         TupleDescAttr(RelationGetDescr(rel), name_column - 1)->attcollation, F_TEXTEQ, endpoint);
  SysScanDesc scan = systable_beginscan(rel, index, true, GetActiveSnapshot(), 1, &key);
  HeapTuple tuple = systable_getnext(scan);
  if (HeapTupleIsValid(tuple)) {
    facts.exists = true;
    bool isnull = false;
    Datum max_pending = heap_getattr(tuple, max_pending_column, RelationGetDescr(rel), &isnull);
    facts.has_max_pending = !isnull;
    if (!isnull) facts.max_pending = DatumGetInt64(max_pending);
    Datum ordered = heap_getattr(tuple, ordered_column, RelationGetDescr(rel), &isnull);
    facts.ordered = !isnull && DatumGetBool(ordered);
    // A NOTIFY endpoint has a channel; a pull endpoint's messages are its readers' alone.
    (void)heap_getattr(tuple, channel_column, RelationGetDescr(rel), &isnull);
    if (!isnull) {
      facts.wake_for = kWakeNotifyRound;
    } else {
      const bool pull = pull_column != InvalidAttrNumber &&
                        DatumGetBool(heap_getattr(tuple, pull_column, RelationGetDescr(rel), &isnull)) && !isnull;
      facts.wake_for = pull ? kWakeReadersOnly : kWakeClaim;
    }
    if (format_column != InvalidAttrNumber) {
      Datum format = heap_getattr(tuple, format_column, RelationGetDescr(rel), &isnull);
      if (!isnull) {
        text* t = DatumGetTextPP(format);
        facts.cloudevents = std::string_view(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t)).rfind("cloudevents-", 0) == 0;
      }
    }
  }
  systable_endscan(scan);
  table_close(rel, AccessShareLock);
}

// The endpoint's row and the caller's send right: privileged (a superuser or the
// extension's owner), a grant to one of the caller's roles, or a grant to PUBLIC.
// pg_has_role is false, not an error, for a role dropped since it was granted.
EndpointFacts endpoint_facts(Datum endpoint, Oid caller, Oid owner, bool privileged) {
  static Statement right(R"sql(
    SELECT EXISTS (SELECT FROM outbox.endpoint_senders s
                    WHERE s.endpoint OPERATOR(pg_catalog.=) $1
                      AND (s.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                           OR pg_catalog.pg_has_role($2, s.role::pg_catalog.oid, 'USAGE')))
  )sql",
                         {TEXTOID, OIDOID});
  EndpointFacts facts;
  pg_call([&] { read_endpoint(endpoint, facts); });
  if (!facts.exists) return facts;
  facts.may_send =
      privileged ||
      run_as_owner(owner, right, {endpoint, ObjectIdGetDatum(caller)}, Statement::Visibility::kReadOnly).boolean(0, 0);
  return facts;
}

// event_type travels in a request header and is indexed in the DLQ; ordering_key is
// indexed too.
void check_key_text(Datum value, const char* name, bool no_control_characters) {
  struct Measured {
    int characters = 0;
    bool control = false;
  } m;
  pg_call([&] {
    text* t = DatumGetTextPP(value);
    const char* data = VARDATA_ANY(t);
    int bytes = VARSIZE_ANY_EXHDR(t);
    m.characters = pg_mbstrlen_with_len(data, bytes);
    if (!no_control_characters) return;
    // Printable ASCII has no control character in any encoding or locale; anything
    // else is left to the regular expression the table's CHECK uses.
    bool printable_ascii = true;
    for (int i = 0; i < bytes && printable_ascii; ++i)
      printable_ascii = static_cast<unsigned char>(data[i]) >= 0x20 && static_cast<unsigned char>(data[i]) < 0x7f;
    if (!printable_ascii)
      m.control = DatumGetBool(
          DirectFunctionCall2Coll(textregexeq, DEFAULT_COLLATION_OID, value, CStringGetTextDatum("[[:cntrl:]]")));
  });
  if (m.control)
    throw SqlError(ERRCODE_INVALID_PARAMETER_VALUE,
                   std::string(name) + " must not contain control characters (CR, LF, ...)");
  if (m.characters < 1 || m.characters > kKeyLengthMax)
    throw SqlError(ERRCODE_INVALID_PARAMETER_VALUE, std::string(name) + " must be 1 to 200 characters long");
}

// Backpressure: are max_pending undelivered messages (the queue holds nothing else)
// already waiting? Counts no more than that (producer/queued_count.hpp).
bool at_max_pending(const std::string& endpoint, int64 max_pending, Oid owner) {
  int64_t queued = 0;
  as_owner(owner, [&] { with_spi([&] { queued = count_queued_rows({endpoint}, max_pending).at(0); }); });
  return queued >= max_pending;
}

// The id of the message of this endpoint and idempotency key still in the queue, or 0.
// A fresh snapshot sees the row of the key that a concurrent transaction committed after
// this statement began (what ON CONFLICT saw).
int64 queued_with_key(Datum endpoint, Datum key, Oid owner) {
  static Statement find(R"sql(
    SELECT m.id FROM outbox.messages m
     WHERE m.endpoint OPERATOR(pg_catalog.=) $1 AND m.idempotency_key OPERATOR(pg_catalog.=) $2
  )sql",
                        {TEXTOID, TEXTOID});
  Rows rows = run_as_owner(owner, find, {endpoint, key});
  return rows.size() == 1 ? rows.int64(0, 0) : 0;
}

namespace {

// One INSERT ... ON CONFLICT DO NOTHING: the new id, or 0 on a conflict.
int64 insert_with_key(FunctionCallInfo fcinfo, const FieldPositions& fields, Datum endpoint,
                      TimestampTz next_attempt_at, Oid owner) {
  static Statement insert(R"sql(
    INSERT INTO outbox.messages AS m (endpoint, event_type, payload, headers, ordering_key, idempotency_key,
                                      next_attempt_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7)
    ON CONFLICT (endpoint, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING m.id
  )sql",
                          {TEXTOID, TEXTOID, JSONBOID, JSONBOID, TEXTOID, TEXTOID, TIMESTAMPTZOID});
  std::vector<Datum> args{endpoint};
  std::string nulls = " ";
  for (int from : fields) {
    args.push_back(PG_ARGISNULL(from) ? Datum(0) : PG_GETARG_DATUM(from));
    nulls.push_back(PG_ARGISNULL(from) ? 'n' : ' ');
  }
  args.push_back(TimestampTzGetDatum(next_attempt_at));
  nulls.push_back(' ');
  // Run to its end: stopped at the row it returns, the INSERT would never fire its
  // statement triggers, and outbox._note_inserts would not note the row (its key's order,
  // its endpoint's max_pending count).
  Rows rows = run_as_owner(owner, insert, args, Statement::Visibility::kStatement, nulls, 0);
  return rows.size() == 1 ? rows.int64(0, 0) : 0;
}

}  // namespace

KeyedInsert insert_or_find_with_key(FunctionCallInfo fcinfo, const FieldPositions& fields, Datum endpoint,
                                    TimestampTz next_attempt_at, Oid owner, const char* verb) {
  const Datum key = PG_GETARG_DATUM(fields[4]);
  for (int i = 0; i < 3; ++i) {
    const int64 inserted = insert_with_key(fcinfo, fields, endpoint, next_attempt_at, owner);
    if (inserted != 0) return {inserted, inserted};
    const int64 queued = queued_with_key(endpoint, key, owner);
    if (queued != 0) return {queued, 0};
  }
  throw SqlError(ERRCODE_T_R_SERIALIZATION_FAILURE,
                 std::string("could not ") + verb + ": the message with the same idempotency key keeps changing",
                 "Retry the transaction.");
}

void refuse_full(const std::string& endpoint, int64 max_pending) {
  pg_call([&] {
    ereport(ERROR, (errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
                    errmsg("endpoint \"%s\" has reached max_pending (%lld)", endpoint.c_str(),
                           static_cast<long long>(max_pending)),
                    errdetail("The endpoint's undelivered messages (pending or in flight) are at its limit."),
                    errhint("Retry later, check that the endpoint is receiving (outbox.endpoint_stats), or raise "
                            "max_pending with outbox.alter_endpoint().")));
  });
}

}  // namespace pg_outbox::pg::enqueue

using namespace pg_outbox::pg::enqueue;
using pg_outbox::pg::function_owner;
using pg_outbox::pg::pg_call;
using pg_outbox::pg::release_queued;
using pg_outbox::pg::reserve_queued;
using pg_outbox::pg::Room;
using pg_outbox::pg::SqlError;

PG_OUTBOX_FUNCTION(pg_outbox_enqueue) {
  if (PG_ARGISNULL(kEndpoint)) throw SqlError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "endpoint must not be NULL");
  if (PG_ARGISNULL(kPayload))
    throw SqlError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "payload must not be NULL",
                   "Use 'null'::jsonb for a JSON null payload.");
  const int64 payload_size = pg_call([&] { return stored_size(PG_GETARG_DATUM(kPayload)); });
  if (payload_size > pg_outbox::pg::settings.max_payload_size)
    throw SqlError(ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                   pg_outbox::core::payload_too_large(payload_size, pg_outbox::pg::settings.max_payload_size),
                   "Store large documents elsewhere and send a reference to them.");

  const Datum endpoint = PG_GETARG_DATUM(kEndpoint);
  const Oid caller = pg_call([] { return GetUserId(); });
  const Oid owner = pg_outbox::pg::called_function_owner(fcinfo);
  // Superusers and the extension's owner need no send right: decided from the role
  // caches, so that their enqueues skip the lookup of endpoint_senders.
  const bool privileged = caller == owner || pg_call([&] { return superuser_arg(caller); });
  const EndpointFacts facts = endpoint_facts(endpoint, caller, owner, privileged);
  const std::string name = pg_call([&] { return static_cast<const char*>(TextDatumGetCString(endpoint)); });
  if (!facts.exists) throw SqlError(ERRCODE_UNDEFINED_OBJECT, "endpoint \"" + name + "\" does not exist");
  if (!facts.may_send) {
    const char* role = pg_call([&] {
      return static_cast<const char*>(quote_literal_cstr(quote_identifier(GetUserNameFromId(caller, false))));
    });
    const char* quoted_name = pg_call([&] { return static_cast<const char*>(quote_literal_cstr(name.c_str())); });
    throw SqlError(ERRCODE_INSUFFICIENT_PRIVILEGE, "permission denied to send to endpoint \"" + name + "\"",
                   std::string("An operator grants it with outbox.grant_send(") + quoted_name + ", " + role + ").");
  }

  if (facts.cloudevents && PG_ARGISNULL(kEventType))
    throw SqlError(ERRCODE_NULL_VALUE_NOT_ALLOWED,
                   "event_type must not be NULL for endpoint \"" + name + "\": it sends CloudEvents",
                   "The event type is the event's ce-type (docs/delivery.md, CloudEvents).");
  if (!PG_ARGISNULL(kHeaders)) pg_outbox::pg::check_headers(PG_GETARG_DATUM(kHeaders));
  const char* key = nullptr;
  if (!PG_ARGISNULL(kIdempotencyKey)) {
    key = pg_call([&] { return static_cast<const char*>(TextDatumGetCString(PG_GETARG_DATUM(kIdempotencyKey))); });
    pg_outbox::pg::check_idempotency_key(key);
  }
  if (!PG_ARGISNULL(kEventType)) check_key_text(PG_GETARG_DATUM(kEventType), "event_type", true);
  if (!PG_ARGISNULL(kOrderingKey)) check_key_text(PG_GETARG_DATUM(kOrderingKey), "ordering_key", false);
  TimestampTz next_attempt_at = pg_call([] { return GetCurrentTransactionStartTimestamp(); });
  if (!PG_ARGISNULL(kDeliverAt)) {
    const TimestampTz deliver_at = PG_GETARG_TIMESTAMPTZ(kDeliverAt);
    if (TIMESTAMP_IS_NOEND(deliver_at))
      throw SqlError(ERRCODE_INVALID_PARAMETER_VALUE, "deliver_at must not be infinity",
                     "Pause the endpoint to hold its messages back.");
    if (deliver_at > next_attempt_at) next_attempt_at = deliver_at;
  }

  // max_pending from the count kept in shared memory (pg/queued_count.cpp); rows are
  // counted only while the worker has not counted the endpoint yet.
  bool reserved = false;
  if (facts.has_max_pending) {
    const Room room = reserve_queued(name, facts.max_pending, reserved);
    if (room == Room::kFull || (room == Room::kUnknown && at_max_pending(name, facts.max_pending, owner))) {
      if (reserved) release_queued(name);
      // A retried enqueue of a message that is already in is not new work.
      if (key != nullptr) {
        const int64 id = queued_with_key(endpoint, PG_GETARG_DATUM(kIdempotencyKey), owner);
        if (id != 0) return Int64GetDatum(id);
      }
      refuse_full(name, facts.max_pending);
    }
  }

  int64 id = 0;
  int64 inserted = 0;  // 0 when the message with the idempotency key was already in
  bool provisional = false;
  if (key == nullptr) {
    const Inserted row = insert_row(fcinfo, next_attempt_at, owner, facts.ordered);
    id = inserted = row.id;
    provisional = row.provisional;
  } else {
    const KeyedInsert keyed =
        insert_or_find_with_key(fcinfo, {kEventType, kPayload, kHeaders, kOrderingKey, kIdempotencyKey}, endpoint,
                                next_attempt_at, owner, "enqueue");
    id = keyed.id;
    inserted = keyed.inserted;
  }
  // The INSERT statement of the idempotent path noted its row itself (or found the
  // message already queued): the reservation is not needed.
  if (reserved && key != nullptr) release_queued(name);
  // Only the row inserted without a statement is noted here: the idempotent path's INSERT
  // statement noted its row itself (outbox._note_inserts), and a row noted twice was
  // taken for two messages of its key at commit.
  if (inserted != 0 && key == nullptr && facts.ordered && !PG_ARGISNULL(kOrderingKey)) {
    const char* ordering_key =
        pg_call([&] { return static_cast<const char*>(TextDatumGetCString(PG_GETARG_DATUM(kOrderingKey))); });
    pg_outbox::pg::order_at_commit(inserted, name, ordering_key, pg_outbox::pg::inserted_seq(provisional));
  }
  // With the constraints immediate, its commit-time trigger has fired already and left
  // it to be placed now.
  pg_outbox::pg::place_noted_if_asked(owner);
  pg_outbox::pg::wake_at_commit(facts.wake_for);
  return Int64GetDatum(id);
}

PG_OUTBOX_FUNCTION(pg_outbox_payload_size) {
  return pg_call([&] { return Int64GetDatum(stored_size(PG_GETARG_DATUM(0))); });
}
