#include "core/validation.hpp"

#include "core/ascii.hpp"

#include <arpa/inet.h>

#include <cstdint>

#include <openssl/crypto.h>

#include "core/base64.hpp"
#include "core/ed25519.hpp"
#include "core/cpp_only.hpp"

namespace pg_outbox::core {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool is_ctl_or_space(unsigned char c) { return c <= 0x20 || c == 0x7F; }

// RFC 3986 character classes used by check_url.
bool is_unreserved(char c) { return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_' || c == '~'; }
bool is_sub_delim(char c) {
  switch (c) {
    case '!':
    case '$':
    case '&':
    case '\'':
    case '(':
    case ')':
    case '*':
    case '+':
    case ',':
    case ';':
    case '=':
      return true;
    default:
      return false;
  }
}

// True when every "%" in s is followed by two hex digits and every other
// character satisfies allowed().
template <typename Pred>
bool all_pct_or(std::string_view s, Pred allowed) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size() || !is_hex(s[i + 1]) || !is_hex(s[i + 2])) return false;
      i += 2;
    } else if (!allowed(s[i])) {
      return false;
    }
  }
  return true;
}

// Dotted-quad IPv4 with each part 0..255 and no leading zeros (which some
// resolvers read as octal).
bool is_ipv4(std::string_view s) {
  int parts = 0;
  size_t i = 0;
  while (true) {
    size_t start = i;
    int value = 0;
    while (i < s.size() && is_digit(s[i]) && i - start < 3) value = value * 10 + (s[i++] - '0');
    size_t len = i - start;
    if (len == 0 || value > 255 || (len > 1 && s[start] == '0')) return false;
    ++parts;
    if (i == s.size()) break;
    if (s[i] != '.' || parts == 4) return false;
    ++i;
  }
  return parts == 4;
}

// A DNS-style registered name: labels of letters, digits, "-" and "_" separated by
// single dots, with an optional trailing dot (fully qualified form). Stricter than
// RFC 3986's reg-name on purpose: libcurl's resolver would refuse the rest anyway,
// and refusing it at create_endpoint time is far more helpful.
bool is_reg_name(std::string_view s) {
  if (s.empty() || s.size() > 253 + 1) return false;
  if (s.back() == '.') s.remove_suffix(1);
  size_t label = 0;
  for (char c : s) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
    } else if (is_alpha(c) || is_digit(c) || c == '-' || c == '_') {
      if (++label > 63) return false;
    } else {
      return false;
    }
  }
  return label > 0;
}

bool all_digits(std::string_view s) {
  for (char c : s)
    if (!is_digit(c)) return false;
  return !s.empty();
}

std::optional<std::string> check_port(std::string_view port) {
  static const std::string msg = "url port must be a number from 1 to 65535";
  if (!all_digits(port) || port.size() > 5) return msg;
  long value = 0;
  for (char c : port) value = value * 10 + (c - '0');
  if (value < 1 || value > 65535) return msg;
  return std::nullopt;
}

// Decodes one UTF-8 code point at s[i], advancing i; returns -1 on malformed input
// (overlong forms, surrogates and values above U+10FFFF included).
long next_code_point(std::string_view s, size_t& i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  int extra;
  long cp;
  if (c < 0x80) {
    ++i;
    return c;
  }
  if (c >= 0xC2 && c <= 0xDF) {
    extra = 1;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    extra = 2;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    extra = 3;
    cp = c & 0x07;
  } else
    return -1;
  if (i + extra >= s.size()) return -1;  // truncated sequence
  for (int k = 1; k <= extra; ++k) {
    unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
    return -1;
  i += extra + 1;
  return cp;
}

bool is_unicode_space(long cp) {
  return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool is_unicode_control(long cp) { return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F); }

}  // namespace

std::string payload_too_large(int64_t size, int64_t limit) {
  return "payload of " + std::to_string(size) + " bytes exceeds pg_outbox.max_payload_size (" + std::to_string(limit) +
         " bytes)";
}

