// SQL-callable argument checks (outbox._check_*), used by the install script's
// functions, and the two that outbox.enqueue makes itself. The rules live in
// core/validation; this file only maps a refusal to its SQLSTATE. A message never
// repeats a secret.
#include "core/string_object.hpp"
#include "core/validation.hpp"
#include "pg/producer/argument_checks.hpp"
#include "pg/boundary/boundary.hpp"
#include "pg/runtime/settings.hpp"

extern "C" {
#include "utils/builtins.h"
#include "utils/jsonb.h"
}

#include <optional>
#include <string>

namespace {

using pg_outbox::pg::pg_call;
using pg_outbox::pg::SqlError;

// The text argument as a C string (palloc'd), or nullptr for SQL NULL.
const char* text_arg(FunctionCallInfo fcinfo, int n) {
  if (PG_ARGISNULL(n)) return nullptr;
  return pg_call([&] { return static_cast<const char*>(text_to_cstring(PG_GETARG_TEXT_PP(n))); });
}

void refuse_if(const std::optional<std::string>& problem, int sqlstate) {
  if (problem) throw SqlError(sqlstate, *problem);
}

}  // namespace

PG_OUTBOX_FUNCTION(pg_outbox_check_endpoint_name) {
  const char* name = text_arg(fcinfo, 0);
  if (name == nullptr) throw SqlError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "endpoint name must not be null");
  refuse_if(pg_outbox::core::check_endpoint_name(name), ERRCODE_INVALID_NAME);
  PG_RETURN_VOID();
}

PG_OUTBOX_FUNCTION(pg_outbox_check_url) {
  const char* url = text_arg(fcinfo, 0);
  if (url == nullptr) throw SqlError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "url must not be null");
  refuse_if(pg_outbox::core::check_url(url), ERRCODE_INVALID_PARAMETER_VALUE);
  PG_RETURN_VOID();
}

PG_OUTBOX_FUNCTION(pg_outbox_check_channel) {
  const char* channel = text_arg(fcinfo, 0);
  if (channel == nullptr) throw SqlError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "channel must not be null");
  refuse_if(pg_outbox::core::check_channel(channel), ERRCODE_INVALID_PARAMETER_VALUE);
  PG_RETURN_VOID();
}

PG_OUTBOX_FUNCTION(pg_outbox_check_secret) {
  const char* secret = text_arg(fcinfo, 0);
  if (secret == nullptr) throw SqlError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "secret must not be null");
  refuse_if(pg_outbox::core::check_secret(secret), ERRCODE_INVALID_PARAMETER_VALUE);
  PG_RETURN_VOID();
}

void pg_outbox::pg::check_idempotency_key(const char* key) {
  refuse_if(pg_outbox::core::check_idempotency_key(key), ERRCODE_INVALID_PARAMETER_VALUE);
}

void pg_outbox::pg::check_headers(Datum headers) {
  const char* json = pg_call([&] {
    Jsonb* jb = DatumGetJsonbP(headers);
    return static_cast<const char*>(JsonbToCString(nullptr, &jb->root, VARSIZE(jb)));
  });
  auto parsed = pg_outbox::core::parse_string_object(json);
  if (!parsed.pairs) throw SqlError(ERRCODE_INVALID_PARAMETER_VALUE, parsed.error);
  for (const auto& [name, value] : *parsed.pairs)
    refuse_if(pg_outbox::core::check_header(name, value), ERRCODE_INVALID_PARAMETER_VALUE);
}

PG_OUTBOX_FUNCTION(pg_outbox_check_idempotency_key) {
  const char* key = text_arg(fcinfo, 0);
  if (key == nullptr) throw SqlError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "idempotency_key must not be null");
  pg_outbox::pg::check_idempotency_key(key);
  PG_RETURN_VOID();
}

// headers: a JSON object whose values are strings, each name a token, no CR/LF/NUL.
PG_OUTBOX_FUNCTION(pg_outbox_check_headers) {
  if (PG_ARGISNULL(0)) throw SqlError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "headers must not be null");
  pg_outbox::pg::check_headers(PG_GETARG_DATUM(0));
  PG_RETURN_VOID();
}

// url: refused (42501) when the egress policy denies its host as written (an address
// literal, or a name a host pattern denies). The message names the rule, never the URL
// (which may carry credentials).
PG_OUTBOX_FUNCTION(pg_outbox_check_egress) {
  const char* url = text_arg(fcinfo, 0);
  if (url == nullptr) throw SqlError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "url must not be null");
  pg_outbox::core::EgressPolicy policy = pg_outbox::pg::egress_policy();
  if (policy.empty()) PG_RETURN_VOID();
  auto decision = pg_outbox::core::check_egress_host(policy, pg_outbox::core::url_host(url));
  if (!decision.allowed)
    throw SqlError(ERRCODE_INSUFFICIENT_PRIVILEGE,
                   "the egress policy refuses this url's host (rule \"" + decision.rule + "\")",
                   "The superuser settings pg_outbox.egress_allow and pg_outbox.egress_deny decide where the "
                   "server may send.");
  PG_RETURN_VOID();
}
