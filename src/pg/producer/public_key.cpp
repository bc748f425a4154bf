// outbox._public_key(secret): the "whpk_" public key of an ed25519 ("whsk_") secret,
// NULL for an HMAC ("whsec_") one. outbox.endpoint_public_key calls it with the
// endpoint's current secret, which only the extension's owner can read (docs/delivery.md,
// Signatures). An error never repeats the secret.
#include "core/signing_key.hpp"
#include "pg/boundary/boundary.hpp"

extern "C" {
#include "utils/builtins.h"
}

#include <stdexcept>
#include <string>

using pg_outbox::pg::pg_call;
using pg_outbox::pg::SqlError;

PG_OUTBOX_FUNCTION(pg_outbox_public_key) {
  if (PG_ARGISNULL(0)) throw SqlError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "secret must not be null");
  const char* secret = pg_call([&] { return static_cast<const char*>(text_to_cstring(PG_GETARG_TEXT_PP(0))); });
  std::string public_key;
  try {
    public_key = pg_outbox::core::SigningKey::parse(secret).public_key();
  } catch (const std::invalid_argument& e) {
    throw SqlError(ERRCODE_INVALID_PARAMETER_VALUE, e.what());
  }
  if (public_key.empty()) PG_RETURN_NULL();
  PG_RETURN_TEXT_P(pg_call([&] { return cstring_to_text_with_len(public_key.data(), public_key.size()); }));
}
