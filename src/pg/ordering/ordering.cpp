// Per-key commit order on ordered endpoints (the contract: docs/delivery.md, Ordering).
//
// A message of an ordered endpoint with an ordering key is, once committed, either its
// key's head (ordering_seq NULL: in the claim index, sent when due) or a follower
// (ordering_seq drawn from outbox.commit_order: outside the claim index; the worker
// claims one itself only once its head left: successors.cpp).
// - At commit, a deferred constraint trigger (outbox._order_at_commit) decides, under the
//   key's advisory lock and with a fresh snapshot: if the key has a message in the queue
//   (its head, or those behind a head the worker took out: successors.cpp), the new
//   message follows, numbered by nextval. The lock is held until the commit
//   ends, so the next transaction to decide for the key waits, then sees this one
//   committed and draws a larger number: the numbers of a key are its commit order.
//   Ids are not: they are drawn at INSERT, and the later INSERT may commit first.
// - When a head leaves the queue, under the same lock, the follower with the lowest
//   number becomes the head, unless the key still has one: for the heads the worker
//   settles, it claims that follower itself (successors.cpp: no write); for a pull
//   reader's ack and for anyone else's DELETE or change of key, it is made a head in the
//   table (promote_next_in_order, the rule written once) by AFTER triggers
//   (outbox._heads_gone per DELETE statement, all its keys together;
//   outbox._next_in_order per row whose key changes).
// - A message moved to another endpoint or key (an UPDATE) is noted like an inserted
//   one, with the number it had, and placed in its new key at the move's commit by the
//   same rule (moves.cpp; the deferred messages_moved_at_commit trigger).
// The claim index thus never holds a follower: a blocked key costs the claim nothing,
// however many messages wait behind the head. The worker takes the locks of the keyed
// messages it settles before it moves them, in the same sorted order as a committing
// producer.
// A transaction's own keyed messages are known before its commit: outbox.enqueue notes
// the rows it inserts without a statement, and a statement trigger (outbox._note_inserts,
// producer/queue_triggers.cpp) the rows of INSERT statements (enqueue's with an
// idempotency key among them); a row is noted once (notes.cpp keeps the notes, and what a
// rolled-back savepoint takes back of them). The first commit-time call places them all,
// after taking all their locks: rows of the same transaction never take each other for
// a head. Until then a row of its own has no number (or a provisional one:
// kProvisionalSeq) and would look like a head (or a follower) to the transaction's
// promotions: those place the rows of their keys first.
#include "pg/ordering/ordering.hpp"

#include "core/ordering_lock.hpp"
#include "pg/boundary/boundary.hpp"
#include "pg/runtime/commit_wake.hpp"
#include "pg/boundary/trigger_data.hpp"
#include "pg/ordering/notes.hpp"
#include "pg/ordering/successors.hpp"
#include "pg/runtime/process_role.hpp"
#include "pg/runtime/transaction_events.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "utils/builtins.h"
}

#include <algorithm>
#include <optional>
#include <set>
#include <tuple>
#include <stdexcept>
#include <unordered_map>

