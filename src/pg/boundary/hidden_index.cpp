#include "pg/boundary/hidden_index.hpp"

#include "pg/boundary/postgres.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "nodes/pathnodes.h"
#include "optimizer/optimizer.h"
#include "optimizer/plancat.h"
#include "optimizer/planner.h"
#include "utils/lsyscache.h"
}

#include <cstring>

namespace pg_outbox::pg {

namespace {

planner_hook_type previous_planner = nullptr;
get_relation_info_hook_type previous_relation_info = nullptr;
// While a HiddenIndex lives: its statement's text and index.
const char* hiding_sql = nullptr;
const IndexName* hiding_index = nullptr;
// While that statement's text is planned: the index left out.
const IndexName* planning_without = nullptr;

// The hooks run inside PostgreSQL (an ERROR leaves through the planner's own handling):
// PostgreSQL calls only, nothing here needs a destructor. After an ERROR in planning,
// planning_without may stay set: every plan sets it again at its start, and the
// HiddenIndex that ends clears it.

// Every plan: the statement hiding an index is recognised by its text; a statement
// planned inside its planning (a function's) is judged by its own.
PlannedStmt* plan(Query* parse, const char* query_string, int options, ParamListInfo params) {
  const IndexName* outer = planning_without;
  planning_without = hiding_sql != nullptr && query_string != nullptr && strcmp(query_string, hiding_sql) == 0
                         ? hiding_index
                         : nullptr;
  PlannedStmt* result = previous_planner != nullptr ? previous_planner(parse, query_string, options, params)
                                                    : standard_planner(parse, query_string, options, params);
  planning_without = outer;
  return result;
}

// Each table planned, once its indexes are listed. Names are looked up only while the
// statement hiding one is planned: rarely.
void leave_out_hidden(PlannerInfo* root, Oid relation, bool inherited, RelOptInfo* rel) {
  if (previous_relation_info != nullptr) previous_relation_info(root, relation, inherited, rel);
  if (planning_without == nullptr) return;
  const Oid schema = get_namespace_oid(planning_without->schema, true);
  for (int i = list_length(rel->indexlist) - 1; i >= 0; --i) {
    const Oid index = list_nth_node(IndexOptInfo, rel->indexlist, i)->indexoid;
    const char* name = get_rel_name(index);
    if (name != nullptr && strcmp(name, planning_without->name) == 0 && get_rel_namespace(index) == schema)
      rel->indexlist = list_delete_nth_cell(rel->indexlist, i);
  }
}

}  // namespace

void register_hidden_index_hooks() {
  previous_planner = planner_hook;
  planner_hook = plan;
  previous_relation_info = get_relation_info_hook;
  get_relation_info_hook = leave_out_hidden;
}

HiddenIndex::HiddenIndex(const char* sql, const IndexName* index)
    : previous_sql_(hiding_sql), previous_index_(hiding_index) {
  hiding_sql = index != nullptr ? sql : nullptr;
  hiding_index = index;
}

HiddenIndex::~HiddenIndex() {
  hiding_sql = previous_sql_;
  hiding_index = previous_index_;
  planning_without = nullptr;
}

}  // namespace pg_outbox::pg
