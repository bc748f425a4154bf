// Signing of outgoing webhooks exactly as the Standard Webhooks specification
// (https://www.standardwebhooks.com) describes, so that its reference verifiers
// accept what we send: symmetric ("v1", HMAC-SHA256) and asymmetric ("v1a", ed25519)
// signatures, several of them during a secret's rotation (docs/delivery.md, Signatures).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/signing_key.hpp"

namespace pg_outbox::core {

// HMAC-SHA256 (RFC 2104) of message under key: 32 raw bytes. Throws
// std::runtime_error only if libcrypto itself fails.
std::string hmac_sha256(std::string_view key, std::string_view message);

// What every signature covers: webhook_id + "." + timestamp + "." + body, where
// timestamp is the decimal unix time in seconds (the webhook-timestamp header).
std::string signed_content(std::string_view webhook_id, int64_t timestamp_unix_s, std::string_view body);

// The value of the webhook-signature header: one signature per key, in the order
// given, separated by single spaces; each key's content is built once and signed once.
// Empty for no key.
std::string webhook_signatures(const SigningKeys& keys, std::string_view webhook_id, int64_t timestamp_unix_s,
                               std::string_view body);

// The signature of one secret ("whsec_..." -> "v1,...", "whsk_..." -> "v1a,...").
// Throws std::invalid_argument when the secret fails check_secret; the message
// explains why but never contains the secret.
std::string webhook_signature(std::string_view secret, std::string_view webhook_id, int64_t timestamp_unix_s,
                              std::string_view body);

}  // namespace pg_outbox::core
