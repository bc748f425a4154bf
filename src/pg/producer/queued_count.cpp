// max_pending from a maintained count (docs/delivery.md, Max pending), not from counting rows on
// every enqueue, which costs as much as the backlog allows.
//
// For each endpoint with a max_pending, the database's shared slot keeps:
//  - committed: the committed messages in the queue. The worker counts it when it starts,
//    when an endpoint gets a max_pending, and when some other session removed rows (a
//    statement trigger asks: queue_changed). From then on commits add to it (a
//    transaction callback adds what the transaction enqueued) and the worker subtracts
//    what its committed settles took out of the queue.
//  - reserved: what transactions still open have enqueued. enqueue refuses when
//    committed + reserved has reached max_pending, and reserves in the same critical
//    section: two producers can never both take the last place. Reservations move to
//    committed at commit and go at rollback (of the transaction, or of the subtransaction
//    that made them).
// A recount must not lose the commits that happen while it counts: between
// begin_recount and finish_recount, commits and settles also add to since_recount, and
// the count found becomes committed + since_recount. A transaction that commits in the
// few microseconds between begin_recount and the counting statement's snapshot is
// counted twice, until the next recount: an error of a message or two, towards refusing.
// The count is approximate in a few other rare cases, each corrected by the next
// recount: a transaction that enqueued before the worker first counted an endpoint and
// commits after; a prepared transaction, counted at PREPARE, that is rolled back; a
// message the worker settles after someone else deleted it (that deletion asks for a
// recount, which may run before the settle).
// Not preloaded (no shared memory), no worker yet, an endpoint not counted yet or more
// than kQueuedEndpoints with a max_pending: enqueue counts rows as before.
#include "pg/producer/queued_count.hpp"

#include "pg/boundary/spi.hpp"
#include "pg/runtime/process_role.hpp"
#include "pg/runtime/shared_state.hpp"
#include "pg/runtime/transaction_events.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
}

#include <algorithm>
#include <cstring>

namespace pg_outbox::pg {

namespace {

struct Reservation {
  std::string endpoint;
  int64_t n;
  SubTransactionId subtransaction;
};

std::vector<Reservation> reservations;  // of this backend's open transaction
bool changed_queue = false;             // ... removed rows: the worker counts again once it commits

// The slot's LWLock is taken and released through pg_call: these functions run in C++
// frames (enqueue, the worker), which an ERROR must never longjmp over.

// The entry of the endpoint, with the slot's lock held and the slot still this
// database's; nullptr when there is none.
QueuedCount* entry_of(DatabaseSlot& slot, const std::string& endpoint) {
  if (slot.database_oid != MyDatabaseId) return nullptr;
  for (QueuedCount& q : slot.queued)
    if (q.name[0] != '\0' && endpoint == q.name) return &q;
  return nullptr;
}

// Adds `committed` to the count of committed messages, and reservations back.
void apply(DatabaseSlot& slot, const std::string& endpoint, int64_t reserved, int64_t committed) {
  pg_call([&] { LWLockAcquire(slot.lock, LW_EXCLUSIVE); });
  if (QueuedCount* q = entry_of(slot, endpoint)) {
    q->reserved = std::max<int64_t>(0, q->reserved + reserved);
    q->committed = std::max<int64_t>(0, q->committed + committed);
    if (q->recounting) q->since_recount += committed;
  }
  pg_call([&] { LWLockRelease(slot.lock); });
}

void settle_reservations(bool committed, SubTransactionId only) {
  DatabaseSlot* slot = slot_of_database(MyDatabaseId);
  auto keep = reservations.begin();
  for (auto r = reservations.begin(); r != reservations.end(); ++r) {
    if (only != InvalidSubTransactionId && r->subtransaction != only) {
      if (keep != r) *keep = std::move(*r);
      ++keep;
      continue;
    }
    if (slot != nullptr) apply(*slot, r->endpoint, -r->n, committed ? r->n : 0);
  }
  reservations.erase(keep, reservations.end());
}

// Asks the worker to count again, once the rows' removal is visible to it.
void request_recount() {
  DatabaseSlot* slot = slot_of_database(MyDatabaseId);
  if (slot == nullptr) return;
  pg_call([&] { LWLockAcquire(slot->lock, LW_EXCLUSIVE); });
  if (slot->database_oid == MyDatabaseId) slot->queued_recount_due = true;
  pg_call([&] { LWLockRelease(slot->lock); });
}

}  // namespace

void queued_count_at_transaction_end(XactEvent event) {
  switch (event) {
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_PARALLEL_COMMIT:
    case XACT_EVENT_PREPARE:  // counted as committed: COMMIT PREPARED runs in another session
      if (!reservations.empty()) settle_reservations(true, InvalidSubTransactionId);
      if (changed_queue) request_recount();
      changed_queue = false;
      break;
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PARALLEL_ABORT:
      if (!reservations.empty()) settle_reservations(false, InvalidSubTransactionId);
      changed_queue = false;
      break;
    default:
      break;
  }
}

void queued_count_at_subtransaction_end(SubXactEvent event, SubTransactionId sub, SubTransactionId parent) {
  if (reservations.empty()) return;
  if (event == SUBXACT_EVENT_ABORT_SUB) {
    settle_reservations(false, sub);
  } else if (event == SUBXACT_EVENT_COMMIT_SUB) {
    for (Reservation& r : reservations)
      if (r.subtransaction == sub) r.subtransaction = parent;
  }
}

namespace {

void add_reservation(const std::string& endpoint, int64_t n) {
  reservations.push_back({endpoint, n, GetCurrentSubTransactionId()});
}

}  // namespace

Room reserve_queued(const std::string& endpoint, int64_t max_pending, bool& reserved) {
  reserved = false;
  DatabaseSlot* slot = slot_of_database(MyDatabaseId);
  if (slot == nullptr) return Room::kUnknown;
  Room room = Room::kUnknown;
  pg_call([&] { LWLockAcquire(slot->lock, LW_EXCLUSIVE); });
  if (QueuedCount* q = entry_of(*slot, endpoint)) {
    if (q->counted && q->committed + q->reserved >= max_pending) {
      room = Room::kFull;
    } else {
      room = q->counted ? Room::kFree : Room::kUnknown;
      q->reserved++;
      reserved = true;
    }
  }
  pg_call([&] { LWLockRelease(slot->lock); });
  if (reserved) add_reservation(endpoint, 1);
  return room;
}

void release_queued(const std::string& endpoint) {
  for (auto r = reservations.rbegin(); r != reservations.rend(); ++r) {
    if (r->endpoint != endpoint || r->n <= 0) continue;
    r->n--;
    if (DatabaseSlot* slot = slot_of_database(MyDatabaseId)) apply(*slot, endpoint, -1, 0);
    return;
  }
}

void note_queued(const std::string& endpoint, int64_t n) {
  DatabaseSlot* slot = slot_of_database(MyDatabaseId);
  if (slot == nullptr || n <= 0) return;
  bool kept = false;
  pg_call([&] { LWLockAcquire(slot->lock, LW_EXCLUSIVE); });
  if (QueuedCount* q = entry_of(*slot, endpoint)) {
    q->reserved += n;
    kept = true;
  }
  pg_call([&] { LWLockRelease(slot->lock); });
  if (kept) add_reservation(endpoint, n);
}

void queue_changed() {
  if (!is_delivery_worker()) changed_queue = true;
}

std::vector<int64_t> count_queued_rows(const std::vector<std::string>& endpoints, std::optional<int64_t> limit) {
  static Statement statement(R"sql(
    SELECT (SELECT pg_catalog.count(*) FROM (
              (SELECT 1 FROM outbox.messages m
                WHERE m.endpoint OPERATOR(pg_catalog.=) e.name AND m.ordering_seq IS NULL LIMIT $2)
              UNION ALL
              (SELECT 1 FROM outbox.messages m
                WHERE m.endpoint OPERATOR(pg_catalog.=) e.name
                  AND m.ordering_key IS NOT NULL AND m.ordering_seq IS NOT NULL LIMIT $2)
              LIMIT $2) s)
      FROM pg_catalog.unnest($1::pg_catalog.text[]) WITH ORDINALITY AS e(name, i) ORDER BY e.i
  )sql",
                             {TEXTARRAYOID, INT8OID});
  Rows rows = statement.run({text_array(endpoints), limit ? Int64GetDatum(*limit) : Datum(0)},
                            Statement::Visibility::kStatement, limit ? "  " : " n");
  std::vector<int64_t> counts(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) counts[r] = rows.int64(r, 0);
  return counts;
}

