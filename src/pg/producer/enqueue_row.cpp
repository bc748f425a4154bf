// One row into outbox.messages, for outbox.enqueue: straight through the executor (no
// SQL statement, no plan) when the table is as the install script made it, with every
// check of the executor when someone changed it.
#include "pg/producer/enqueue_row.hpp"

#include "pg/boundary/spi.hpp"
#include "pg/ordering/ordering.hpp"

extern "C" {
#include "access/genam.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_trigger.h"
#include "commands/sequence.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_relation.h"
#include "rewrite/rewriteHandler.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
}

#include <cstring>

namespace pg_outbox::pg::enqueue {

namespace {

// Where outbox.messages and its columns are, and whether its definition lets enqueue
// insert without the executor's checks: worked out once per definition of the table (a
// relcache invalidation of the table, an ALTER TABLE or a new incarnation of the
// extension, makes it again).
struct MessagesTable {
  Oid relid = InvalidOid;
  Oid sequence = InvalidOid;  // of the id identity
  AttrNumber id, endpoint, event_type, payload, headers, ordering_key, idempotency_key, attempts, next_attempt_at,
      created_at, ordering_seq;
  Oid ordering_index = InvalidOid;  // messages_ordering_idx (endpoint, ordering_key, ordering_seq)
  bool as_installed = false;
};

MessagesTable cached;

void forget_table(Datum, Oid relid) {
  if (relid == InvalidOid || relid == cached.relid) cached.relid = InvalidOid;
}

// The columns whose CHECK constraints enqueue makes itself before it inserts (with the
// contract's messages), or never sets (ordering_seq, placed at commit).
bool checked_by_enqueue(Relation rel, AttrNumber column) {
  const char* name = NameStr(TupleDescAttr(RelationGetDescr(rel), column - 1)->attname);
  for (const char* checked : {"event_type", "ordering_key", "idempotency_key", "next_attempt_at", "ordering_seq"})
    if (strcmp(name, checked) == 0) return true;
  return false;
}

// A CHECK constraint enqueue may leave out: it reads only columns enqueue checks itself,
// and carries the name PostgreSQL gives such a constraint when none is written:
// "<table>_<column>_check" for one column, "<table>_check" for several. A constraint
// someone added has another name (the install's names are taken: a new one gets a
// number) or reads other columns.
bool check_made_by_enqueue(Relation rel, const ConstrCheck& check) {
  Bitmapset* columns = nullptr;
  pull_varattnos(static_cast<Node*>(stringToNode(check.ccbin)), 1, &columns);
  AttrNumber last = InvalidAttrNumber;
  for (int member = bms_next_member(columns, -1); member >= 0; member = bms_next_member(columns, member)) {
    last = static_cast<AttrNumber>(member + FirstLowInvalidHeapAttributeNumber);
    if (last <= 0 || !checked_by_enqueue(rel, last)) return false;
  }
  if (last == InvalidAttrNumber) return false;
  char name[NAMEDATALEN * 3];
  if (bms_num_members(columns) == 1)
    snprintf(name, sizeof name, "%s_%s_check", RelationGetRelationName(rel),
             NameStr(TupleDescAttr(RelationGetDescr(rel), last - 1)->attname));
  else
    snprintf(name, sizeof name, "%s_check", RelationGetRelationName(rel));
  return strcmp(check.ccname, name) == 0;
}

// The columns enqueue always gives a value of its own (never NULL).
bool set_by_enqueue(const char* column) {
  for (const char* set : {"id", "endpoint", "payload", "attempts", "next_attempt_at", "created_at"})
    if (strcmp(column, set) == 0) return true;
  return false;
}

// Every other column may be NULL in a row of enqueue's (an argument not given, or a column
// only the worker writes): it must allow NULL and have no default or generated value,
// which only the executor would apply.
bool columns_as_installed(Relation rel) {
  const TupleDesc desc = RelationGetDescr(rel);
  for (int i = 0; i < desc->natts; ++i) {
    const Form_pg_attribute column = TupleDescAttr(desc, i);
    if (column->attisdropped || set_by_enqueue(NameStr(column->attname))) continue;
    if (column->attnotnull || column->atthasdef || column->attgenerated != '\0' || column->attidentity != '\0')
      return false;
  }
  return true;
}

// outbox.messages as the install script made it, read from the catalog: every CHECK
// constraint is one enqueue makes itself, every column enqueue may leave NULL is plain,
// no row trigger but the commit order's. A table someone changed gets the executor's
// every check instead.
constexpr const char* kOrderTrigger = "messages_order_at_commit";
bool table_as_installed(Relation rel) {
  const TupleConstr* constr = rel->rd_att->constr;
  if (constr != nullptr) {
    if (constr->has_generated_stored) return false;
    for (int i = 0; i < constr->num_check; ++i)
      if (!check_made_by_enqueue(rel, constr->check[i])) return false;
  }
  if (!columns_as_installed(rel)) return false;
  const TriggerDesc* triggers = rel->trigdesc;
  if (triggers == nullptr) return true;
  if (triggers->trig_insert_before_row || triggers->trig_insert_instead_row) return false;
  for (int i = 0; i < triggers->numtriggers; ++i) {
    const Trigger& t = triggers->triggers[i];
    if (TRIGGER_FOR_ROW(t.tgtype) && TRIGGER_FOR_INSERT(t.tgtype) && strcmp(t.tgname, kOrderTrigger) != 0) return false;
  }
  return true;
}

const MessagesTable& messages_table(Relation rel) {
  static bool callback_registered = false;
  if (!callback_registered) {
    CacheRegisterRelcacheCallback(forget_table, 0);
    callback_registered = true;
  }
  if (cached.relid == RelationGetRelid(rel)) return cached;
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
  fresh.idempotency_key = column("idempotency_key");
  fresh.attempts = column("attempts");
  fresh.next_attempt_at = column("next_attempt_at");
  fresh.created_at = column("created_at");
  fresh.ordering_seq = column("ordering_seq");
  List* indexes = RelationGetIndexList(rel);
  ListCell* cell;
  foreach (cell, indexes) {
    const char* name = get_rel_name(lfirst_oid(cell));
    if (name != nullptr && strcmp(name, "messages_ordering_idx") == 0) fresh.ordering_index = lfirst_oid(cell);
  }
  list_free(indexes);
  fresh.sequence = getIdentitySequence(RelationGetRelid(rel), fresh.id, false);
  fresh.as_installed = table_as_installed(rel);
  if (!fresh.as_installed)
    ereport(DEBUG1, (errmsg("pg_outbox: outbox.messages was changed; enqueue inserts with the executor's checks")));
  fresh.relid = RelationGetRelid(rel);
  cached = fresh;
  return cached;
}

// What the three steps of an insert share: plain pointers into the executor's state,
// released by the transaction's abort if a step fails.
struct Insert {
  Relation rel = nullptr;
  EState* estate = nullptr;
  ResultRelInfo* result = nullptr;
  TupleTableSlot* slot = nullptr;
  TupleTableSlot* found = nullptr;  // a row of the queue, read by key_has_messages
  const MessagesTable* table = nullptr;
  int64 id = 0;
};

// Opens the table and prepares the executor's state for its rows.
void open(Insert& in) {
  Oid relid = get_relname_relid("messages", get_namespace_oid("outbox", false));
  if (!OidIsValid(relid)) ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE), errmsg("outbox.messages does not exist")));
  in.rel = table_open(relid, RowExclusiveLock);
  in.table = &messages_table(in.rel);

  in.estate = CreateExecutorState();
  RangeTblEntry* rte = makeNode(RangeTblEntry);
  rte->rtekind = RTE_RELATION;
  rte->relid = relid;
  rte->relkind = in.rel->rd_rel->relkind;
  rte->rellockmode = RowExclusiveLock;
  ExecInitRangeTable(in.estate, list_make1(rte));
  in.result = makeNode(ResultRelInfo);
  InitResultRelInfo(in.result, in.rel, 1, nullptr, 0);
  // Listed, so that ExecCloseResultRelations closes its indexes and whatever an AFTER
  // ROW trigger opened.
  in.estate->es_opened_result_relations = lappend(in.estate->es_opened_result_relations, in.result);
  in.estate->es_output_cid = GetCurrentCommandId(true);
  ExecOpenIndices(in.result, false);
  in.slot = ExecInitExtraTupleSlot(in.estate, RelationGetDescr(in.rel), &TTSOpsVirtual);
}

