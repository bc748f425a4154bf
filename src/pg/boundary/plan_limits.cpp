#include "pg/boundary/plan_limits.hpp"

#include "pg/boundary/postgres.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "nodes/pathnodes.h"
#include "optimizer/optimizer.h"
#include "optimizer/plancat.h"
#include "optimizer/planner.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
}

#include <cstring>

namespace pg_outbox::pg {

namespace {

planner_hook_type previous_planner = nullptr;
get_relation_info_hook_type previous_relation_info = nullptr;
// While a LimitedPlans lives: its statement's text and limits.
const char* limited_sql = nullptr;
const PlanLimits* limited_by = nullptr;
// While that statement's text is planned: its limits.
const PlanLimits* planning_limits = nullptr;

// The hooks run inside PostgreSQL (an ERROR leaves through the planner's own handling):
// PostgreSQL calls only, nothing here needs a destructor. After an ERROR in planning,
// planning_limits may stay set: every plan sets it again at its start, and the
// LimitedPlans that ends clears it; the settings changed for a plan are restored by the
// transaction's (or subtransaction's) abort, as a function's SET clause is.

// The scan and join methods of a TID scan joined by hash on, whatever the server's
// settings say, the others off: their paths are still made, at a cost no estimate can
// beat (disable_cost), so a plan is found whatever the query.
void set_tid_scan_hash_join() {
  static const char* const settings[][2] = {{"enable_tidscan", "on"},
                                            {"enable_hashjoin", "on"},
                                            {"enable_seqscan", "off"},
                                            {"enable_nestloop", "off"},
                                            {"enable_mergejoin", "off"}};
  for (const auto& setting : settings)
    (void)set_config_option(setting[0], setting[1], PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
}

// Every plan: the limited statement is recognised by its text; a statement planned
// inside its planning (a function's) is judged by its own.
PlannedStmt* plan(Query* parse, const char* query_string, int options, ParamListInfo params) {
  const PlanLimits* outer = planning_limits;
  planning_limits = limited_sql != nullptr && query_string != nullptr && strcmp(query_string, limited_sql) == 0
                        ? limited_by
                        : nullptr;
  int settings_level = 0;
  if (planning_limits != nullptr && planning_limits->tid_scan_hash_join) {
    settings_level = NewGUCNestLevel();
    set_tid_scan_hash_join();
  }
  PlannedStmt* result = previous_planner != nullptr ? previous_planner(parse, query_string, options, params)
                                                    : standard_planner(parse, query_string, options, params);
  if (settings_level != 0) AtEOXact_GUC(true, settings_level);
  planning_limits = outer;
  return result;
}

// Each table planned, once its indexes are listed. Names are looked up only while a
// statement hiding one is planned: rarely.
void leave_out_hidden(PlannerInfo* root, Oid relation, bool inherited, RelOptInfo* rel) {
  if (previous_relation_info != nullptr) previous_relation_info(root, relation, inherited, rel);
  if (planning_limits == nullptr || !planning_limits->hidden_index) return;
  const IndexName& hidden = *planning_limits->hidden_index;
  const Oid schema = get_namespace_oid(hidden.schema, true);
  for (int i = list_length(rel->indexlist) - 1; i >= 0; --i) {
    const Oid index = list_nth_node(IndexOptInfo, rel->indexlist, i)->indexoid;
    const char* name = get_rel_name(index);
    if (name != nullptr && strcmp(name, hidden.name) == 0 && get_rel_namespace(index) == schema)
      rel->indexlist = list_delete_nth_cell(rel->indexlist, i);
  }
}

}  // namespace

void register_plan_limits_hooks() {
  previous_planner = planner_hook;
  planner_hook = plan;
  previous_relation_info = get_relation_info_hook;
  get_relation_info_hook = leave_out_hidden;
}

LimitedPlans::LimitedPlans(const char* sql, const PlanLimits* limits)
    : previous_sql_(limited_sql), previous_limits_(limited_by) {
  limited_sql = limits != nullptr ? sql : nullptr;
  limited_by = limits;
}

LimitedPlans::~LimitedPlans() {
  limited_sql = previous_sql_;
  limited_by = previous_limits_;
  planning_limits = nullptr;
}

}  // namespace pg_outbox::pg