namespace pg_outbox::pg {

namespace {

using ordering_notes::Note;

}  // namespace

// A transaction's notes end with it, committed or not.
void ordering_at_transaction_end(XactEvent event) {
  switch (event) {
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PREPARE:
    case XACT_EVENT_PARALLEL_COMMIT:
    case XACT_EVENT_PARALLEL_ABORT:
      ordering_notes::at_transaction_end();
      break;
    default:
      break;
  }
}

void ordering_at_subtransaction_end(SubXactEvent event, SubTransactionId sub) {
  if (event == SUBXACT_EVENT_ABORT_SUB) ordering_notes::at_subtransaction_abort(sub);
}

namespace {

// The id, endpoint, ordering key and number of a row of the trigger's table, read by
// column name.
Note row_of(TriggerData* trigger, HeapTuple tuple) {
  int64 id = 0;
  int64 seq = 0;
  bool no_seq = true;
  char* endpoint = nullptr;
  char* key = nullptr;
  pg_call([&] {
    TupleDesc desc = RelationGetDescr(trigger->tg_relation);
    bool isnull = false;
    id = DatumGetInt64(SPI_getbinval(tuple, desc, SPI_fnumber(desc, "id"), &isnull));
    endpoint = SPI_getvalue(tuple, desc, SPI_fnumber(desc, "endpoint"));
    key = SPI_getvalue(tuple, desc, SPI_fnumber(desc, "ordering_key"));
    Datum value = SPI_getbinval(tuple, desc, SPI_fnumber(desc, "ordering_seq"), &no_seq);
    if (!no_seq) seq = DatumGetInt64(value);
  });
  if (endpoint == nullptr || key == nullptr) throw std::logic_error("ordering trigger on a row without a key");
  return {id, endpoint, key, no_seq ? std::nullopt : std::optional<int64_t>(seq)};
}
// The trigger's row (tg_trigtuple: the old row of a DELETE or UPDATE).
Note row_of(TriggerData* trigger) { return row_of(trigger, trigger->tg_trigtuple); }

// The row a commit-time call places: the inserted row, or the moved row as it is now.
HeapTuple placed_tuple(TriggerData* trigger) {
  return TRIGGER_FIRED_BY_UPDATE(trigger->tg_event) ? trigger->tg_newtuple : trigger->tg_trigtuple;
}

// The id of the row a commit-time call places: all a call reads when the row is placed.
int64_t id_of(TriggerData* trigger) {
  HeapTuple tuple = placed_tuple(trigger);
  return pg_call([&] {
    TupleDesc desc = RelationGetDescr(trigger->tg_relation);
    bool isnull = false;
    return static_cast<int64_t>(DatumGetInt64(SPI_getbinval(tuple, desc, SPI_fnumber(desc, "id"), &isnull)));
  });
}

// Which of these keys (endpoints[i], keys[i]) have a message already, read with a fresh
// snapshot, besides the mine[i] messages being placed now, which are the key's: a head,
// or the messages behind a head the worker took out of the queue, the first of which it
// holds to claim itself (successors.cpp). Either way the new messages follow. A key has
// one when it has more than mine[i] messages. One statement for all the keys: a bulk
// INSERT of 100,000 keys looked them up one statement each. Counted, not excluded by id
// (NOT IN): a hashed subplan of every id placed can outgrow hash_mem, and a plain one
// compares every message with each of them.
std::vector<bool> keys_with_messages(const std::vector<std::string>& endpoints, const std::vector<std::string>& keys,
                                     const std::vector<int32_t>& mine) {
  static Statement others(R"sql(
    SELECT k.i FROM unnest($1::text[], $2::text[], $3::int[]) WITH ORDINALITY AS k(endpoint, ordering_key, mine, i)
     WHERE (SELECT count(*) FROM (SELECT FROM outbox.messages h
                                   WHERE h.endpoint = k.endpoint AND h.ordering_key = k.ordering_key
                                   LIMIT k.mine + 1) s) > k.mine
  )sql",
                          {TEXTARRAYOID, TEXTARRAYOID, INT4ARRAYOID}, Statement::Plan::kGeneric);
  Rows rows = others.run_latest({text_array(endpoints), text_array(keys), int4_array(mine)});
  std::vector<bool> busy(keys.size(), false);
  for (size_t r = 0; r < rows.size(); ++r) busy.at(static_cast<size_t>(rows.int64(r, 0)) - 1) = true;
  return busy;
}

bool is_ordered(const std::string& endpoint) {
  static Statement ordered("SELECT e.ordered FROM outbox.endpoints e WHERE e.name = $1", {TEXTOID});
  Rows rows = ordered.run_latest({text_datum(endpoint)});
  return rows.size() == 1 && rows.boolean(0, 0);
}

// Puts these messages of the committing transaction in their keys' commit order: all
// locks first (lowest first), then the keys together. The messages of one key go in the
// order of their numbers if they came with one (a restored dump: its head first), then
// of their ids; the first is the head if the key has none, the others follow it,
// numbered in that order. The cost is three statements whatever the number of keys: one
// look at where the noted rows are, one at the keys' other messages, one UPDATE that
// numbers the followers.
void place_sorted(const std::vector<Note>& batch);

// The noted rows where they are now, one entry each: a row noted more than once (inserted
// then moved, moved twice) keeps its first note's number and kind (what it was when this
// transaction first touched it), and its endpoint and key are read from the table. Rows
// gone (deleted, or their INSERT taken back), without a key now, or whose every move a
// savepoint took back (the row is the committed version again, not this transaction's)
// are left out. The rows are this transaction's: nobody else changes them.
std::vector<Note> as_they_are(const std::vector<Note>& notes) {
  // By id alone, so that the only index path is the primary key's with the array as its
  // condition. With "ordering_key IS NOT NULL" beside it, the partial ordering index
  // matched too, and statistics that showed few keyed messages (the queue analyzed while
  // it held unkeyed ones) made it look the cheaper: every keyed message was then
  // compared with each noted id (a replay's move of 100,000 keyed rows: 26 s, not 1.6).
  static Statement current(
      "SELECT m.id, m.endpoint, m.ordering_key, m.xmin::text::bigint, m.ordering_seq FROM outbox.messages m "
      "WHERE m.id = ANY ($1)",
      {INT8ARRAYOID}, Statement::Plan::kGeneric);
  std::unordered_map<int64_t, const Note*> first;
  std::vector<int64_t> ids;
  for (const Note& e : notes)
    if (first.emplace(e.id, &e).second) ids.push_back(e.id);
  Rows rows = current.run_latest({int8_array(ids)});
  std::vector<Note> rows_now;
  rows_now.reserve(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows.is_null(r, 2)) continue;  // its key taken away
    const Note& note = *first.at(rows.int64(r, 0));
    const auto writer = static_cast<TransactionId>(rows.int64(r, 3));
    if (note.moved && !pg_call([&] { return TransactionIdIsCurrentTransactionId(writer); })) continue;
    rows_now.push_back(
        {note.id, rows.text(r, 1), rows.text(r, 2), note.unread ? rows.optional_int64(r, 4) : note.preset, note.moved});
  }
  return rows_now;
}