// Builds a row: the columns not set here are NULL (last_error and the like) or set here
// to their defaults (attempts, created_at).
void build(Insert& in, RowValues& row, TimestampTz next_attempt_at) {
  TupleTableSlot* slot = in.slot;
  ExecClearTuple(slot);
  for (int i = 0; i < slot->tts_tupleDescriptor->natts; ++i) slot->tts_isnull[i] = true;
  const MessagesTable& table = *in.table;
  if (row.id == 0) row.id = nextval_internal(table.sequence, false);
  in.id = row.id;
  auto set = [&](AttrNumber column, Datum value) {
    slot->tts_values[column - 1] = value;
    slot->tts_isnull[column - 1] = false;
  };
  auto set_value = [&](AttrNumber column, const NullableDatum& value) {
    if (!value.isnull) set(column, value.value);
  };
  set(table.id, Int64GetDatum(in.id));
  set_value(table.endpoint, row.endpoint);
  set_value(table.event_type, row.event_type);
  set_value(table.payload, row.payload);
  set_value(table.headers, row.headers);
  set_value(table.ordering_key, row.ordering_key);
  set_value(table.idempotency_key, row.idempotency_key);
  set(table.attempts, Int32GetDatum(0));
  set(table.next_attempt_at, TimestampTzGetDatum(next_attempt_at));
  set(table.created_at, TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()));
  if (row.provisional) set(table.ordering_seq, Int64GetDatum(kProvisionalSeq));
  ExecStoreVirtualTuple(slot);
}

