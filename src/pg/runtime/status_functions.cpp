// outbox.worker_status(), outbox._delivery_counters() and outbox._queued_counts(): the
// shared-memory state of this database's worker as SQL rows. Copied under the slot's lock (shared),
// turned into tuples after releasing it.
#include "pg/boundary/boundary.hpp"
#include "pg/runtime/settings.hpp"
#include "pg/runtime/shared_state.hpp"

extern "C" {
#include "access/htup_details.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

#include <cstring>

namespace {

using pg_outbox::pg::DatabaseSlot;
using pg_outbox::pg::shared_state;

// Why no worker serves this database: the launcher's note, the restriction, or that
// none runs (yet).
void explain_absence(DatabaseSlot* copy) {
  const char* restriction = pg_outbox::pg::settings.database;
  LWLockAcquire(shared_state->launcher.lock, LW_SHARED);
  for (const auto& note : shared_state->launcher.not_served)
    if (note.database_oid == MyDatabaseId) snprintf(copy->state, sizeof copy->state, "not served: %s", note.reason);
  bool launcher_runs = shared_state->launcher.launcher_pid != 0;
  LWLockRelease(shared_state->launcher.lock);
  if (copy->state[0] != '\0') return;
  if (restriction != nullptr && restriction[0] != '\0')
    snprintf(copy->state, sizeof copy->state, "not served: pg_outbox.database is \"%s\"", restriction);
  else
    strlcpy(copy->state, launcher_runs ? "not running" : "not running (no launcher)", sizeof copy->state);
}

// A copy of this database's slot, taken under its lock in shared mode; a
// blank one (with the reason in state) when no worker serves this database.
// Heap-allocated with palloc: a slot is large and plain data.
DatabaseSlot* copy_slot() {
  auto* copy = static_cast<DatabaseSlot*>(palloc0(sizeof(DatabaseSlot)));
  DatabaseSlot* slot = pg_outbox::pg::slot_of_database(MyDatabaseId);
  if (slot != nullptr) {
    LWLockAcquire(slot->lock, LW_SHARED);
    memcpy(copy, slot, sizeof(DatabaseSlot));
    LWLockRelease(slot->lock);
  }
  if (slot == nullptr || copy->database_oid != MyDatabaseId) {  // none, or reassigned meanwhile
    memset(copy, 0, sizeof(DatabaseSlot));
    explain_absence(copy);
  }
  if (copy->database[0] == '\0') strlcpy(copy->database, get_database_name(MyDatabaseId), sizeof copy->database);
  return copy;
}

void require_shared_state() {
  if (shared_state == nullptr)
    throw pg_outbox::pg::SqlError(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                                  "pg_outbox is not loaded through shared_preload_libraries",
                                  "Add pg_outbox to shared_preload_libraries and restart the server.");
}

}  // namespace

PG_OUTBOX_FUNCTION(pg_outbox_worker_status) {
  require_shared_state();
  return pg_outbox::pg::pg_call([&] {
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
      elog(ERROR, "worker_status must return a record");
    desc = BlessTupleDesc(desc);
    DatabaseSlot* s = copy_slot();
    // The columns this version knows, in declaration order. A database still on an
    // older version of the extension declares a prefix of them: fill what it asks for.
    constexpr int kColumns = 10;
    if (desc->natts > kColumns)
      elog(ERROR, "worker_status declares %d columns, this library knows %d", desc->natts, kColumns);
    Datum values[kColumns];
    bool nulls[kColumns] = {false};
    bool running = s->worker_pid != 0;
    values[0] = Int32GetDatum(s->worker_pid);
    nulls[0] = !running;
    values[1] = CStringGetTextDatum(s->database);
    nulls[1] = s->database[0] == '\0';
    values[2] = CStringGetTextDatum(s->state);
    values[3] = TimestampTzGetDatum(s->started_at);
    nulls[3] = s->started_at == 0;
    values[4] = TimestampTzGetDatum(s->last_loop_at);
    nulls[4] = s->last_loop_at == 0;
    values[5] = Int32GetDatum(s->in_flight);
    values[6] = Int64GetDatum(static_cast<int64>(s->sent));
    values[7] = Int64GetDatum(static_cast<int64>(s->retried));
    values[8] = Int64GetDatum(static_cast<int64>(s->dead_lettered));
    values[9] = TimestampTzGetDatum(s->config_loaded_at);
    nulls[9] = s->config_loaded_at == 0;
    return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls));
  });
}

PG_OUTBOX_FUNCTION(pg_outbox_delivery_counters) {
  require_shared_state();
  pg_outbox::pg::pg_call([&] {
    InitMaterializedSRF(fcinfo, 0);
    auto* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    DatabaseSlot* s = copy_slot();
    static const char* const kResults[] = {"sent", "retry", "dead"};
    for (int i = 0; i < s->counted_endpoints && i < pg_outbox::pg::kCountedEndpoints; ++i) {
      const auto& ep = s->endpoints[i];
      const uint64 counts[] = {ep.sent, ep.retried, ep.dead};
      for (int r = 0; r < 3; ++r) {
        Datum values[3] = {CStringGetTextDatum(ep.name), CStringGetTextDatum(kResults[r]),
                           Int64GetDatum(static_cast<int64>(counts[r]))};
        bool nulls[3] = {false, false, false};
        tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
      }
    }
  });
  return (Datum)0;
}

// max_pending's counts as the worker keeps them (pg/queued_count.cpp), for tests and for
// an operator who wonders why an endpoint refuses.
PG_OUTBOX_FUNCTION(pg_outbox_queued_counts) {
  require_shared_state();
  pg_outbox::pg::pg_call([&] {
    InitMaterializedSRF(fcinfo, 0);
    auto* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    DatabaseSlot* s = copy_slot();
    for (const auto& q : s->queued) {
      if (q.name[0] == '\0') continue;
      Datum values[4] = {CStringGetTextDatum(q.name), BoolGetDatum(q.counted), Int64GetDatum(q.committed),
                         Int64GetDatum(q.reserved)};
      bool nulls[4] = {false, false, false, false};
      tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    }
  });
  return (Datum)0;
}
