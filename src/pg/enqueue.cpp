// outbox.enqueue(): the producer's entry point. It is not SECURITY DEFINER, so that it
// sees the role that really calls it (GetUserId: SET ROLE, and callers inside other
// SECURITY DEFINER functions, included). It passes that role to outbox._enqueue(),
// which checks the send right and writes the message, and runs it as the function's
// owner (the extension's owner) exactly as a SECURITY DEFINER call would: only this
// function can name the caller, and no producer can execute _enqueue() itself.
#include "pg/boundary.hpp"
#include "pg/settings.hpp"

extern "C" {
#include "access/detoast.h"
#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/syscache.h"
}

namespace {

constexpr int kArguments = 7;  // outbox.enqueue's own arguments; _enqueue adds two (below)

Oid function_owner(Oid function) {
  HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(function));
  if (!HeapTupleIsValid(tuple)) elog(ERROR, "cache lookup failed for function %u", function);
  Oid owner = reinterpret_cast<Form_pg_proc>(GETSTRUCT(tuple))->proowner;
  ReleaseSysCache(tuple);
  return owner;
}

// The size of a stored value uncompressed, from its header alone (never detoasted).
int64 stored_size(Datum value) { return static_cast<int64>(toast_raw_datum_size(value)) - VARHDRSZ; }

// Runs outbox._enqueue() with the caller's arguments and identity; all of it inside one
// pg_call, since it is PostgreSQL code from start to end. An ERROR leaves through the
// transaction's abort, which also restores the user the switch below changed.
Datum enqueue_as_owner(FunctionCallInfo fcinfo) {
  static SPIPlanPtr plan = nullptr;
  if (!PG_ARGISNULL(1) && stored_size(PG_GETARG_DATUM(1)) > pg_outbox::pg::settings.max_payload_size)
    ereport(ERROR,
            (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
             errmsg("payload of %lld bytes exceeds pg_outbox.max_payload_size (%d bytes)",
                    static_cast<long long>(stored_size(PG_GETARG_DATUM(1))), pg_outbox::pg::settings.max_payload_size),
             errhint("Store large documents elsewhere and send a reference to them.")));
  Oid caller = GetUserId();
  Oid owner = function_owner(fcinfo->flinfo->fn_oid);
  // Superusers and the extension's owner need no send right: decided here, from the
  // role caches, so that their enqueues skip the lookup of endpoint_senders.
  bool privileged = caller == owner || superuser_arg(caller);
  Oid saved_user;
  int saved_context;
  GetUserIdAndSecContext(&saved_user, &saved_context);
  SetUserIdAndSecContext(owner, saved_context | SECURITY_LOCAL_USERID_CHANGE);

  if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "pg_outbox: SPI_connect failed");
  if (plan == nullptr) {
    Oid types[kArguments + 2] = {TEXTOID, JSONBOID,       TEXTOID,    JSONBOID, TEXTOID,
                                 TEXTOID, TIMESTAMPTZOID, REGROLEOID, BOOLOID};
    SPIPlanPtr prepared =
        SPI_prepare("SELECT outbox._enqueue($1, $2, $3, $4, $5, $6, $7, $8, $9)", kArguments + 2, types);
    if (prepared == nullptr) elog(ERROR, "pg_outbox: preparing enqueue failed: %s", SPI_result_code_string(SPI_result));
    if (SPI_keepplan(prepared) != 0) elog(ERROR, "pg_outbox: keeping the enqueue plan failed");
    plan = prepared;
  }
  Datum values[kArguments + 2];
  char nulls[kArguments + 2];
  for (int i = 0; i < kArguments; ++i) {
    values[i] = PG_ARGISNULL(i) ? Datum(0) : PG_GETARG_DATUM(i);
    nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
  }
  values[kArguments] = ObjectIdGetDatum(caller);
  values[kArguments + 1] = BoolGetDatum(privileged);
  nulls[kArguments] = nulls[kArguments + 1] = ' ';
  int rc = SPI_execute_plan(plan, values, nulls, false, 1);
  if (rc != SPI_OK_SELECT || SPI_processed != 1) elog(ERROR, "pg_outbox: enqueue returned no row");
  bool isnull = false;
  Datum id = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
  int64 message_id = isnull ? 0 : DatumGetInt64(id);  // bigint is passed by value
  SPI_finish();

  SetUserIdAndSecContext(saved_user, saved_context);
  if (isnull) elog(ERROR, "pg_outbox: enqueue returned NULL");
  return Int64GetDatum(message_id);
}

}  // namespace

PG_OUTBOX_FUNCTION(pg_outbox_enqueue) {
  return pg_outbox::pg::pg_call([&] { return enqueue_as_owner(fcinfo); });
}

PG_OUTBOX_FUNCTION(pg_outbox_payload_size) {
  return pg_outbox::pg::pg_call([&] { return Int64GetDatum(stored_size(PG_GETARG_DATUM(0))); });
}