void place(const std::vector<Note>& notes) {
  with_index_plans([&] {
    with_spi([&] {
      std::vector<Note> batch = as_they_are(notes);
      std::vector<int32_t> locks;
      locks.reserve(batch.size());
      for (const Note& e : batch) locks.push_back(core::ordering_lock(e.endpoint, e.key));
      lock_orderings(std::move(locks));
      // In a key, the messages moved into it come first (they committed before this
      // transaction: a key's head, then its followers in their order), then those this
      // transaction inserted.
      // A provisional number (kProvisionalSeq) orders like none: by the row's id.
      const auto number = [](const Note& e) { return e.preset == kProvisionalSeq ? std::nullopt : e.preset; };
      std::sort(batch.begin(), batch.end(), [&](const Note& a, const Note& b) {
        return std::forward_as_tuple(a.endpoint, a.key, b.moved, number(a), a.id) <
               std::forward_as_tuple(b.endpoint, b.key, a.moved, number(b), b.id);
      });
      place_sorted(batch);
    });
  });
}

// place() for a batch sorted by key, with SPI connected and only index paths: the queue's
// statistics say whatever it held when it was last analyzed (nothing, between two
// bursts), and a plan that trusted them scanned the whole queue once per key.
// Its statements and those of as_they_are and keys_with_messages run their generic
// plans, made once with only index paths: each finds its rows by an index condition
// whatever the values. The plan cache chose custom plans for them, and planned them at
// every commit: 163 µs of planning in a producer's transaction of one enqueue to an
// ordered endpoint, which took 780 µs in all (pg_stat_statements, track_planning).
void place_sorted(const std::vector<Note>& batch) {
  static Statement unnumber("UPDATE outbox.messages m SET ordering_seq = NULL WHERE m.id = ANY ($1)", {INT8ARRAYOID},
                            Statement::Plan::kGeneric);
  // Followers in the order of their ids: the index scan of the primary key gives the
  // rows in that order (the array's is sorted), and each draws its number as it comes.
  // Numbered together, the followers of each key are still numbered in its order.
  static Statement number_by_id(
      "UPDATE outbox.messages m SET ordering_seq = nextval('outbox.commit_order'::regclass) WHERE m.id = ANY ($1)",
      {INT8ARRAYOID}, Statement::Plan::kGeneric);
  // Followers in another order (numbers they came with, from a restored dump): one at a
  // time, in that order.
  static Statement number_one(
      "UPDATE outbox.messages m SET ordering_seq = nextval('outbox.commit_order'::regclass) WHERE m.id = $1", {INT8OID},
      Statement::Plan::kGeneric);
  struct Key {
    size_t first, end;  // its messages in batch
  };
  std::vector<Key> ordered_keys;            // the keys of ordered endpoints
  std::vector<int64_t> heads_with_numbers;  // heads that came with a number: it goes
  std::string endpoint;                     // the last endpoint looked at, and whether it is ordered
  bool ordered = false;
  for (size_t first = 0; first < batch.size();) {
    size_t end = first;
    while (end < batch.size() && batch[end].endpoint == batch[first].endpoint && batch[end].key == batch[first].key)
      ++end;
    if (first == 0 || batch[first].endpoint != endpoint) {
      endpoint = batch[first].endpoint;
      ordered = is_ordered(endpoint);
    }
    if (ordered) {
      ordered_keys.push_back({first, end});
    } else {
      // No order to keep: only a number the row came with goes (a moved row's went
      // when it moved: outbox._moved_message).
      for (size_t i = first; i < end; ++i)
        if (batch[i].preset && !batch[i].moved) heads_with_numbers.push_back(batch[i].id);
    }
    first = end;
  }
  if (!ordered_keys.empty()) {
    std::vector<std::string> endpoints, keys;
    std::vector<int32_t> mine;
    for (const Key& k : ordered_keys) {
      endpoints.push_back(batch[k.first].endpoint);
      keys.push_back(batch[k.first].key);
      mine.push_back(static_cast<int32_t>(k.end - k.first));
    }
    const std::vector<bool> busy = keys_with_messages(endpoints, keys, mine);
    std::vector<int64_t> by_id;  // the followers of keys whose followers are in id order
    for (size_t n = 0; n < ordered_keys.size(); ++n) {
      bool follow = busy[n];
      std::vector<int64_t> followers;
      for (size_t i = ordered_keys[n].first; i < ordered_keys[n].end; ++i) {
        if (follow) {
          followers.push_back(batch[i].id);
        } else {
          // The key's head: one that came without a number needs no write.
          if (batch[i].preset && !batch[i].moved) heads_with_numbers.push_back(batch[i].id);
          follow = true;  // the others go behind it
        }
      }
      if (std::is_sorted(followers.begin(), followers.end())) {
        by_id.insert(by_id.end(), followers.begin(), followers.end());
      } else {
        for (int64_t id : followers) number_one.run_latest({Int64GetDatum(id)});
      }
    }
    std::sort(by_id.begin(), by_id.end());
    if (!by_id.empty()) number_by_id.run_latest({int8_array(by_id)});
  }
  if (!heads_with_numbers.empty()) unnumber.run_latest({int8_array(heads_with_numbers)});
}

}  // namespace