// Whether the commit order's trigger fires for this session's rows: not when it is
// disabled, nor under session_replication_role = replica unless it is made to. A row it
// does not place must not wait with a provisional number.
bool commit_order_fires(Relation rel) {
  const TriggerDesc* triggers = rel->trigdesc;
  if (triggers == nullptr) return false;
  for (int i = 0; i < triggers->numtriggers; ++i) {
    const Trigger& t = triggers->triggers[i];
    if (strcmp(t.tgname, kOrderTrigger) != 0) continue;
    if (SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA)
      return t.tgenabled == TRIGGER_FIRES_ON_REPLICA || t.tgenabled == TRIGGER_FIRES_ALWAYS;
    return t.tgenabled == TRIGGER_FIRES_ON_ORIGIN || t.tgenabled == TRIGGER_FIRES_ALWAYS;
  }
  return false;
}

// Whether the row's key has a message this transaction sees now, committed or its own
// (SnapshotSelf: no snapshot taken, and the rows of this statement's earlier calls count):
// then the row will most likely follow at commit, and goes in with a provisional number
// (ordering.hpp, kProvisionalSeq). A guess only: the commit decides, under the key's lock.
// One descent of the ordering index, which stops at the key's first live entry.
bool key_has_messages(Insert& in, const RowValues& row) {
  Relation index = nullptr;
  for (int i = 0; i < in.result->ri_NumIndices && index == nullptr; ++i)
    if (RelationGetRelid(in.result->ri_IndexRelationDescs[i]) == in.table->ordering_index)
      index = in.result->ri_IndexRelationDescs[i];
  // Its first two columns as installed, or no guess (the index is looked for by name).
  const Form_pg_index form = index == nullptr ? nullptr : index->rd_index;
  if (form == nullptr || form->indnkeyatts < 2 || form->indkey.values[0] != in.table->endpoint ||
      form->indkey.values[1] != in.table->ordering_key)
    return false;
  // The index's own collations: the search compares with them.
  ScanKeyData keys[2];
  ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid, index->rd_indcollation[0], F_TEXTEQ,
                         row.endpoint.value);
  ScanKeyEntryInitialize(&keys[1], 0, 2, BTEqualStrategyNumber, InvalidOid, index->rd_indcollation[1], F_TEXTEQ,
                         row.ordering_key.value);
  if (in.found == nullptr) in.found = table_slot_create(in.rel, &in.estate->es_tupleTable);
  IndexScanDesc scan = index_beginscan(in.rel, index, SnapshotSelf, 2, 0);
  index_rescan(scan, keys, 2, nullptr, 0);
  const bool found = index_getnext_slot(scan, ForwardScanDirection, in.found);
  index_endscan(scan);
  ExecClearTuple(in.found);
  return found;
}

