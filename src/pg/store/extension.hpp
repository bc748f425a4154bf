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
std::string extension_version();  // "" when not installed
// This database's instance id for webhook-ids (outbox._instance(), made if missing).
core::WebhookIdSource webhook_id_source();

}  // namespace pg_outbox::pg::store