void order_at_commit(int64_t id, const std::string& endpoint, const std::string& key, std::optional<int64_t> preset) {
  ordering_notes::inserted(id, endpoint, key, preset);
}

void order_moved_at_commit(int64_t id, const std::string& endpoint, const std::string& key,
                           std::optional<int64_t> seq) {
  ordering_notes::moved(id, endpoint, key, seq);
}

void place_noted_if_asked(Oid owner) {
  if (!ordering_notes::take_asked()) return;
  const std::vector<Note> batch = ordering_notes::take_for_placing();
  if (!batch.empty()) as_owner(owner, [&] { place(batch); });
}

// The rule of a key's succession, for the worker's settle and for the trigger alike: the
// follower with the lowest number becomes the head, unless the key still has a head
// (NULLS FIRST puts a remaining head first, and the UPDATE then changes nothing).
// The next followers are all looked up (the ARRAY initplan) before the UPDATE writes.
// Each key's scan walks past the index entries its earlier heads and their old versions
// left; a scan marks those dead (so that later scans skip them without visiting the
// heap) only if their leaf page is unchanged when it moves on. Interleaved with the
// UPDATE, which inserts the new head's entry into that very page, it never was: every
// promotion of a key walked all the entries its predecessors left, and their heap pages
// (a quarter of the worker's CPU per message in bench/run.sh case 6).
Rows promote_next_in_order(const std::vector<std::string>& endpoints, const std::vector<std::string>& keys,
                           Statement::Visibility visibility) {
  static Statement promote(R"sql(
    UPDATE outbox.messages m SET ordering_seq = NULL
     WHERE m.id = ANY (ARRAY(
             SELECT (SELECT f.id FROM outbox.messages f
                      WHERE f.endpoint = k.endpoint AND f.ordering_key = k.ordering_key
                      ORDER BY f.ordering_seq NULLS FIRST LIMIT 1)
               FROM unnest($1::text[], $2::text[]) AS k(endpoint, ordering_key)))
       AND m.ordering_seq IS NOT NULL
    RETURNING m.endpoint, m.ordering_key
  )sql",
                           {TEXTARRAYOID, TEXTARRAYOID});
  return promote.run({text_array(endpoints), text_array(keys)}, visibility);
}

