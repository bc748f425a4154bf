// A restore's time partitions take the place of the worker's empty ones. pg_dump writes
// each partition of outbox.history and outbox.attempts as CREATE TABLE outbox.<name>
// (...), then ALTER TABLE ONLY <parent> ATTACH PARTITION ... FOR VALUES FROM ('...') TO
// ('...'). The restored database's worker starts at the restore's CREATE EXTENSION and
// may make its own partitions for the same times first (a dump taken a minute ago holds
// the current partition and those ahead): the restore then fails on the name or on the
// range. Before such a statement runs, the worker's partition of that name, or
// overlapping that range, is dropped if it is still empty
// (outbox._restore_creates/_restore_attaches, extension/src/60_time_partitions.sql),
// under the partitions' advisory lock, which the worker's partition making only tries:
// the worker's table is then either committed or not begun.
//
// Only statements that name the extension's schema, with the forms pg_dump writes, and
// only for the table's owner (anyone else's statement fails in PostgreSQL's own checks).
#include "pg/runtime/restored_partitions.hpp"

#include "pg/boundary/boundary.hpp"
#include "pg/boundary/spi.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "nodes/parsenodes.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
}

#include <cstring>
#include <string>

namespace pg_outbox::pg {

namespace {

constexpr const char* kSchema = "outbox";

bool in_outbox_schema(const RangeVar* relation) {
  return relation != nullptr && relation->schemaname != nullptr && strcmp(relation->schemaname, kSchema) == 0;
}

// The extension's tables partitioned by time; each partition is named <table>_<time>.
constexpr const char* kTimePartitioned[] = {"history", "attempts"};

bool is_time_partitioned(const char* relname) {
  for (const char* table : kTimePartitioned)
    if (strcmp(relname, table) == 0) return true;
  return false;
}

bool is_partition_name(const char* relname) {
  for (const char* table : kTimePartitioned) {
    const size_t length = strlen(table);
    if (strncmp(relname, table, length) == 0 && relname[length] == '_') return true;
  }
  return false;
}

// A range bound as pg_dump writes it: one quoted literal.
const char* literal_bound(List* datums) {
  if (list_length(datums) != 1 || !IsA(linitial(datums), A_Const)) return nullptr;
  auto* constant = castNode(A_Const, linitial(datums));
  if (constant->isnull || !IsA(&constant->val, String)) return nullptr;
  return strVal(&constant->val);
}

// The ATTACH PARTITION command of an ALTER TABLE, if it has the form pg_dump writes.
const PartitionBoundSpec* attached_range(const AlterTableStmt* alter) {
  ListCell* cell;
  foreach (cell, alter->cmds) {
    auto* command = static_cast<AlterTableCmd*>(lfirst(cell));
    if (command->subtype != AT_AttachPartition) continue;
    auto* bound = castNode(PartitionCmd, command->def)->bound;
    if (bound == nullptr || bound->is_default || bound->strategy != PARTITION_STRATEGY_RANGE) return nullptr;
    if (literal_bound(bound->lowerdatums) == nullptr || literal_bound(bound->upperdatums) == nullptr) return nullptr;
    return bound;
  }
  return nullptr;
}

// The relation's oid if it exists and the current user owns it, else InvalidOid.
Oid owned_relation(RangeVar* relation) {
  return pg_call([&] {
    if (!OidIsValid(get_extension_oid("pg_outbox", true))) return InvalidOid;
    Oid relid = RangeVarGetRelid(relation, NoLock, true);
    return OidIsValid(relid) && pg_class_ownercheck(relid, GetUserId()) ? relid : InvalidOid;
  });
}

// The partitions' advisory lock (extension/src/60_time_partitions.sql): held until this
// statement's transaction ends, it makes a worker that is creating partitions right now
// finish first (its table is then seen here), or leave them to its next round.
constexpr int32 kPartitionsLockSpace = 1868724336;

// Takes that lock if the extension is there; returns whether it is.
bool lock_partitions() {
  return pg_call([] {
    if (!OidIsValid(get_extension_oid("pg_outbox", true))) return false;
    DirectFunctionCall2(pg_advisory_xact_lock_int4, Int32GetDatum(kPartitionsLockSpace), Int32GetDatum(0));
    return true;
  });
}

void before_create(CreateStmt* create) {
  // pg_dump's form: a plain table, attached later; a name that is taken (else there is
  // nothing to give way), without IF NOT EXISTS (which would not fail).
  if (!in_outbox_schema(create->relation) || create->partbound != nullptr || create->inhRelations != NIL ||
      create->if_not_exists || !is_partition_name(create->relation->relname))
    return;
  // Before looking whether the name is taken: the worker's CREATE TABLE of the same name
  // may be under way, not yet visible, and this one would then fail on the catalog's
  // unique index once it commits.
  if (!lock_partitions()) return;
  if (!OidIsValid(owned_relation(create->relation))) return;
  static Statement restore_creates("SELECT outbox._restore_creates($1)", {TEXTOID});
  const std::string name = create->relation->relname;
  with_spi([&] { restore_creates.run({text_datum(name)}); });
}

void before_alter(AlterTableStmt* alter) {
  if (!in_outbox_schema(alter->relation) || !is_time_partitioned(alter->relation->relname)) return;
  const PartitionBoundSpec* bound = attached_range(alter);
  if (bound == nullptr) return;
  // As for a CREATE TABLE: the worker may be making a partition of that range right now.
  if (!lock_partitions()) return;
  Oid parent = owned_relation(alter->relation);
  if (!OidIsValid(parent)) return;
  static Statement restore_attaches("SELECT outbox._restore_attaches($1, $2::timestamptz, $3::timestamptz)",
                                    {OIDOID, TEXTOID, TEXTOID});
  const std::string from = literal_bound(bound->lowerdatums);
  const std::string to = literal_bound(bound->upperdatums);
  with_spi([&] { restore_attaches.run({ObjectIdGetDatum(parent), text_datum(from), text_datum(to)}); });
}

}  // namespace

void make_room_for_restored_partition(Node* stmt) {
  if (!IsA(stmt, CreateStmt) && !IsA(stmt, AlterTableStmt)) return;  // the common case, no C++ entered
  invoke_cpp([stmt] {
    if (IsA(stmt, CreateStmt))
      before_create(castNode(CreateStmt, stmt));
    else
      before_alter(castNode(AlterTableStmt, stmt));
    return Datum{0};
  });
}

}  // namespace pg_outbox::pg
