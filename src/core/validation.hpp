// Checks of user-supplied values that the SQL functions and the worker share.
// Each returns std::nullopt when the value is acceptable, else a one-line English
// message in PostgreSQL's style (lower-case start, no trailing period) that the
// caller puts into ereport(ERROR, errmsg(...)).
//
// No message ever quotes the checked value: URLs may carry credentials, header
// values may carry tokens, and secrets must never reach an error message or the
// server log. The caller knows which argument it passed and can name it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pg_outbox::core {

// Why a payload of `size` bytes is refused (enqueue) or dead-lettered unsent (the
// worker) under the max_payload_size setting of `limit` bytes.
std::string payload_too_large(int64_t size, int64_t limit);

// Endpoint names: ^[a-z0-9][a-z0-9_.-]{0,62}$ (fits in a PostgreSQL name).
std::optional<std::string> check_endpoint_name(std::string_view name);

// An absolute http:// or https:// URL (scheme case-insensitive) with a host
// (registered name, dotted IPv4, or bracketed IPv6), an optional port 1..65535 and
// an optional path and query. Only printable ASCII is accepted (percent-encode the
// rest), "%" must start a valid percent-escape, and fragments are refused because
// they are never sent to the server.
std::optional<std::string> check_url(std::string_view url);

// The host of a URL that check_url accepts, as written, without the brackets of an
// IPv6 literal ("" for a URL it refuses): what the egress policy's host patterns and
// IP-literal checks look at.
std::string url_host(std::string_view url);

// Maximum length of one header value, in bytes.
constexpr size_t kMaxHeaderValueBytes = 8192;

// An HTTP header field: the name is a non-empty RFC 9110 token; the value has no
// CR, LF, NUL or other control character except horizontal tab (so nothing can be
// smuggled into the request), and is at most kMaxHeaderValueBytes long. Bytes
// >= 0x80 are allowed in values (obs-text, e.g. UTF-8).
std::optional<std::string> check_header(std::string_view name, std::string_view value);

// The prefixes of Standard Webhooks keys (docs/delivery.md, Signatures).
constexpr std::string_view kHmacSecretPrefix = "whsec_";
constexpr std::string_view kEd25519SecretPrefix = "whsk_";
constexpr std::string_view kEd25519PublicKeyPrefix = "whpk_";

// A Standard Webhooks signing secret, followed by standard, padded base64:
//   "whsec_" (HMAC-SHA256): 24..64 bytes (the key length range the specification
//            recommends);
//   "whsk_"  (ed25519): the 32-byte seed, or 64 bytes: the seed and then its public key
//            (the key pair's serialization), which must match the seed.
std::optional<std::string> check_secret(std::string_view secret);

// An idempotency key, which becomes the webhook-id header: not starting with "msg_"
// (pg_outbox's own webhook-ids), 1..200 characters
// (UTF-8 code points; the text must be valid UTF-8), no ".", since "." separates
// the parts of the signed content, no whitespace (ASCII or Unicode) and no control
// characters (C0, DEL, C1).
std::optional<std::string> check_idempotency_key(std::string_view key);

// A NOTIFY channel: 1..63 bytes (PostgreSQL truncates identifiers at
// NAMEDATALEN - 1), no NUL or other control characters.
std::optional<std::string> check_channel(std::string_view channel);

}  // namespace pg_outbox::core
