// outbox.read, outbox.ack and outbox.nack: the consumer's entry points
// (docs/delivery.md, Pull endpoints).
//
// Like outbox.enqueue (producer/enqueue.cpp) they are not SECURITY DEFINER, so that they
// see the role that really calls them (GetUserId: after SET ROLE, or the owner of a
// SECURITY DEFINER function that calls them); its consume right is judged for that role
// (docs/operations.md, Privileges). The work is then done by the SQL functions
// outbox._read, _ack and _nack (extension/src/45_pull_consumers.sql), run as the
// extension's owner (boundary/spi.hpp, as_owner) with the caller's oid: no consumer may
// call them itself, so none can name another role as the caller.
#include "pg/boundary/boundary.hpp"
#include "pg/boundary/spi.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/tuplestore.h"
}

namespace pg_outbox::pg {

namespace {

// Runs `sql` as the owner of the called function, with the call's arguments followed by
// the caller's oid. NULL arguments stay NULL. With a result set (rsinfo), every row
// goes to it; otherwise returns the first column of the one row.
Datum call_as_owner(FunctionCallInfo fcinfo, const char* sql, const Oid* types, int nargs, ReturnSetInfo* rsinfo,
                    bool* isnull) {
  const Oid caller = GetUserId();
  const Oid owner = called_function_owner(fcinfo);
  Datum result = 0;
  bool result_null = true;
  as_owner(owner, [&] {
    with_spi([&] {
      pg_call([&] {
        Datum args[FUNC_MAX_ARGS];
        char nulls[FUNC_MAX_ARGS];
        Oid argtypes[FUNC_MAX_ARGS];
        for (int i = 0; i < nargs; ++i) {
          args[i] = PG_GETARG_DATUM(i);
          nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
          argtypes[i] = types[i];
        }
        args[nargs] = ObjectIdGetDatum(caller);
        nulls[nargs] = ' ';
        argtypes[nargs] = OIDOID;
        int rc = SPI_execute_with_args(sql, nargs + 1, argtypes, args, nulls, false, 0);
        if (rc != SPI_OK_SELECT) elog(ERROR, "pg_outbox: %s failed: %s", sql, SPI_result_code_string(rc));
        if (rsinfo != nullptr) {
          // The tuplestore copies each row into its own (per-query) memory.
          for (uint64 i = 0; i < SPI_processed; ++i) tuplestore_puttuple(rsinfo->setResult, SPI_tuptable->vals[i]);
        } else if (SPI_processed == 1) {
          bool null = true;
          Datum value = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &null);
          // A pass-by-value result (bigint, void): it outlives SPI's memory.
          result = value;
          result_null = null;
        }
      });
    });
  });
  *isnull = result_null;
  return result;
}

}  // namespace

}  // namespace pg_outbox::pg

// outbox.read(endpoint text, max int, visibility interval, wait interval) RETURNS TABLE (...)
PG_OUTBOX_FUNCTION(pg_outbox_read) {
  using namespace pg_outbox::pg;
  static const Oid types[] = {TEXTOID, INT4OID, INTERVALOID, INTERVALOID};
  auto* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
  pg_call([&] { InitMaterializedSRF(fcinfo, 0); });
  bool isnull = true;
  (void)call_as_owner(fcinfo, "SELECT * FROM outbox._read($1, $2, $3, $4, $5)", types, 4, rsinfo, &isnull);
  return static_cast<Datum>(0);
}

// outbox.ack(endpoint text, ids bigint[]) RETURNS bigint
PG_OUTBOX_FUNCTION(pg_outbox_ack) {
  using namespace pg_outbox::pg;
  static const Oid types[] = {TEXTOID, INT8ARRAYOID};
  bool isnull = true;
  Datum acknowledged = call_as_owner(fcinfo, "SELECT outbox._ack($1, $2, $3)", types, 2, nullptr, &isnull);
  if (isnull) PG_RETURN_NULL();
  return acknowledged;
}

// outbox.nack(endpoint text, id bigint, error text, retry_after interval, permanent boolean) RETURNS void
PG_OUTBOX_FUNCTION(pg_outbox_nack) {
  using namespace pg_outbox::pg;
  static const Oid types[] = {TEXTOID, INT8OID, TEXTOID, INTERVALOID, BOOLOID};
  bool isnull = true;
  (void)call_as_owner(fcinfo, "SELECT outbox._nack($1, $2, $3, $4, $5, $6)", types, 5, nullptr, &isnull);
  PG_RETURN_VOID();
}