void lock_orderings(std::vector<int32_t> locks) {
  std::sort(locks.begin(), locks.end());
  locks.erase(std::unique(locks.begin(), locks.end()), locks.end());
  pg_call([&] {
    for (int32_t lock : locks)
      DirectFunctionCall2(pg_advisory_xact_lock_int4, Int32GetDatum(core::kOrderingLockSpace), Int32GetDatum(lock));
  });
}

}  // namespace pg_outbox::pg

using pg_outbox::pg::Note;

// Deferred constraint trigger, AFTER INSERT of a row with an ordering key, or AFTER
// UPDATE that moves a row into another key or endpoint: at commit, every keyed message
// noted in this transaction (on the first call) takes its place in its key's order.
// The first call places them all, as the extension's owner (a producer has no right on
// the table or the sequence); the other calls of the commit, one per keyed row (a bulk
// INSERT, a replay: thousands), find their row placed and return at once. So the
// function is not SECURITY DEFINER: that would set search_path and the user for every
// one of them.
// An inserted row it finds not noted was inserted by the statement that has just ended,
// with the constraints immediate: the INSERT's statement trigger (or the enqueue or
// publish that inserted it) notes it after this call. Placed now, alone, it would take
// the statement's other rows (not noted yet) for messages its key had before, and the
// key would get no head: it is placed with them when they are noted
// (place_noted_if_asked). (An enqueue's row for an unordered endpoint is never noted:
// nothing to place.) A moved row is noted before its UPDATE ends (moves.cpp), unless
// a trigger of someone else's changed its key after ours looked: it is placed now.
PG_OUTBOX_FUNCTION(pg_outbox_order_at_commit) {
  using namespace pg_outbox::pg;
  TriggerData* trigger = trigger_data(fcinfo, "outbox._order_at_commit()");
  const int64_t id = id_of(trigger);
  if (ordering_notes::is_placed(id)) return PointerGetDatum(nullptr);
  std::optional<Note> also;
  if (!ordering_notes::is_noted(id)) {
    if (TRIGGER_FIRED_BY_INSERT(trigger->tg_event)) {
      ordering_notes::leave_to_noting(id);
      return PointerGetDatum(nullptr);
    }
    // Noted here: a savepoint that takes the UPDATE back takes this back too. Not as a
    // move: ours did not run (outbox._moved_message), so the row still has the number
    // it had in its old key, which goes if it becomes its new key's head.
    also = row_of(trigger, placed_tuple(trigger));
    also->noted_in = GetCurrentSubTransactionId();
  }
  const std::vector<Note> batch = ordering_notes::take_for_placing(std::move(also));
  const Oid owner = called_function_owner(fcinfo);
  as_owner(owner, [&] { place(batch); });
  return PointerGetDatum(nullptr);
}

