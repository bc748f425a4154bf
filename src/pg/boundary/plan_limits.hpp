// What one statement's plans must not use, whatever the statistics say.
//
// A generic plan is made from the estimates of the moment it is planned (on first use,
// and again after each invalidation: an ANALYZE, a VACUUM) and kept until the next. Two
// kinds of choice made there went wrong for the worker's statements:
//  - An index. The planner weighs every index whose predicate the query implies. When two
//    answer the same probe, it chooses between them by their estimated costs, and an
//    ANALYZE that counted no committed row in a table with pages in use (a drained queue,
//    or one a producer's open transaction is filling) leaves little in those estimates
//    but each index's size: the smaller index wins, even when it can use only part of the
//    probe's conditions, or a whole index read in order beats a join's cheaper inner
//    scans. Such an index is hidden from the statement's plans.
//  - A join to a list of places (row versions' tids, read by an earlier statement). A TID
//    scan of each place, rescanned in a nested loop, asks the kernel for the table's size
//    at every rescan (an lseek); one TID scan of every place joined by hash asks once
//    (the DELETE of 500 rows by place: 1.9 ms against 0.8). The planner prices the two
//    within 0.1 % of each other, so the choice would follow whatever else the estimates
//    said that day. Such a statement is planned without nested loops, merge joins or
//    sequential scans (the last also priced out of all the worker's plans,
//    worker.cpp): one TID scan, joined by hash.
// The limits apply while the statement's own text is planned (Statement, spi.hpp, plans
// inside its run); statements planned meanwhile inside it (a trigger's, at its execution)
// have none. The settings are restored when its planning ends, so only a statement
// planned within that planning (a function folded at plan time) would plan under them.
#pragma once

#include <optional>

namespace pg_outbox::pg {

struct IndexName {
  const char* schema;
  const char* name;
};

struct PlanLimits {
  std::optional<IndexName> hidden_index;  // never used: another index must answer
  bool tid_scan_hash_join = false;        // no nested loop, merge join or sequential scan
};

// Installs the planner hooks (planner_hook and get_relation_info_hook, after any loaded
// before). From _PG_init, in every backend: a limited statement may run in any of them.
void register_plan_limits_hooks();

// While it lives, a plan made in this process for the statement text `sql` keeps to the
// limits; the limits set before come back when it ends.
class LimitedPlans {
 public:
  LimitedPlans(const char* sql, const PlanLimits* limits);
  ~LimitedPlans();
  LimitedPlans(const LimitedPlans&) = delete;
  LimitedPlans& operator=(const LimitedPlans&) = delete;

 private:
  const char* previous_sql_;
  const PlanLimits* previous_limits_;
};

}  // namespace pg_outbox::pg
