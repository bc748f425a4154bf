// Which webhook URLs the plain HTTP/1.1 client (http/plain_client.hpp) may serve itself:
// http:// to an IP literal, nothing that needs a resolver, TLS, credentials or libcurl's URL
// repairs. Everything else is left to libcurl, so the check errs on the side of "no": a URL
// it turns away costs a little speed, a URL it wrongly takes would be sent differently from
// the way libcurl sends it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pg_outbox::core {

// Where and what to send, as libcurl 7.88 would for the same URL.
struct PlainHttpTarget {
  int family = 0;                  // AF_INET or AF_INET6
  unsigned char address[16] = {};  // network order: 4 bytes for AF_INET, 16 for AF_INET6
  uint16_t port = 80;
  // The Host header's value: "127.0.0.1", "127.0.0.1:8080", "[::1]:8080"; the port is left
  // out when it is 80, and an IPv6 literal is written the shorter of as given and inet_ntop's
  // form ("[0:0:0:0:0:0:0:1]" -> "[::1]"), as libcurl does.
  std::string host_header;
  // The request target: path and query as written, "/" when the URL has no path (and "/?q"
  // for a query without one); the fragment dropped.
  std::string target;
  // "127.0.0.1" / "::1" (inet_ntop's form), for error messages.
  std::string address_text;
};

// The target when url is http:// (scheme case-insensitive) to an IP literal (an IPv4 dotted
// quad as inet_pton accepts it, or a bracketed IPv6 literal without zone id) with an optional
// decimal port 1..65535, and every character of the URL is printable ASCII 0x21..0x7E.
// std::nullopt for anything else: https, host names, userinfo ('@' in the authority), an
// empty host or port, a bad port, a space or non-ASCII byte anywhere, '%' in the authority,
// and a path with "." or ".." segments (libcurl removes those; it is left to do so).
std::optional<PlainHttpTarget> plain_http_target(std::string_view url);

}  // namespace pg_outbox::core
