#include "core/plain_http_url.hpp"

#include "core/ascii.hpp"

#include <arpa/inet.h>

#include "core/cpp_only.hpp"

namespace pg_outbox::core {
namespace {

constexpr std::string_view kScheme = "http://";

bool printable_ascii(std::string_view s) {
  for (const char c : s)
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7E) return false;
  return true;
}

// Decimal digits only, 1..65535; leading zeros are allowed ("0080" is 80, as for libcurl).
std::optional<uint16_t> parse_port(std::string_view digits) {
  if (digits.empty()) return std::nullopt;
  unsigned long v = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<unsigned long>(c - '0');
    if (v > 65535) return std::nullopt;
  }
  if (v == 0) return std::nullopt;
  return static_cast<uint16_t>(v);
}

// libcurl normalises a path's "." and ".." segments away (RFC 3986 section 5.2.4); such
// paths stay with libcurl rather than being rewritten here a second way.
bool has_dot_segment(std::string_view path) {
  while (!path.empty()) {
    path.remove_prefix(1);  // the '/'
    const auto slash = path.find('/');
    const std::string_view segment = path.substr(0, slash);
    if (segment == "." || segment == "..") return true;
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash);
  }
  return false;
}

}  // namespace

std::optional<PlainHttpTarget> plain_http_target(std::string_view url) {
  if (!printable_ascii(url) || url.size() < kScheme.size() || !iequals(url.substr(0, kScheme.size()), kScheme))
    return std::nullopt;
  url.remove_prefix(kScheme.size());
  const auto authority_end = url.find_first_of("/?#");
  const std::string_view authority = url.substr(0, authority_end);
  const std::string_view rest =
      authority_end == std::string_view::npos ? std::string_view{} : url.substr(authority_end);
  // '@': credentials; '%': a zone id or a percent-encoded host, both libcurl's to read.
  if (authority.find_first_of("@%") != std::string_view::npos) return std::nullopt;

  PlainHttpTarget t;
  std::string_view host;  // without the brackets
  std::string_view after_host;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = authority.substr(1, close - 1);
    after_host = authority.substr(close + 1);
    t.family = AF_INET6;
  } else {
    const auto colon = authority.find(':');
    host = authority.substr(0, colon);
    after_host = colon == std::string_view::npos ? std::string_view{} : authority.substr(colon);
    t.family = AF_INET;
  }
  if (!after_host.empty()) {
    if (after_host.front() != ':') return std::nullopt;
    const auto port = parse_port(after_host.substr(1));
    if (!port) return std::nullopt;
    t.port = *port;
  }
  const std::string host_text(host);  // inet_pton wants a terminated string
  if (host_text.empty() || inet_pton(t.family, host_text.c_str(), t.address) != 1) return std::nullopt;
  char text[INET6_ADDRSTRLEN];
  if (inet_ntop(t.family, t.address, text, sizeof text) == nullptr) return std::nullopt;
  t.address_text = text;

  if (t.family == AF_INET6) {
    t.host_header = "[";
    t.host_header += t.address_text.size() < host.size() ? std::string_view(t.address_text) : host;
    t.host_header += "]";
  } else {
    t.host_header = host_text;
  }
  if (t.port != 80) t.host_header += ":" + std::to_string(t.port);

  const std::string_view target = rest.substr(0, rest.find('#'));
  if (target.empty() || target.front() == '?') t.target = "/";
  t.target += target;
  if (has_dot_segment(target.substr(0, target.find('?')))) return std::nullopt;
  return t;
}

}  // namespace pg_outbox::core
