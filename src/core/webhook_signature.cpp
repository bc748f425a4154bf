#include "core/webhook_signature.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <climits>
#include <stdexcept>

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

std::string hmac_sha256(std::string_view key, std::string_view message) {
  if (key.size() > static_cast<size_t>(INT_MAX)) throw std::invalid_argument("HMAC key is too long");
  // OpenSSL treats a NULL key specially, so an empty key still gets a valid pointer.
  static const unsigned char empty = 0;
  const auto* key_ptr = key.empty() ? &empty : reinterpret_cast<const unsigned char*>(key.data());
  const auto* msg_ptr = message.empty() ? &empty : reinterpret_cast<const unsigned char*>(message.data());
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int out_len = 0;
  if (HMAC(EVP_sha256(), key_ptr, static_cast<int>(key.size()), msg_ptr, message.size(), out, &out_len) == nullptr ||
      out_len != 32)
    throw std::runtime_error("HMAC-SHA256 computation failed in libcrypto");
  return std::string(reinterpret_cast<const char*>(out), out_len);
}

std::string signed_content(std::string_view webhook_id, int64_t timestamp_unix_s, std::string_view body) {
  std::string content;
  std::string ts = std::to_string(timestamp_unix_s);
  content.reserve(webhook_id.size() + ts.size() + body.size() + 2);
  content.append(webhook_id).append(1, '.').append(ts).append(1, '.').append(body);
  return content;
}

std::string webhook_signatures(const SigningKeys& keys, std::string_view webhook_id, int64_t timestamp_unix_s,
                               std::string_view body) {
  if (keys.empty()) return {};
  const std::string content = signed_content(webhook_id, timestamp_unix_s, body);
  std::string header;
  for (const SigningKey& key : keys) {
    if (!header.empty()) header += ' ';
    header += key.sign(content);
  }
  return header;
}

std::string webhook_signature(std::string_view secret, std::string_view webhook_id, int64_t timestamp_unix_s,
                              std::string_view body) {
  return SigningKey::parse(secret).sign(signed_content(webhook_id, timestamp_unix_s, body));
}

}  // namespace pg_outbox::core