std::optional<std::string> check_endpoint_name(std::string_view name) {
  if (name.empty()) return "endpoint name must not be empty";
  if (name.size() > 63) return "endpoint name must be at most 63 characters long";
  auto lower_or_digit = [](char c) { return (c >= 'a' && c <= 'z') || is_digit(c); };
  if (!lower_or_digit(name[0])) return "endpoint name must start with a lower-case letter or a digit";
  for (char c : name)
    if (!lower_or_digit(c) && c != '_' && c != '.' && c != '-')
      return "endpoint name may contain only lower-case letters, digits, \"_\", \".\" and \"-\"";
  return std::nullopt;
}

std::optional<std::string> check_url(std::string_view url) {
  if (url.empty()) return "url must not be empty";
  for (char c : url) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x80) return "url must contain only ASCII characters (percent-encode the others)";
    if (is_ctl_or_space(u)) return "url must not contain whitespace or control characters";
  }
  size_t sep = url.find("://");
  if (sep == std::string_view::npos) return "url must be an absolute http:// or https:// URL";
  std::string_view scheme = url.substr(0, sep);
  if (!iequals(scheme, "http") && !iequals(scheme, "https")) return "url scheme must be http or https";
  if (url.find('#') != std::string_view::npos) return "url must not contain a fragment";

  std::string_view rest = url.substr(sep + 3);
  size_t auth_end = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, auth_end);
  std::string_view path_query = auth_end == std::string_view::npos ? "" : rest.substr(auth_end);

  size_t at = authority.rfind('@');
  if (at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    if (!all_pct_or(userinfo, [](char c) { return is_unreserved(c) || is_sub_delim(c) || c == ':'; }))
      return "url user information contains invalid characters";
    authority = authority.substr(at + 1);
  }
  if (authority.empty()) return "url must have a host";

  std::string_view host, port;
  bool has_port = false;
  if (authority[0] == '[') {
    size_t close = authority.find(']');
    if (close == std::string_view::npos) return "url host is not a valid IPv6 address";
    std::string literal(authority.substr(1, close - 1));
    in6_addr addr;
    if (literal.empty() || inet_pton(AF_INET6, literal.c_str(), &addr) != 1)
      return "url host is not a valid IPv6 address";
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return "url host is not a valid IPv6 address";
      has_port = true;
      port = after.substr(1);
    }
  } else {
    size_t colon = authority.find(':');
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      has_port = true;
      port = authority.substr(colon + 1);
    }
    if (host.empty()) return "url must have a host";
    bool numeric = true;
    for (char c : host)
      if (!is_digit(c) && c != '.') numeric = false;
    if (numeric) {
      if (!is_ipv4(host)) return "url host is not a valid IPv4 address";
    } else if (!is_reg_name(host)) {
      return "url host is not a valid host name";
    }
  }
  if (has_port) {
    if (auto err = check_port(port)) return err;
  }

  // Path and query: RFC 3986 pchar plus "/" and "?".
  if (!all_pct_or(path_query, [](char c) {
        return is_unreserved(c) || is_sub_delim(c) || c == ':' || c == '@' || c == '/' || c == '?';
      }))
    return "url path or query contains a character that must be percent-encoded or an invalid "
           "percent-encoding";
  return std::nullopt;
}

std::string url_host(std::string_view url) {
  if (check_url(url)) return {};
  std::string_view rest = url.substr(url.find("://") + 3);
  std::string_view authority = rest.substr(0, rest.find_first_of("/?"));
  size_t at = authority.rfind('@');
  if (at != std::string_view::npos) authority = authority.substr(at + 1);
  if (authority[0] == '[') return std::string(authority.substr(1, authority.find(']') - 1));
  return std::string(authority.substr(0, authority.find(':')));
}

