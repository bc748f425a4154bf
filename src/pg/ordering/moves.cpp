// An operator's move of a message (an UPDATE of its endpoint or ordering_key): the rules
// of docs/delivery.md (Ordering) for it. The message leaves its old key at once (its
// AFTER trigger, ordering.cpp, promotes the key's next one) and is placed in its new key
// at the move's commit by the commit-time placement (ordering.cpp), as an inserted row
// is. A message being delivered does not move.
#include "pg/boundary/boundary.hpp"
#include "pg/boundary/spi.hpp"
#include "pg/boundary/trigger_data.hpp"
#include "pg/ordering/ordering.hpp"
#include "pg/ordering/successors.hpp"

extern "C" {
#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "utils/errcodes.h"
}

#include <optional>
#include <stdexcept>
#include <string>

namespace pg_outbox::pg {

namespace {

// Whether the message is being delivered: in a batch the worker claimed (outbox.claims),
// or held by a pull reader whose visibility has not passed (outbox.holds). Read with a
// fresh snapshot: the mover has locked the row, so no later claim or read takes it.
bool in_flight(int64_t id, const std::string& endpoint) {
  static Statement statement(R"sql(
    SELECT EXISTS (SELECT FROM outbox.claims c WHERE c.message_ids @> ARRAY[$1])
        OR EXISTS (SELECT FROM outbox.holds h
                    WHERE h.endpoint = $2 AND h.held_until > clock_timestamp() AND h.message_ids @> ARRAY[$1])
  )sql",
                             {INT8OID, TEXTOID});
  return statement.run_latest({Int64GetDatum(id), text_datum(endpoint)}).boolean(0, 0);
}

}  // namespace

}  // namespace pg_outbox::pg

// BEFORE UPDATE OF endpoint, ordering_key that moves a message: it keeps no place in
// the key it left. In its new key it is placed at the move's commit, as an inserted row
// is (the deferred messages_moved_at_commit trigger): behind the key's messages if it
// has any, else its head. Until then it is a head only to its own transaction.
PG_OUTBOX_FUNCTION(pg_outbox_moved_message) {
  using namespace pg_outbox::pg;
  TriggerData* trigger = trigger_data(fcinfo, "outbox._moved_message()");
  // A keyed message reorders the endpoint it leaves, and the one it goes to.
  char* from = nullptr;
  char* to = nullptr;
  char* new_key = nullptr;
  bool keyed = false;
  int64 id = 0;
  std::optional<int64_t> old_seq;
  pg_call([&] {
    TupleDesc desc = RelationGetDescr(trigger->tg_relation);
    const int key = SPI_fnumber(desc, "ordering_key");
    bool old_unkeyed = true, isnull = false;
    (void)SPI_getbinval(trigger->tg_trigtuple, desc, key, &old_unkeyed);
    new_key = SPI_getvalue(trigger->tg_newtuple, desc, key);
    keyed = !old_unkeyed || new_key != nullptr;
    from = SPI_getvalue(trigger->tg_trigtuple, desc, SPI_fnumber(desc, "endpoint"));
    to = SPI_getvalue(trigger->tg_newtuple, desc, SPI_fnumber(desc, "endpoint"));
    id = DatumGetInt64(SPI_getbinval(trigger->tg_newtuple, desc, SPI_fnumber(desc, "id"), &isnull));
    Datum seq = SPI_getbinval(trigger->tg_trigtuple, desc, SPI_fnumber(desc, "ordering_seq"), &isnull);
    if (!isnull) old_seq = DatumGetInt64(seq);
  });
  if (from == nullptr || to == nullptr) throw std::logic_error("a message without an endpoint");  // NOT NULL
  if (keyed) {
    const Oid owner = called_function_owner(fcinfo);
    bool delivering = false;
    as_owner(owner, [&] { with_spi([&] { delivering = in_flight(id, from); }); });
    if (delivering)
      throw SqlError(
          ERRCODE_OBJECT_IN_USE,
          "message " + std::to_string(id) + " is being delivered: its endpoint and ordering key cannot change now",
          "Change it once its delivery is settled (outbox.message() shows its state).");
    successors::reordered_at_commit(from);
    successors::reordered_at_commit(to);
  }
  // Noted with the number it had: messages moved together (a whole key) keep their
  // order, its head first.
  if (new_key != nullptr) order_moved_at_commit(id, to, new_key, old_seq);
  HeapTuple moved = pg_call([&] {
    TupleDesc desc = RelationGetDescr(trigger->tg_relation);
    int column = SPI_fnumber(desc, "ordering_seq");
    Datum value = 0;
    bool isnull = true;
    return heap_modify_tuple_by_cols(trigger->tg_newtuple, desc, 1, &column, &value, &isnull);
  });
  return PointerGetDatum(moved);
}
