#include "core/signing_key.hpp"

#include <openssl/crypto.h>

#include <stdexcept>

#include "core/base64.hpp"
#include "core/ed25519.hpp"
#include "core/validation.hpp"
#include "core/webhook_signature.hpp"
#include "core/cpp_only.hpp"

namespace pg_outbox::core {

struct SigningKey::Material {
  SignatureScheme scheme = SignatureScheme::kHmacSha256;
  std::string hmac_key;              // kHmacSha256: the decoded key
  std::unique_ptr<Ed25519Key> seed;  // kEd25519
  ~Material() { OPENSSL_cleanse(hmac_key.data(), hmac_key.size()); }
};

SigningKey SigningKey::parse(std::string_view secret) {
  if (auto problem = check_secret(secret)) throw std::invalid_argument(*problem);
  auto material = std::make_shared<Material>();
  // check_secret has just proven that the part after the prefix decodes.
  if (secret.substr(0, kHmacSecretPrefix.size()) == kHmacSecretPrefix) {
    material->hmac_key = *base64_decode(secret.substr(kHmacSecretPrefix.size()));
  } else {
    std::string key = *base64_decode(secret.substr(kEd25519SecretPrefix.size()));
    material->scheme = SignatureScheme::kEd25519;
    material->seed = std::make_unique<Ed25519Key>(std::string_view(key).substr(0, kEd25519SeedBytes));
    OPENSSL_cleanse(key.data(), key.size());
  }
  return SigningKey(std::move(material));
}

SignatureScheme SigningKey::scheme() const { return material_->scheme; }

std::string SigningKey::sign(std::string_view content) const {
  if (material_->scheme == SignatureScheme::kHmacSha256)
    return "v1," + base64_encode(hmac_sha256(material_->hmac_key, content));
  return "v1a," + base64_encode(material_->seed->sign(content));
}

std::string SigningKey::public_key() const {
  if (material_->scheme != SignatureScheme::kEd25519) return {};
  return std::string(kEd25519PublicKeyPrefix) + base64_encode(material_->seed->public_key());
}

SigningKeys keys_in_force(const std::vector<RotatingKey>& keys, int64_t now_ms) {
  SigningKeys in_force;
  in_force.reserve(keys.size());
  for (const RotatingKey& k : keys)
    if (k.expires_at_ms == 0 || now_ms < k.expires_at_ms) in_force.push_back(k.key);
  return in_force;
}

}  // namespace pg_outbox::core
