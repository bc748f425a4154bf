#include "pg/store/extension.hpp"

#include "pg/boundary/spi.hpp"

extern "C" {
#include "commands/extension.h"
}

namespace pg_outbox::pg::store {

uint32_t extension_oid() {
  return pg_call([] { return static_cast<uint32_t>(get_extension_oid("pg_outbox", true)); });
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
