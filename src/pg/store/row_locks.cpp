// Whether another transaction holds a row of the queue: the claim's equivalent of
// FOR UPDATE SKIP LOCKED that writes nothing (docs/delivery.md, Claim).
//
// FOR UPDATE wrote a lock into every claimed row: one WAL record per message (a
// full-page image after each checkpoint), for a lock that ended with the claim's own
// short transaction. What it bought is that a row another transaction is changing,
// deleting or locking (an operator's UPDATE or SELECT ... FOR UPDATE, a
// drop_endpoint(force), a requeue) is left for a later claim instead of being sent
// under its feet. The claim asks this function instead, only for a row whose xmax is
// set (a row nobody touched since its INSERT has none): the row is free when
// PostgreSQL's own test for an UPDATE (HeapTupleSatisfiesUpdate, which heap_lock_tuple
// uses) finds it unchanged and unlocked. A row locked or changed by a transaction still
// running is busy, as under SKIP LOCKED; a row changed or deleted by a transaction that
// committed after the claim's snapshot is busy too (FOR UPDATE would have followed it to
// its new version; the next claim sees that version itself).
#include "pg/boundary/boundary.hpp"

extern "C" {
#include "access/heapam.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "storage/bufmgr.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
}

#include <cstring>

namespace {

// Only outbox.messages may be asked about: the function reads tuple headers, and no
// other table's are anyone's business here.
bool is_the_queue(Oid relid) {
  const char* name = get_rel_name(relid);
  return name != nullptr && std::strcmp(name, "messages") == 0 &&
         get_rel_namespace(relid) == get_namespace_oid("outbox", false);
}

// Plain C within pg_call: no object with a destructor lives across the calls that may
// raise.
bool row_is_free(Oid relid, ItemPointer tid) {
  Relation queue = table_open(relid, AccessShareLock);
  Buffer buffer = ReadBuffer(queue, ItemPointerGetBlockNumber(tid));
  LockBuffer(buffer, BUFFER_LOCK_SHARE);
  Page page = BufferGetPage(buffer);
  OffsetNumber offset = ItemPointerGetOffsetNumber(tid);
  bool free = false;
  if (offset >= FirstOffsetNumber && offset <= PageGetMaxOffsetNumber(page)) {
    ItemId item = PageGetItemId(page, offset);
    // The claim's scan pins the page while it evaluates the row, so the row cannot be
    // pruned meanwhile; anything but a plain row is not taken all the same.
    if (ItemIdIsNormal(item)) {
      HeapTupleData tuple;
      tuple.t_data = reinterpret_cast<HeapTupleHeader>(PageGetItem(page, item));
      tuple.t_len = ItemIdGetLength(item);
      tuple.t_tableOid = relid;
      tuple.t_self = *tid;
      free = HeapTupleSatisfiesUpdate(&tuple, GetCurrentCommandId(false), buffer) == TM_Ok;
    }
  }
  UnlockReleaseBuffer(buffer);
  table_close(queue, AccessShareLock);
  return free;
}

}  // namespace

// outbox._claimable(tableoid, ctid) of a row of outbox.messages.
PG_OUTBOX_FUNCTION(pg_outbox_claimable) {
  using namespace pg_outbox::pg;
  Oid relid = PG_GETARG_OID(0);
  // tid is passed by reference (PostgreSQL's tid.c reads it the same way).
  auto tid = reinterpret_cast<ItemPointer>(PG_GETARG_POINTER(1));
  if (!pg_call([&] { return is_the_queue(relid); })) {
    throw SqlError(ERRCODE_INVALID_PARAMETER_VALUE, "outbox._claimable only reads rows of outbox.messages");
  }
  return BoolGetDatum(pg_call([&] { return row_is_free(relid, tid); }));
}
