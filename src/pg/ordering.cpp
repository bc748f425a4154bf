// Per-key commit order on ordered endpoints (SPEC §3 "Ordering").
//
// A message of an ordered endpoint with an ordering key is, once committed, either its
// key's head (ordering_seq NULL: in the claim index, sent when due) or a follower
// (ordering_seq drawn from outbox.commit_order: outside the claim index, never claimed).
// - At commit, a deferred constraint trigger (outbox._order_at_commit) decides, under the
//   key's advisory lock and with a fresh snapshot: if the key has a head in the queue,
//   the new message follows, numbered by nextval. The lock is held until the commit
//   ends, so the next transaction to decide for the key waits, then sees this one
//   committed and draws a larger number: the numbers of a key are its commit order.
//   Ids are not: they are drawn at INSERT, and the later INSERT may commit first.
// - When a head leaves the queue (sent, dead-lettered, deleted, its key changed), an
//   AFTER trigger (outbox._next_in_order), under the same lock, makes the follower with
//   the lowest number the head, unless the key still has one.
// The worker's claim thus never sees a follower: a blocked key costs it nothing, however
// many messages wait behind the head. The worker takes the locks of the heads it
// settles before it moves them, in the same sorted order as a committing producer.
#include "pg/ordering.hpp"

#include "core/ordering_lock.hpp"
#include "pg/boundary.hpp"
#include "pg/commit_wake.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "utils/builtins.h"
}

#include <algorithm>
#include <stdexcept>
#include <unordered_set>

namespace pg_outbox::pg {

namespace {

struct Entry {
  int64_t id;
  std::string endpoint;
  std::string key;
};

std::vector<Entry> recorded;              // enqueued in this transaction, not yet in order
std::unordered_set<int64_t> ordered_ids;  // this transaction's messages already in order

void forget_at_end(XactEvent event, void*) {
  switch (event) {
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PREPARE:
    case XACT_EVENT_PARALLEL_COMMIT:
    case XACT_EVENT_PARALLEL_ABORT:
      recorded.clear();
      ordered_ids.clear();
      break;
    default:
      break;
  }
}

TriggerData* trigger_data(FunctionCallInfo fcinfo, const char* function) {
  if (!CALLED_AS_TRIGGER(fcinfo))
    throw SqlError(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED, std::string(function) + " must be called as a trigger");
  return reinterpret_cast<TriggerData*>(fcinfo->context);
}

// The id, endpoint and ordering key of the trigger's row (the old row of a DELETE or
// UPDATE), read by column name.
Entry row_of(TriggerData* trigger) {
  int64 id = 0;
  char* endpoint = nullptr;
  char* key = nullptr;
  pg_call([&] {
    TupleDesc desc = RelationGetDescr(trigger->tg_relation);
    HeapTuple tuple = trigger->tg_trigtuple;
    bool isnull = false;
    id = DatumGetInt64(SPI_getbinval(tuple, desc, SPI_fnumber(desc, "id"), &isnull));
    endpoint = SPI_getvalue(tuple, desc, SPI_fnumber(desc, "endpoint"));
    key = SPI_getvalue(tuple, desc, SPI_fnumber(desc, "ordering_key"));
  });
  if (endpoint == nullptr || key == nullptr) throw std::logic_error("ordering trigger on a row without a key");
  return {id, endpoint, key};
}

void connect_spi() {
  pg_call([] {
    if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "pg_outbox: SPI_connect failed");
  });
}

void finish_spi() {
  pg_call([] { SPI_finish(); });
}

// Puts these messages of the committing transaction in their keys' commit order, in id
// order within the transaction. `undecided` of an entry: its key's messages of this
// batch not yet placed, itself included; they are not heads to follow.
void place(std::vector<Entry> batch) {
  std::vector<int32_t> locks;
  locks.reserve(batch.size());
  for (const Entry& e : batch) locks.push_back(core::ordering_lock(e.endpoint, e.key));
  lock_orderings(std::move(locks));
  std::sort(batch.begin(), batch.end(), [](const Entry& a, const Entry& b) { return a.id < b.id; });
  // A new message follows when its endpoint is ordered and its key has a head. A row
  // inserted with a number (a restored dump) keeps it while its key has a head, and
  // becomes the head when it has none.
  static Statement follow(
      "UPDATE outbox.messages m"
      "   SET ordering_seq = CASE WHEN m.ordering_seq IS NULL THEN nextval('outbox.commit_order'::regclass) END"
      " WHERE m.id = $1"
      "   AND (m.ordering_seq IS NULL) ="
      "       (EXISTS (SELECT FROM outbox.endpoints e WHERE e.name = m.endpoint AND e.ordered)"
      "        AND EXISTS (SELECT FROM outbox.messages h"
      "                     WHERE h.endpoint = m.endpoint AND h.ordering_key = m.ordering_key"
      "                       AND h.ordering_seq IS NULL AND h.id <> ALL ($2)))",
      {INT8OID, INT8ARRAYOID});
  connect_spi();
  for (size_t i = 0; i < batch.size(); ++i) {
    std::vector<int64_t> undecided;
    for (size_t j = i; j < batch.size(); ++j)
      if (batch[j].endpoint == batch[i].endpoint && batch[j].key == batch[i].key) undecided.push_back(batch[j].id);
    follow.run_latest({Int64GetDatum(batch[i].id), int8_array(undecided)});
    ordered_ids.insert(batch[i].id);
  }
  finish_spi();
}

}  // namespace