std::optional<std::string> check_header(std::string_view name, std::string_view value) {
  if (name.empty()) return "header name must not be empty";
  for (char c : name) {
    // RFC 9110 section 5.6.2 tchar.
    bool tchar = is_alpha(c) || is_digit(c);
    switch (c) {
      case '!':
      case '#':
      case '$':
      case '%':
      case '&':
      case '\'':
      case '*':
      case '+':
      case '-':
      case '.':
      case '^':
      case '_':
      case '`':
      case '|':
      case '~':
        tchar = true;
        break;
      default:
        break;
    }
    // The offending name is not quoted: it may itself contain CR/LF.
    if (!tchar) return "header name must be an HTTP token (letters, digits and !#$%&'*+-.^_`|~)";
  }
  // The name is a valid token from here on, so it is safe to quote; the value never is.
  // Quoted only for an error: the worker checks every header of every request.
  const auto about = [name](const std::string& problem) {
    return "value of header \"" + std::string(name) + "\" " + problem;
  };
  if (value.size() > kMaxHeaderValueBytes)
    return about("must be at most " + std::to_string(kMaxHeaderValueBytes) + " bytes long");
  for (char c : value) {
    auto u = static_cast<unsigned char>(c);
    if (u == '\r' || u == '\n' || u == 0) return about("must not contain CR, LF or NUL");
    if ((u < 0x20 && u != '\t') || u == 0x7F) return about("must not contain control characters");
  }
  return std::nullopt;
}

std::optional<std::string> check_secret(std::string_view secret) {
  auto starts_with = [&](std::string_view prefix) { return secret.substr(0, prefix.size()) == prefix; };
  if (starts_with(kHmacSecretPrefix)) {
    auto key = base64_decode(secret.substr(kHmacSecretPrefix.size()));
    if (!key) return "secret must be \"whsec_\" followed by standard base64";
    if (key->size() < 24 || key->size() > 64) return "secret key must be 24 to 64 bytes long";
    return std::nullopt;
  }
  if (starts_with(kEd25519SecretPrefix)) {
    auto key = base64_decode(secret.substr(kEd25519SecretPrefix.size()));
    if (!key) return "secret must be \"whsk_\" followed by standard base64";
    std::optional<std::string> problem;
    if (key->size() == kEd25519SeedBytes + kEd25519PublicKeyBytes) {
      if (Ed25519Key(std::string_view(*key).substr(0, kEd25519SeedBytes)).public_key() !=
          std::string_view(*key).substr(kEd25519SeedBytes))
        problem = "the last 32 bytes of a 64-byte \"whsk_\" key must be the public key of its first 32";
    } else if (key->size() != kEd25519SeedBytes) {
      problem = "an ed25519 secret key (\"whsk_\") must be 32 bytes (the seed) or 64 bytes (seed and public key) long";
    }
    OPENSSL_cleanse(key->data(), key->size());
    return problem;
  }
  if (starts_with(kEd25519PublicKeyPrefix))
    return "secret must be a private key: \"whpk_\" is an ed25519 public key, which only verifies";
  return "secret must start with \"whsec_\" (HMAC-SHA256) or \"whsk_\" (ed25519)";
}

std::optional<std::string> check_idempotency_key(std::string_view key) {
  if (key.empty()) return "idempotency key must not be empty";
  if (key.substr(0, 4) == "msg_")
    return "idempotency key must not start with \"msg_\" (the webhook-ids pg_outbox makes)";
  size_t count = 0;
  for (size_t i = 0; i < key.size();) {
    long cp = next_code_point(key, i);
    if (cp < 0) return "idempotency key must be valid UTF-8";
    if (cp == '.') return "idempotency key must not contain \".\"";
    if (is_unicode_space(cp)) return "idempotency key must not contain whitespace";
    if (is_unicode_control(cp)) return "idempotency key must not contain control characters";
    if (++count > 200) return "idempotency key must be at most 200 characters long";
  }
  return std::nullopt;
}

std::optional<std::string> check_channel(std::string_view channel) {
  if (channel.empty()) return "channel name must not be empty";
  if (channel.size() > 63) return "channel name must be at most 63 bytes long";
  for (char c : channel) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) return "channel name must not contain control characters";
  }
  return std::nullopt;
}

}  // namespace pg_outbox::core
