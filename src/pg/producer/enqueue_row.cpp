// One row into outbox.messages, for outbox.enqueue: straight through the executor (no
// SQL statement, no plan) when the table is as the install script made it, with every
// check of the executor when someone changed it.
#include "pg/producer/enqueue_row.hpp"

extern "C" {
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_trigger.h"
#include "commands/sequence.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "nodes/makefuncs.h"
#include "parser/parse_relation.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
}

#include <cstring>

namespace pg_outbox::pg::enqueue {

namespace {

// Where outbox.messages and its columns are, worked out once per incarnation of the
// table (a DROP and CREATE EXTENSION makes a new one).
struct MessagesTable {
  Oid relid = InvalidOid;
  Oid sequence = InvalidOid;  // of the id identity
  AttrNumber id, endpoint, event_type, payload, headers, ordering_key, attempts, next_attempt_at, created_at;
};

const MessagesTable& messages_table(Relation rel) {
  static MessagesTable table;
  if (table.relid == RelationGetRelid(rel)) return table;
  MessagesTable fresh;
  auto column = [&](const char* name) {
    AttrNumber n = attnameAttNum(rel, name, false);
    if (n == InvalidAttrNumber) elog(ERROR, "pg_outbox: outbox.messages has no column \"%s\"", name);
    return n;
  };
  fresh.id = column("id");
  fresh.endpoint = column("endpoint");
  fresh.event_type = column("event_type");
  fresh.payload = column("payload");
  fresh.headers = column("headers");
  fresh.ordering_key = column("ordering_key");
  fresh.attempts = column("attempts");
  fresh.next_attempt_at = column("next_attempt_at");
  fresh.created_at = column("created_at");
  fresh.sequence = getIdentitySequence(RelationGetRelid(rel), fresh.id, false);
  fresh.relid = RelationGetRelid(rel);
  table = fresh;
  return table;
}

// outbox.messages as the install script made it: its CHECK constraints (on event_type,
// ordering_key, idempotency_key and next_attempt_at, which enqueue checks itself before
// it inserts, and on ordering_seq, which it never sets), no row trigger but the commit
// order's, no generated column. A table someone changed gets the executor's every
// check instead.
constexpr int kInstalledChecks = 5;
constexpr const char* kOrderTrigger = "messages_order_at_commit";
bool table_as_installed(Relation rel) {
  const TupleConstr* constr = rel->rd_att->constr;
  const TriggerDesc* triggers = rel->trigdesc;
  if (constr == nullptr || constr->num_check != kInstalledChecks || constr->has_generated_stored) return false;
  if (triggers == nullptr) return true;
  if (triggers->trig_insert_before_row || triggers->trig_insert_instead_row) return false;
  for (int i = 0; i < triggers->numtriggers; ++i) {
    const Trigger& t = triggers->triggers[i];
    if (TRIGGER_FOR_ROW(t.tgtype) && TRIGGER_FOR_INSERT(t.tgtype) && strcmp(t.tgname, kOrderTrigger) != 0) return false;
  }
  return true;
}

// One row into outbox.messages, through the executor: its indexes, any row trigger;
// the columns not set here are NULL (last_error and the like) or set here to their
// defaults (attempts, created_at).
}  // namespace

int64 insert_row(FunctionCallInfo fcinfo, TimestampTz next_attempt_at, Oid owner, bool ordered) {
  Oid relid = get_relname_relid("messages", get_namespace_oid("outbox", false));
  if (!OidIsValid(relid)) ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE), errmsg("outbox.messages does not exist")));
  Relation rel = table_open(relid, RowExclusiveLock);
  const MessagesTable& table = messages_table(rel);

  EState* estate = CreateExecutorState();
  RangeTblEntry* rte = makeNode(RangeTblEntry);
  rte->rtekind = RTE_RELATION;
  rte->relid = relid;
  rte->relkind = rel->rd_rel->relkind;
  rte->rellockmode = RowExclusiveLock;
  ExecInitRangeTable(estate, list_make1(rte));
  ResultRelInfo* result = makeNode(ResultRelInfo);
  InitResultRelInfo(result, rel, 1, nullptr, 0);
  // Listed, so that ExecCloseResultRelations closes its indexes and whatever an AFTER
  // ROW trigger opened.
  estate->es_opened_result_relations = lappend(estate->es_opened_result_relations, result);
  estate->es_output_cid = GetCurrentCommandId(true);
  ExecOpenIndices(result, false);

  TupleTableSlot* slot = ExecInitExtraTupleSlot(estate, RelationGetDescr(rel), &TTSOpsVirtual);
  ExecClearTuple(slot);
  for (int i = 0; i < slot->tts_tupleDescriptor->natts; ++i) slot->tts_isnull[i] = true;
  int64 id = nextval_internal(table.sequence, false);
  auto set = [&](AttrNumber column, Datum value) {
    slot->tts_values[column - 1] = value;
    slot->tts_isnull[column - 1] = false;
  };
  auto set_argument = [&](AttrNumber column, int argument) {
    if (!PG_ARGISNULL(argument)) set(column, PG_GETARG_DATUM(argument));
  };
  set(table.id, Int64GetDatum(id));
  set_argument(table.endpoint, kEndpoint);
  set_argument(table.event_type, kEventType);
  set_argument(table.payload, kPayload);
  set_argument(table.headers, kHeaders);
  set_argument(table.ordering_key, kOrderingKey);
  set(table.attempts, Int32GetDatum(0));
  set(table.next_attempt_at, TimestampTzGetDatum(next_attempt_at));
  set(table.created_at, TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()));
  ExecStoreVirtualTuple(slot);

  if (table_as_installed(rel)) {
    // The CHECK constraints test what enqueue has just checked, and building their
    // expressions is most of an insert's cost: the row goes straight in. Nothing in
    // it resolves a name or runs code of someone else's.
    simple_table_tuple_insert(rel, slot);
    if (result->ri_NumIndices > 0) list_free(ExecInsertIndexTuples(result, slot, estate, false, false, nullptr, NIL));
    // A message of an ordered endpoint with a key takes its place in the key's order
    // at commit: the commit order trigger's event (deferred) is queued as the
    // executor would queue it.
    if (ordered && !PG_ARGISNULL(kOrderingKey)) {
      AfterTriggerBeginQuery();
      ExecARInsertTriggers(estate, result, slot, NIL, nullptr);
      AfterTriggerEndQuery(estate);
    }
  } else {
    // Constraints and triggers of someone else's making: every check of the executor,
    // run as the owner with a safe search_path.
    as_owner(owner, [&] {
      AfterTriggerBeginQuery();
      ExecSimpleRelationInsert(result, estate, slot);
      AfterTriggerEndQuery(estate);
    });
  }

  ExecCloseResultRelations(estate);
  ExecResetTupleTable(estate->es_tupleTable, false);
  FreeExecutorState(estate);
  table_close(rel, NoLock);
  // The row is visible to what this statement does next (another enqueue's max_pending
  // count, say), as after each statement of the PL/pgSQL function this replaced.
  CommandCounterIncrement();
  return id;
}

}  // namespace pg_outbox::pg::enqueue
