#include "pg/boundary/hidden_index.hpp"

#include "pg/boundary/postgres.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "nodes/pathnodes.h"
#include "optimizer/plancat.h"
#include "utils/lsyscache.h"
}

#include <cstring>

namespace pg_outbox::pg {

namespace {

get_relation_info_hook_type previous_hook = nullptr;
const IndexName* hidden = nullptr;  // while a HiddenIndex lives

// Called by the planner for each table it plans a scan of, once the table's indexes are
// listed. Runs inside PostgreSQL (an ERROR leaves through the planner's own handling):
// PostgreSQL calls only, nothing here needs a destructor. Names are looked up only while
// an index is hidden, which is while a statement that hides one is planned: rarely.
void leave_out_hidden(PlannerInfo* root, Oid relation, bool inherited, RelOptInfo* rel) {
  if (previous_hook != nullptr) previous_hook(root, relation, inherited, rel);
  if (hidden == nullptr) return;
  const Oid schema = get_namespace_oid(hidden->schema, true);
  for (int i = list_length(rel->indexlist) - 1; i >= 0; --i) {
    const Oid index = list_nth_node(IndexOptInfo, rel->indexlist, i)->indexoid;
    const char* name = get_rel_name(index);
    if (name != nullptr && strcmp(name, hidden->name) == 0 && get_rel_namespace(index) == schema)
      rel->indexlist = list_delete_nth_cell(rel->indexlist, i);
  }
}

}  // namespace

void register_hidden_index_hook() {
  previous_hook = get_relation_info_hook;
  get_relation_info_hook = leave_out_hidden;
}

HiddenIndex::HiddenIndex(const IndexName* index) : previous_(hidden) { hidden = index; }

HiddenIndex::~HiddenIndex() { hidden = previous_; }

}  // namespace pg_outbox::pg
