// A webhook signing secret, parsed once, in either scheme of Standard Webhooks
// (docs/delivery.md, Signatures):
//   "whsec_" + base64 of 24 to 64 random bytes: HMAC-SHA256, signatures "v1,<base64>";
//   "whsk_"  + base64 of an ed25519 private key: signatures "v1a,<base64>", which
//              receivers verify with the public key "whpk_" + base64 of its 32 bytes.
// The whsk_ key is the 32-byte seed, or the 64 bytes of the seed followed by its public
// key (the key pair as Svix, the specification's authors, serialize it); both sign the
// same.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pg_outbox::core {

enum class SignatureScheme { kHmacSha256, kEd25519 };

class SigningKey {
 public:
  // Throws std::invalid_argument when secret fails check_secret (validation.hpp), with
  // its message, which never contains the secret.
  static SigningKey parse(std::string_view secret);

  SignatureScheme scheme() const;
  // "v1,<base64>" or "v1a,<base64>": the signature of content in this key's scheme.
  std::string sign(std::string_view content) const;
  // "whpk_<base64>" for an ed25519 key; empty for an HMAC secret, which has none.
  std::string public_key() const;

 private:
  struct Material;
  explicit SigningKey(std::shared_ptr<const Material> material) : material_(std::move(material)) {}
  // Shared and immutable: copying a key into each request costs a reference count.
  std::shared_ptr<const Material> material_;
};

using SigningKeys = std::vector<SigningKey>;

// One of an endpoint's secrets and the moment it stops signing.
struct RotatingKey {
  SigningKey key;
  int64_t expires_at_ms = 0;  // unix ms; 0: the current secret, which does not expire
};

// The keys that sign a request made at now_ms, in the order given (current first): those
// whose expiry has not come. A secret forgotten this way needs no SQL: the worker reads
// each secret with its expiry (docs/operations.md, Rotating a secret).
SigningKeys keys_in_force(const std::vector<RotatingKey>& keys, int64_t now_ms);

}  // namespace pg_outbox::core
