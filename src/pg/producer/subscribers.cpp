// The subscribers of an event type, cached per backend. A change to
// outbox.endpoint_subscriptions (subscribe, unsubscribe, an endpoint dropped, plain SQL)
// fires its statement trigger, which sends a relcache invalidation of the table at
// commit; every backend takes it in before its next lock on the table (publish locks it
// before looking at the cache) and forgets what it knew.
#include "pg/producer/subscribers.hpp"

#include "core/event_patterns.hpp"
#include "pg/boundary/boundary.hpp"
#include "pg/boundary/spi.hpp"
#include "pg/boundary/trigger_data.hpp"
#include "pg/runtime/shared_state.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
}

#include <unordered_map>

namespace pg_outbox::pg {

namespace {

// What this backend knows of the table: the event types looked up since the last change.
// Bounded: a producer of endlessly many event types starts again past kCachedTypes.
constexpr size_t kCachedTypes = 1024;
struct Cache {
  Oid relid = InvalidOid;
  std::unordered_map<std::string, std::vector<std::string>> by_type;
};
Cache cache;

void forget_subscriptions(Datum, Oid relid) {
  if (relid == InvalidOid || relid == cache.relid) cache.relid = InvalidOid;
}

Oid subscriptions_relid() {
  static bool callback_registered = false;
  if (!callback_registered) {
    CacheRegisterRelcacheCallback(forget_subscriptions, 0);
    callback_registered = true;
  }
  const Oid relid = get_relname_relid("endpoint_subscriptions", get_namespace_oid("outbox", false));
  if (!OidIsValid(relid))
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE), errmsg("outbox.endpoint_subscriptions does not exist")));
  // Takes in the invalidations committed since this transaction last locked it.
  LockRelationOid(relid, AccessShareLock);
  return relid;
}

}  // namespace

std::vector<std::string> subscribers_of(const std::string& event_type, Oid owner) {
  const Oid relid = pg_call([] { return subscriptions_relid(); });
  if (cache.relid != relid) {
    cache.by_type.clear();
    cache.relid = relid;
  }
  if (auto found = cache.by_type.find(event_type); found != cache.by_type.end()) return found->second;

  static Statement lookup(R"sql(
    SELECT DISTINCT s.endpoint FROM outbox.endpoint_subscriptions s
     WHERE s.event_type OPERATOR(pg_catalog.=) ANY ($1)
     ORDER BY 1
  )sql",
                          {TEXTARRAYOID});
  std::vector<std::string> endpoints;
  as_owner(owner, [&] {
    with_spi([&] {
      const Datum patterns = text_array(core::patterns_matching(event_type));
      Rows rows = lookup.run({patterns}, Statement::Visibility::kReadOnly);
      for (size_t i = 0; i < rows.size(); ++i) endpoints.push_back(rows.text(i, 0));
    });
  });
  // An invalidation taken in meanwhile (by the lookup's own locks) emptied the cache:
  // what was read is still this statement's answer, but it is kept only if still valid.
  if (cache.relid == relid) {
    if (cache.by_type.size() >= kCachedTypes) cache.by_type.clear();
    cache.by_type.emplace(event_type, endpoints);
  }
  return endpoints;
}

void count_unmatched_publish() {
  DatabaseSlot* slot = slot_of_database(MyDatabaseId);
  if (slot != nullptr) pg_atomic_fetch_add_u64(&slot->unmatched_publishes, 1);
}

uint64 unmatched_publishes() {
  DatabaseSlot* slot = slot_of_database(MyDatabaseId);
  return slot != nullptr ? pg_atomic_read_u64(&slot->unmatched_publishes) : 0;
}

}  // namespace pg_outbox::pg

// Statement trigger on outbox.endpoint_subscriptions: every backend forgets its cached
// subscribers once this transaction commits (its own at once, at the next command).
PG_OUTBOX_FUNCTION(pg_outbox_subscriptions_changed) {
  TriggerData* trigger = pg_outbox::pg::trigger_data(fcinfo, "outbox._subscriptions_changed()");
  pg_outbox::pg::pg_call([&] { CacheInvalidateRelcacheByRelid(RelationGetRelid(trigger->tg_relation)); });
  return PointerGetDatum(nullptr);
}

// outbox._unmatched_publishes(): publishes that found no subscriber (metrics()).
PG_OUTBOX_FUNCTION(pg_outbox_unmatched_publishes) {
  (void)fcinfo;
  return Int64GetDatum(static_cast<int64>(pg_outbox::pg::unmatched_publishes()));
}