void register_ordering() { RegisterXactCallback(forget_at_end, nullptr); }

void order_at_commit(int64_t id, const std::string& endpoint, const std::string& key) {
  recorded.push_back({id, endpoint, key});
}

void lock_orderings(std::vector<int32_t> locks) {
  std::sort(locks.begin(), locks.end());
  locks.erase(std::unique(locks.begin(), locks.end()), locks.end());
  for (int32_t lock : locks)
    pg_call([&] {
      DirectFunctionCall2(pg_advisory_xact_lock_int4, Int32GetDatum(core::kOrderingLockSpace), Int32GetDatum(lock));
    });
}

}  // namespace pg_outbox::pg

using pg_outbox::pg::Entry;

// Deferred constraint trigger, AFTER INSERT of a row with an ordering key: at commit,
// the row (and every message enqueue recorded in this transaction, on the first call)
// takes its place in its key's order. Rows of plain INSERTs are placed one by one.
PG_OUTBOX_FUNCTION(pg_outbox_order_at_commit) {
  using namespace pg_outbox::pg;
  Entry row = row_of(trigger_data(fcinfo, "outbox._order_at_commit()"));
  if (ordered_ids.count(row.id) != 0) return PointerGetDatum(nullptr);
  std::vector<Entry> batch;
  batch.swap(recorded);
  if (std::none_of(batch.begin(), batch.end(), [&](const Entry& e) { return e.id == row.id; }))
    batch.push_back(std::move(row));
  place(std::move(batch));
  return PointerGetDatum(nullptr);
}

// AFTER DELETE or UPDATE OF endpoint, ordering_key, of a head: the key's next message,
// if any and if no other head remains, becomes the head.
PG_OUTBOX_FUNCTION(pg_outbox_next_in_order) {
  using namespace pg_outbox::pg;
  Entry row = row_of(trigger_data(fcinfo, "outbox._next_in_order()"));
  lock_orderings({pg_outbox::core::ordering_lock(row.endpoint, row.key)});
  static Statement promote(
      "UPDATE outbox.messages m SET ordering_seq = NULL"
      " WHERE m.id = (SELECT f.id FROM outbox.messages f WHERE f.endpoint = $1 AND f.ordering_key = $2"
      "                ORDER BY f.ordering_seq NULLS FIRST LIMIT 1)"
      "   AND m.ordering_seq IS NOT NULL"
      " RETURNING m.id",
      {TEXTOID, TEXTOID});
  connect_spi();
  const bool promoted = promote.run_latest({text_datum(row.endpoint), text_datum(row.key)}).size() > 0;
  finish_spi();
  if (promoted) wake_worker_at_commit();
  return PointerGetDatum(nullptr);
}

// outbox._ordering_lock(endpoint, ordering_key): the claim returns it with each keyed
// message of an ordered endpoint, for the locks the worker takes before it settles.
PG_OUTBOX_FUNCTION(pg_outbox_ordering_lock) {
  using namespace pg_outbox::pg;
  char* endpoint = nullptr;
  char* key = nullptr;
  pg_call([&] {
    endpoint = text_to_cstring(PG_GETARG_TEXT_PP(0));
    key = text_to_cstring(PG_GETARG_TEXT_PP(1));
  });
  return Int32GetDatum(pg_outbox::core::ordering_lock(endpoint, key));
}
