// An index kept out of one statement's plans, whatever the statistics say.
//
// The planner weighs every index whose predicate the query implies. When two answer
// the same probe, it chooses between them by their estimated costs, and an ANALYZE that
// counted no committed row in a table with pages in use (a drained queue, or one a
// producer's open transaction is filling) leaves little in those estimates but each
// index's size: the smaller index wins, even when it can use only part of the probe's
// conditions. A generic plan made after such an ANALYZE keeps that choice until the
// next invalidation. A statement that must use one index gets the other hidden from the
// planner while it is planned (Statement, spi.hpp, plans inside its run).
#pragma once

namespace pg_outbox::pg {

struct IndexName {
  const char* schema;
  const char* name;
};

// Installs the planner hook that hides the index (get_relation_info_hook, after any hook
// loaded before). From _PG_init, in every backend: a statement hiding an index may run
// in any of them.
void register_hidden_index_hook();

// While it lives, plans made in this process leave the index out; the index hidden
// before (if any) comes back when it ends.
class HiddenIndex {
 public:
  explicit HiddenIndex(const IndexName* index);
  ~HiddenIndex();
  HiddenIndex(const HiddenIndex&) = delete;
  HiddenIndex& operator=(const HiddenIndex&) = delete;

 private:
  const IndexName* previous_;
};

}  // namespace pg_outbox::pg
