// Signing of outgoing webhooks exactly as the Standard Webhooks specification
// (https://www.standardwebhooks.com) describes, so that its reference verifiers
// accept what we send.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pg_outbox::core {

// HMAC-SHA256 (RFC 2104) of message under key: 32 raw bytes. Throws
// std::runtime_error only if libcrypto itself fails.
std::string hmac_sha256(std::string_view key, std::string_view message);

// The value of the webhook-signature header:
//   "v1," + base64(HMAC-SHA256(key, webhook_id + "." + timestamp + "." + body))
// where key is the base64-decoded part of whsec_secret after "whsec_" and
// timestamp is the decimal unix time in seconds (the webhook-timestamp header).
// Throws std::invalid_argument when whsec_secret fails check_secret; the message
// explains why but never contains the secret.
std::string webhook_signature(std::string_view whsec_secret, std::string_view webhook_id, int64_t timestamp_unix_s,
                              std::string_view body);

}  // namespace pg_outbox::core
