// An index kept out of one statement's plans, whatever the statistics say.
//
// The planner weighs every index whose predicate the query implies. When two answer
// the same probe, it chooses between them by their estimated costs, and an ANALYZE that
// counted no committed row in a table with pages in use (a drained queue, or one a
// producer's open transaction is filling) leaves little in those estimates but each
// index's size: the smaller index wins, even when it can use only part of the probe's
// conditions, or a whole index read in order beats a join's cheaper inner scans. A
// generic plan made after such an ANALYZE keeps that choice until the next
// invalidation. A statement that must not use an index has it hidden from the planner
// while its own text is planned (Statement, spi.hpp, plans inside its run); statements
// planned meanwhile inside it (a trigger's) see every index.
#pragma once

namespace pg_outbox::pg {

struct IndexName {
  const char* schema;
  const char* name;
};

// Installs the planner hooks that hide the index (planner_hook and
// get_relation_info_hook, after any loaded before). From _PG_init, in every backend: a
// statement hiding an index may run in any of them.
void register_hidden_index_hooks();

// While it lives, a plan made in this process for the statement text `sql` leaves the
// index out; what was hidden before comes back when it ends.
class HiddenIndex {
 public:
  HiddenIndex(const char* sql, const IndexName* index);
  ~HiddenIndex();
  HiddenIndex(const HiddenIndex&) = delete;
  HiddenIndex& operator=(const HiddenIndex&) = delete;

 private:
  const char* previous_sql_;
  const IndexName* previous_index_;
};

}  // namespace pg_outbox::pg