namespace {

// These keys' heads left the queue, or may have (by anyone but the worker, whose settle
// claims a key's next message itself: successors.cpp): each key left without a
// head gets its next message as the head. The follower picked may be leaving itself
// (another DELETE, not yet committed): the UPDATE then waits for it and finds it gone, and
// the keys still without a head and with a follower are looked at again. All the keys
// in each statement: a pull reader's ack of 100 keyed messages looked at them one
// statement or two each. SPI connected; the keys' locks taken.
bool promote_after_heads_left(std::vector<std::string> endpoints, std::vector<std::string> keys) {
  using namespace pg_outbox::pg;
  // This transaction's own rows in these keys, not placed yet, have no number and would
  // look like the keys' heads: they are placed first, now rather than at commit. The
  // caller holds the keys' locks until the commit, so nobody else places a message in
  // them meanwhile: the same place either way. (Left to the commit, a key could stay
  // without a head; a promotion at the commit could wait for a row another session
  // locked while it waited for these keys' locks.)
  const std::vector<Note> mine = ordering_notes::take_for_placing_in(endpoints, keys);
  if (!mine.empty()) place(mine);
  // The keys whose first message (a head first) is a follower: left without a head.
  static Statement headless(R"sql(
    SELECT k.i FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(endpoint, ordering_key, i)
     WHERE (SELECT f.ordering_seq IS NOT NULL FROM outbox.messages f
             WHERE f.endpoint = k.endpoint AND f.ordering_key = k.ordering_key
             ORDER BY f.ordering_seq NULLS FIRST LIMIT 1)
  )sql",
                            {TEXTARRAYOID, TEXTARRAYOID});
  bool promoted = false;
  for (int tries = 0; tries < 100 && !keys.empty(); ++tries) {
    Rows heads = promote_next_in_order(endpoints, keys, Statement::Visibility::kLatest);
    promoted = promoted || heads.size() > 0;
    std::set<std::pair<std::string, std::string>> done;
    for (size_t r = 0; r < heads.size(); ++r) done.emplace(heads.text(r, 0), heads.text(r, 1));
    std::vector<std::string> left_endpoints, left_keys;
    for (size_t i = 0; i < keys.size(); ++i)
      if (done.count({endpoints[i], keys[i]}) == 0) {
        left_endpoints.push_back(endpoints[i]);
        left_keys.push_back(keys[i]);
      }
    if (left_keys.empty()) break;
    Rows waiting = headless.run_latest({text_array(left_endpoints), text_array(left_keys)});
    endpoints.clear();
    keys.clear();
    for (size_t r = 0; r < waiting.size(); ++r) {
      const size_t i = static_cast<size_t>(waiting.int64(r, 0)) - 1;
      endpoints.push_back(left_endpoints.at(i));
      keys.push_back(left_keys.at(i));
    }
  }
  return promoted;
}

}  // namespace

// AFTER UPDATE OF endpoint, ordering_key, of a keyed message, by anyone but the worker:
// the key it left may be left without a head.
PG_OUTBOX_FUNCTION(pg_outbox_next_in_order) {
  using namespace pg_outbox::pg;
  Note row = row_of(trigger_data(fcinfo, "outbox._next_in_order()"));
  successors::reordered_at_commit(row.endpoint);
  lock_orderings({pg_outbox::core::ordering_lock(row.endpoint, row.key)});
  bool promoted = false;
  with_spi([&] { promoted = promote_after_heads_left({row.endpoint}, {row.key}); });
  if (promoted) wake_at_commit();
  return PointerGetDatum(nullptr);
}

// AFTER DELETE, per statement, with the deleted rows as a transition table (gone), by
// anyone but the worker (a pull reader's answer, an operator's DELETE, drop_endpoint):
// each key that lost a message is looked at once, under all the keys' locks taken in
// order. Once per key, not per row: a row trigger walked the key's deleted index entries
// again for every deleted row, so deleting n messages of a key cost n² visits.
PG_OUTBOX_FUNCTION(pg_outbox_heads_gone) {
  using namespace pg_outbox::pg;
  TriggerData* trigger = trigger_data(fcinfo, "outbox._heads_gone()");
  bool promoted = false;
  with_spi(
      [&] {
        Rows keys = run_once("SELECT DISTINCT endpoint, ordering_key FROM gone WHERE ordering_key IS NOT NULL");
        if (keys.size() == 0) return;
        for (size_t r = 0; r < keys.size(); ++r) successors::reordered_at_commit(keys.text(r, 0));
        std::vector<int32_t> locks;
        std::vector<std::string> endpoints, names;
        for (size_t r = 0; r < keys.size(); ++r) {
          locks.push_back(pg_outbox::core::ordering_lock(keys.text(r, 0), keys.text(r, 1)));
          endpoints.push_back(keys.text(r, 0));
          names.push_back(keys.text(r, 1));
        }
        lock_orderings(std::move(locks));
        promoted = promote_after_heads_left(std::move(endpoints), std::move(names));
      },
      trigger);
  if (promoted) wake_at_commit();
  return PointerGetDatum(nullptr);
}

// The WHEN of that trigger: false in the worker.
PG_OUTBOX_FUNCTION(pg_outbox_trigger_promotes) {
  (void)fcinfo;
  return BoolGetDatum(!pg_outbox::pg::is_delivery_worker());
}

// outbox._ordering_lock(endpoint, ordering_key): the lock of a key for SQL that takes the
// keys' locks itself (alter_endpoint's renumbering, outbox._order_queued).
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
