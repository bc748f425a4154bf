// outbox._webhook_id(message_id, idempotency_key, instance, legacy_below): a message's
// webhook-id by the rule the worker sends it with (core::webhook_id_for), given this
// database's instance (outbox._instance(), read once by the caller). A C function so
// that a statement that makes many (outbox.read, outbox.replay) pays a function call per
// row, not a SQL function's executor.
#include "core/request_headers.hpp"
#include "pg/boundary/boundary.hpp"

extern "C" {
#include "utils/builtins.h"
}

#include <string>
#include <string_view>

using pg_outbox::pg::pg_call;

PG_OUTBOX_FUNCTION(pg_outbox_webhook_id) {
  if (PG_ARGISNULL(0)) PG_RETURN_NULL();
  auto text_argument = [&](int n) -> std::string {
    if (PG_ARGISNULL(n)) return {};
    return pg_call([&] { return static_cast<const char*>(text_to_cstring(PG_GETARG_TEXT_PP(n))); });
  };
  pg_outbox::core::WebhookIdSource source;
  source.instance = text_argument(2);
  source.legacy_below = PG_ARGISNULL(3) ? 0 : PG_GETARG_INT64(3);
  const std::string id = pg_outbox::core::webhook_id_for(text_argument(1), PG_GETARG_INT64(0), source);
  PG_RETURN_TEXT_P(pg_call([&] { return cstring_to_text_with_len(id.data(), static_cast<int>(id.size())); }));
}
