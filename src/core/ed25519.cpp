#include "core/ed25519.hpp"

#include <openssl/evp.h>

#include <stdexcept>

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

namespace {

const unsigned char* bytes(std::string_view s) {
  // OpenSSL wants a valid pointer even for an empty input.
  static const unsigned char empty = 0;
  return s.empty() ? &empty : reinterpret_cast<const unsigned char*>(s.data());
}

}  // namespace

Ed25519Key::Ed25519Key(std::string_view seed) {
  if (seed.size() != kEd25519SeedBytes) throw std::invalid_argument("an ed25519 private key must be 32 bytes long");
  EVP_PKEY* key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, bytes(seed), seed.size());
  if (key == nullptr) throw std::runtime_error("ed25519 key set-up failed in libcrypto");
  key_.reset(key, EVP_PKEY_free);
}

std::string Ed25519Key::public_key() const {
  std::string out(kEd25519PublicKeyBytes, '\0');
  size_t length = out.size();
  if (EVP_PKEY_get_raw_public_key(key_.get(), reinterpret_cast<unsigned char*>(out.data()), &length) != 1 ||
      length != kEd25519PublicKeyBytes)
    throw std::runtime_error("ed25519 public key derivation failed in libcrypto");
  return out;
}

std::string Ed25519Key::sign(std::string_view message) const {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  std::string out(kEd25519SignatureBytes, '\0');
  size_t length = out.size();
  // Ed25519 hashes the message itself (PureEdDSA): no digest is named, and the message
  // goes in whole, in one call.
  if (!context || EVP_DigestSignInit(context.get(), nullptr, nullptr, nullptr, key_.get()) != 1 ||
      EVP_DigestSign(context.get(), reinterpret_cast<unsigned char*>(out.data()), &length, bytes(message),
                     message.size()) != 1 ||
      length != kEd25519SignatureBytes)
    throw std::runtime_error("ed25519 signing failed in libcrypto");
  return out;
}

}  // namespace pg_outbox::core
