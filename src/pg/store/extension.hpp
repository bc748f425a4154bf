// Whether pg_outbox is installed in the worker's database, at which version, and this
// database's instance id for webhook-ids.
#pragma once

#include "core/request_headers.hpp"

#include <cstdint>
#include <string>

namespace pg_outbox::pg::store {

// The OID of pg_outbox in this database (0 while it does not exist). A new OID means the
// extension was dropped and created again: new tables, ids from 1.
uint32_t extension_oid();
// Whether pg_outbox in this database is still the extension `oid`, read at the start of
// every worker transaction. Reading pg_extension each time cost 4 % of the worker's CPU
// at 1,000 messages/s; it is read again only after a relcache invalidation of the queue
// table it had then (a DROP EXTENSION drops that table, whose invalidation this
// transaction's start has taken in) or of every relation (a lost invalidation queue).
bool extension_still(uint32_t oid);
std::string extension_version();  // "" when not installed
// This database's instance id for webhook-ids (outbox._instance(), made if missing).
core::WebhookIdSource webhook_id_source();

}  // namespace pg_outbox::pg::store
