#include "pg/store/extension.hpp"

#include "pg/boundary/spi.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "commands/extension.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
}

namespace pg_outbox::pg::store {

namespace {

// extension_still: outbox.messages as it was when pg_extension was last read, and
// whether an invalidation may have touched it since.
Oid watched_queue = InvalidOid;
uint32_t watched_for = 0;  // the extension whose queue it is
bool queue_invalidated = true;

void on_relcache_invalidation(Datum, Oid relation) {
  if (relation == InvalidOid || relation == watched_queue) queue_invalidated = true;
}

}  // namespace

uint32_t extension_oid() {
  return pg_call([] { return static_cast<uint32_t>(get_extension_oid("pg_outbox", true)); });
}

bool extension_still(uint32_t oid) {
  return pg_call([&] {
    static bool registered = false;
    if (!registered) {
      CacheRegisterRelcacheCallback(on_relcache_invalidation, 0);
      registered = true;
    }
    if (!queue_invalidated && watched_for == oid && watched_queue != InvalidOid) return true;
    // Cleared before the catalogs are read: an invalidation taken in while they are
    // read sets it again, and the next transaction reads them again.
    queue_invalidated = false;
    watched_for = 0;
    if (static_cast<uint32_t>(get_extension_oid("pg_outbox", true)) != oid) return false;
    const Oid schema = get_namespace_oid("outbox", true);
    watched_queue = schema == InvalidOid ? InvalidOid : get_relname_relid("messages", schema);
    watched_for = oid;
    return true;
  });
}

std::string extension_version() {
  static Statement statement(R"sql(
    SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_outbox'
  )sql",
                             {});
  Rows rows = statement.run({});
  return rows.size() == 0 ? std::string() : rows.text(0, 0);
}

core::WebhookIdSource webhook_id_source() {
  static Statement statement("SELECT id, legacy_below FROM outbox._instance()", {});
  Rows rows = statement.run({});
  core::WebhookIdSource source;
  if (rows.size() == 1) {
    source.instance = rows.text(0, 0);
    source.legacy_below = rows.int64(0, 1);
  }
  return source;
}

}  // namespace pg_outbox::pg::store