// The table as installed: its CHECK constraints test what enqueue has just checked, and
// building their expressions is most of an insert's cost, so the row goes straight in.
// Nothing in it resolves a name or runs code of someone else's.
void insert_directly(Insert& in, bool keyed_in_order) {
  simple_table_tuple_insert(in.rel, in.slot);
  if (in.result->ri_NumIndices > 0)
    list_free(ExecInsertIndexTuples(in.result, in.slot, in.estate, false, false, nullptr, NIL));
  // A message of an ordered endpoint with a key takes its place in the key's order at
  // commit: the commit order trigger's event (deferred) is queued as the executor would.
  if (keyed_in_order) {
    AfterTriggerBeginQuery();
    ExecARInsertTriggers(in.estate, in.result, in.slot, NIL, nullptr);
    AfterTriggerEndQuery(in.estate);
  }
}

// Constraints and triggers of someone else's making: every check of the executor (run
// by the caller as the owner with a safe search_path).
void insert_with_checks(Insert& in) {
  // The defaults of columns someone added (the planner fills them for an INSERT; this row
  // comes without one), evaluated as the statement's other expressions are.
  const TupleDesc desc = RelationGetDescr(in.rel);
  for (int i = 0; i < desc->natts; ++i) {
    const Form_pg_attribute column = TupleDescAttr(desc, i);
    if (column->attisdropped || !column->atthasdef || !in.slot->tts_isnull[i] ||
        set_by_enqueue(NameStr(column->attname)))
      continue;
    Node* fallback = build_column_default(in.rel, i + 1);
    if (fallback == nullptr) continue;
    ExprState* state = ExecPrepareExpr(reinterpret_cast<Expr*>(fallback), in.estate);
    bool isnull = true;
    const Datum value = ExecEvalExprSwitchContext(state, GetPerTupleExprContext(in.estate), &isnull);
    in.slot->tts_values[i] = isnull ? Datum(0) : datumCopy(value, column->attbyval, column->attlen);
    in.slot->tts_isnull[i] = isnull;
  }
  AfterTriggerBeginQuery();
  ExecSimpleRelationInsert(in.result, in.estate, in.slot);
  AfterTriggerEndQuery(in.estate);
}

void close(Insert& in) {
  ExecCloseResultRelations(in.estate);
  ExecResetTupleTable(in.estate->es_tupleTable, false);
  FreeExecutorState(in.estate);
  table_close(in.rel, NoLock);
  // The row is visible to what this statement does next (another enqueue's max_pending
  // count, say), as after each statement of the PL/pgSQL function this replaced.
  CommandCounterIncrement();
}

}  // namespace

void insert_rows(std::vector<RowValues>& rows, TimestampTz next_attempt_at, Oid owner) {
  Insert in;
  pg_call([&] { open(in); });
  for (RowValues& row : rows) {
    const bool keyed_in_order = row.ordered && !row.ordering_key.isnull;
    if (keyed_in_order && in.table->as_installed)
      pg_call([&] { row.provisional = commit_order_fires(in.rel) && key_has_messages(in, row); });
    pg_call([&] { build(in, row, next_attempt_at); });
    if (in.table->as_installed) {
      pg_call([&] { insert_directly(in, keyed_in_order); });
    } else {
      as_owner(owner, [&] { pg_call([&] { insert_with_checks(in); }); });
    }
  }
  pg_call([&] { close(in); });
}

Inserted insert_row(FunctionCallInfo fcinfo, TimestampTz next_attempt_at, Oid owner, bool ordered) {
  auto argument = [&](int n) {
    NullableDatum value;
    value.isnull = PG_ARGISNULL(n);
    value.value = value.isnull ? Datum(0) : PG_GETARG_DATUM(n);
    return value;
  };
  std::vector<RowValues> rows(1);
  RowValues& row = rows[0];
  row.endpoint = argument(kEndpoint);
  row.event_type = argument(kEventType);
  row.payload = argument(kPayload);
  row.headers = argument(kHeaders);
  row.ordering_key = argument(kOrderingKey);
  row.idempotency_key.isnull = true;  // enqueue's keyed messages take the SQL path (enqueue.cpp)
  row.idempotency_key.value = Datum(0);
  row.ordered = ordered;
  insert_rows(rows, next_attempt_at, owner);
  return {row.id, row.provisional};
}

int64 next_message_id() {
  return pg_call([] {
    Oid relid = get_relname_relid("messages", get_namespace_oid("outbox", false));
    if (!OidIsValid(relid))
      ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE), errmsg("outbox.messages does not exist")));
    Relation rel = table_open(relid, RowExclusiveLock);
    const int64 id = nextval_internal(messages_table(rel).sequence, false);
    table_close(rel, NoLock);
    return id;
  });
}

}  // namespace pg_outbox::pg::enqueue
