// Ed25519 signatures (RFC 8032) through OpenSSL's EVP interface: the asymmetric scheme
// of Standard Webhooks ("v1a"), whose receivers verify with the public key only.
#pragma once

#include <memory>
#include <string>
#include <string_view>

struct evp_pkey_st;  // OpenSSL's EVP_PKEY, kept out of the headers that include this one

namespace pg_outbox::core {

constexpr size_t kEd25519SeedBytes = 32;       // the private key as RFC 8032 defines it
constexpr size_t kEd25519PublicKeyBytes = 32;  // the public key, derived from the seed
constexpr size_t kEd25519SignatureBytes = 64;

// A private key, parsed once. Immutable after construction, so one key may sign from
// the worker's thread and the delivery thread at once (each signature uses its own
// EVP_MD_CTX; the shared EVP_PKEY is only read, as a TLS server's key is).
class Ed25519Key {
 public:
  // seed: the 32 raw bytes of the private key. Throws std::invalid_argument for another
  // length (the message never contains the seed), std::runtime_error if libcrypto fails.
  explicit Ed25519Key(std::string_view seed);

  // The 32 raw bytes of the public key.
  std::string public_key() const;
  // The 64 raw bytes of the signature of message (deterministic, RFC 8032 section 5.1.6).
  std::string sign(std::string_view message) const;

 private:
  std::shared_ptr<evp_pkey_st> key_;
};

}  // namespace pg_outbox::core