void queued_removed(DatabaseSlot& slot, const std::string& endpoint, int64_t n) { apply(slot, endpoint, 0, -n); }

bool queued_recount_due(DatabaseSlot& slot) {
  pg_call([&] { LWLockAcquire(slot.lock, LW_EXCLUSIVE); });
  bool due = slot.queued_recount_due;
  slot.queued_recount_due = false;
  pg_call([&] { LWLockRelease(slot.lock); });
  return due;
}

void begin_recount(DatabaseSlot& slot, const std::vector<std::string>& endpoints) {
  pg_call([&] { LWLockAcquire(slot.lock, LW_EXCLUSIVE); });
  for (QueuedCount& q : slot.queued)
    if (q.name[0] != '\0' && std::find(endpoints.begin(), endpoints.end(), q.name) == endpoints.end())
      memset(&q, 0, sizeof q);
  for (const std::string& endpoint : endpoints) {
    QueuedCount* q = entry_of(slot, endpoint);
    for (int i = 0; q == nullptr && i < kQueuedEndpoints; ++i)
      if (slot.queued[i].name[0] == '\0') {
        q = &slot.queued[i];
        memset(q, 0, sizeof *q);
        strlcpy(q->name, endpoint.c_str(), sizeof q->name);
      }
    if (q == nullptr) break;  // full: the endpoints left out are counted by enqueue itself
    q->recounting = true;
    q->since_recount = 0;
  }
  pg_call([&] { LWLockRelease(slot.lock); });
}

void finish_recount(DatabaseSlot& slot, const std::string& endpoint, int64_t counted) {
  pg_call([&] { LWLockAcquire(slot.lock, LW_EXCLUSIVE); });
  if (QueuedCount* q = entry_of(slot, endpoint); q != nullptr && q->recounting) {
    q->committed = std::max<int64_t>(0, counted + q->since_recount);
    q->recounting = false;
    q->counted = true;
  }
  pg_call([&] { LWLockRelease(slot.lock); });
}

}  // namespace pg_outbox::pg
