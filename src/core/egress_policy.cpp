#include "core/egress_policy.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstring>

#include "core/ascii.hpp"
#include "core/cpp_only.hpp"

namespace pg_outbox::core {

namespace {

using Kind = EgressRule::Kind;

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_lower(c);
  return out;
}

// The rule as it goes into a message: bytes that are not printable ASCII become \xNN
// so that the message stays one readable line; '"' and '\' are escaped.
std::string quoted(std::string_view rule) {
  std::string out = "\"";
  for (char c : rule) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7F) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
  }
  return out + "\"";
}

// An address to match, IPv4-mapped IPv6 already folded into IPv4.
struct IpAddress {
  bool v4 = false;
  std::array<unsigned char, 16> bytes{};  // network byte order; IPv4 in the first 4
};

bool is_v4_mapped(const unsigned char* b) {
  for (int i = 0; i < 10; ++i)
    if (b[i] != 0) return false;
  return b[10] == 0xFF && b[11] == 0xFF;
}

IpAddress from_v4(const unsigned char* b) {
  IpAddress a;
  a.v4 = true;
  std::memcpy(a.bytes.data(), b, 4);
  return a;
}

IpAddress from_v6(const unsigned char* b) {
  if (is_v4_mapped(b)) return from_v4(b + 12);
  IpAddress a;
  std::memcpy(a.bytes.data(), b, 16);
  return a;
}

std::optional<IpAddress> address_of(const struct sockaddr* address) {
  if (address == nullptr) return std::nullopt;
  // Copied rather than cast: the caller's buffer need not be aligned for the type.
  if (address->sa_family == AF_INET) {
    sockaddr_in in;
    std::memcpy(&in, address, sizeof in);
    return from_v4(reinterpret_cast<const unsigned char*>(&in.sin_addr));
  }
  if (address->sa_family == AF_INET6) {
    sockaddr_in6 in6;
    std::memcpy(&in6, address, sizeof in6);
    return from_v6(in6.sin6_addr.s6_addr);
  }
  return std::nullopt;
}

// The forms inet_aton reads as an IPv4 address (1 to 4 parts, each decimal, octal or
// hex: "127.1", "0x7f000001", "017700000001"). getaddrinfo reads a host name in any of
// these forms as that address, without asking DNS, and libcurl normalizes such hosts
// the same way, so they are IP literals, not names. The character set is checked
// first because glibc's inet_aton also accepts trailing whitespace and anything after it.
std::optional<IpAddress> numeric_ipv4(std::string_view s) {
  if (s.empty() || s.size() > 64) return std::nullopt;
  for (char c : s)
    if (!is_digit(c) && !(c >= 'a' && c <= 'f') && !(c >= 'A' && c <= 'F') && c != 'x' && c != 'X' && c != '.')
      return std::nullopt;
  in_addr in;
  if (inet_aton(std::string(s).c_str(), &in) == 0) return std::nullopt;
  return from_v4(reinterpret_cast<const unsigned char*>(&in));
}

std::optional<IpAddress> ipv6_literal(std::string_view s) {
  if (s.empty() || s.size() > INET6_ADDRSTRLEN) return std::nullopt;
  in6_addr in6;
  if (inet_pton(AF_INET6, std::string(s).c_str(), &in6) != 1) return std::nullopt;
  return from_v6(in6.s6_addr);
}

// The URL's host, ready to be matched.
struct Target {
  std::string name;                  // lower-case, without a trailing dot
  std::optional<IpAddress> literal;  // set when the host is an IP literal
};

Target target_of(std::string_view host) {
  Target t;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (!host.empty() && host.back() == '.') {
    host.remove_suffix(1);
  }
  t.name = lower(host);
  t.literal = host.find(':') != std::string_view::npos ? ipv6_literal(host) : numeric_ipv4(host);
  return t;
}

bool is_range(const EgressRule& rule) { return rule.kind == Kind::ipv4_range || rule.kind == Kind::ipv6_range; }

bool host_matches(const EgressRule& rule, const Target& target) {
  switch (rule.kind) {
    case Kind::any_host:
      return true;
    case Kind::exact_host:
      return !target.literal && target.name == rule.host;
    case Kind::host_suffix:
      // rule.host keeps its leading dot, so "*.example.com" cannot match
      // "badexample.com", and the length check keeps out "example.com" itself.
      return !target.literal && target.name.size() > rule.host.size() && ends_with(target.name, rule.host);
    default:
      return false;
  }
}

bool range_contains(const EgressRule& rule, const IpAddress& address) {
  if (rule.kind == Kind::ipv4_range) {
    if (!address.v4) return false;
  } else if (rule.kind == Kind::ipv6_range) {
    if (address.v4) return false;
  } else {
    return false;
  }
  const size_t full_bytes = static_cast<size_t>(rule.prefix_length / 8);
  const int rest_bits = rule.prefix_length % 8;
  if (std::memcmp(rule.network.data(), address.bytes.data(), full_bytes) != 0) return false;
  if (rest_bits == 0) return true;
  const auto mask = static_cast<unsigned char>(0xFF << (8 - rest_bits));
  return ((rule.network[full_bytes] ^ address.bytes[full_bytes]) & mask) == 0;
}

bool range_contains(const EgressRule& rule, const std::optional<IpAddress>& address) {
  return address && range_contains(rule, *address);
}

EgressDecision allowed() { return EgressDecision{true, {}}; }
EgressDecision denied(std::string_view rule) { return EgressDecision{false, std::string(rule)}; }

// ---- parsing ----

class RuleParser {
 public:
  explicit RuleParser(std::string_view text) : text_(text) {}

  std::optional<std::string> parse(EgressRule& rule) {
    rule = EgressRule{};
    rule.text = std::string(text_);
    for (char c : text_) {
      auto u = static_cast<unsigned char>(c);
      if (u >= 0x80)
        return bad("non-ASCII characters are not allowed (write an internationalized name in its xn-- form)");
      if (u <= 0x20 || u == 0x7F) return bad("a rule must not contain whitespace or control characters");
    }
    if (text_.find("://") != std::string_view::npos)
      return bad("a rule is a host name pattern or an address range, not a URL");
    if (text_.front() == '[') return bad("write IPv6 addresses without brackets");
    if (text_.find('/') != std::string_view::npos || text_.find(':') != std::string_view::npos)
      return parse_range(rule);
    bool digits_and_dots = true;
    for (char c : text_)
      if (!is_digit(c) && c != '.') digits_and_dots = false;
    in_addr ignored;
    if (inet_pton(AF_INET, std::string(text_).c_str(), &ignored) == 1) return parse_range(rule);
    if (numeric_ipv4(text_)) return bad("an IPv4 address must be written as a dotted quad a.b.c.d");
    if (digits_and_dots) return bad("not a valid IPv4 address");
    return parse_host_pattern(rule);
  }

 private:
  std::string bad(std::string_view why) const {
    return "invalid egress rule " + quoted(text_) + ": " + std::string(why);
  }

  std::optional<std::string> parse_range(EgressRule& rule) {
    const size_t slash = text_.find('/');
    const std::string address(text_.substr(0, slash));
    const bool v6 = address.find(':') != std::string::npos;
    const int max_prefix = v6 ? 128 : 32;
    int prefix = max_prefix;  // a bare address is a range of one
    if (slash != std::string_view::npos) {
      std::string_view digits = text_.substr(slash + 1);
      bool ok = !digits.empty() && digits.size() <= 3;
      for (char c : digits) ok = ok && is_digit(c);
      if (ok) {
        prefix = 0;
        for (char c : digits) prefix = prefix * 10 + (c - '0');
      }
      if (!ok || prefix > max_prefix) return bad("prefix length must be 0 to " + std::to_string(max_prefix));
    }
    unsigned char bytes[16] = {};
    if (inet_pton(v6 ? AF_INET6 : AF_INET, address.c_str(), bytes) != 1) {
      // "example.com:443" is the likely mistake behind a single colon.
      if (v6 && address.find(':') == address.rfind(':'))
        return bad("a rule must not contain a port (write the host or address alone)");
      return bad(v6 ? "not a valid IPv6 address" : "not a valid IPv4 address");
    }
    // Bits beyond the prefix are refused, not silently masked (see the header).
    unsigned char network[16] = {};
    std::memcpy(network, bytes, sizeof network);
    for (int bit = prefix; bit < max_prefix; ++bit)
      network[bit / 8] &= static_cast<unsigned char>(~(0x80 >> (bit % 8)));
    if (std::memcmp(network, bytes, sizeof network) != 0) {
      char text[INET6_ADDRSTRLEN];
      inet_ntop(v6 ? AF_INET6 : AF_INET, network, text, sizeof text);
      return bad("address has bits set beyond the prefix length (the range starts at " + std::string(text) + "/" +
                 std::to_string(prefix) + ")");
    }
    if (v6 && prefix >= 96 && is_v4_mapped(network)) {
      // ::ffff:a.b.c.d/n is the IPv4 range a.b.c.d/(n-96): mapped addresses are
      // matched as IPv4, so an IPv6 rule over them would never match anything.
      rule.kind = Kind::ipv4_range;
      std::memcpy(rule.network.data(), network + 12, 4);
      rule.prefix_length = prefix - 96;
    } else {
      rule.kind = v6 ? Kind::ipv6_range : Kind::ipv4_range;
      std::memcpy(rule.network.data(), network, v6 ? 16 : 4);
      rule.prefix_length = prefix;
    }
    return std::nullopt;
  }

  std::optional<std::string> parse_host_pattern(EgressRule& rule) {
    if (text_ == "*") {
      rule.kind = Kind::any_host;
      return std::nullopt;
    }
    std::string_view name = text_;
    const bool wildcard = name.substr(0, 2) == "*.";
    if (wildcard) name.remove_prefix(2);
    if (name.find('*') != std::string_view::npos)
      return bad("\"*\" may only stand alone or begin a host pattern as \"*.\"");
    if (!name.empty() && name.back() == '.') name.remove_suffix(1);
    if (name.empty()) return bad(wildcard ? "\"*.\" must be followed by a domain" : "empty host pattern");
    for (char c : name)
      if (!is_alpha(c) && !is_digit(c) && c != '-' && c != '.' && c != '_')
        return bad(
            "a host pattern may contain only letters, digits, \"-\", \".\" and \"_\", after an optional "
            "leading \"*.\"");
    if (name.front() == '.' && !wildcard)
      return bad("a host pattern must not start with \".\" (write \"*" + std::string(name) +
                 "\" to match the names below " + std::string(name.substr(1)) + ")");
    if (name.front() == '.' || name.find("..") != std::string_view::npos)
      return bad("a host pattern must not contain an empty label");
    if (name.size() > 253) return bad("a host pattern must be at most 253 characters long");
    rule.kind = wildcard ? Kind::host_suffix : Kind::exact_host;
    rule.host = (wildcard ? "." : "") + lower(name);
    return std::nullopt;
  }

  std::string_view text_;
};

}  // namespace

std::optional<std::string> parse_egress_rules(std::string_view text, std::vector<EgressRule>& out) {
  std::vector<EgressRule> rules;
  while (true) {
    const size_t comma = text.find(',');
    std::string_view entry = trim(text.substr(0, comma));
    if (!entry.empty()) {
      EgressRule rule;
      if (auto err = RuleParser(entry).parse(rule)) return err;
      rules.push_back(std::move(rule));
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  out = std::move(rules);
  return std::nullopt;
}

EgressDecision check_egress(const EgressPolicy& policy, std::string_view host, const struct sockaddr* address) {
  if (policy.empty()) return allowed();
  const std::optional<IpAddress> connected = address_of(address);
  if (!connected) return denied(kEgressNoAddress);
  const Target target = target_of(host);
  for (const EgressRule& rule : policy.deny)
    if (host_matches(rule, target) || range_contains(rule, *connected) || range_contains(rule, target.literal))
      return denied(rule.text);
  if (policy.allow.empty()) return allowed();
  for (const EgressRule& rule : policy.allow)
    if (host_matches(rule, target) || range_contains(rule, *connected)) return allowed();
  return denied(kEgressNotAllowed);
}

EgressDecision check_egress_host(const EgressPolicy& policy, std::string_view host) {
  if (policy.empty()) return allowed();
  const Target target = target_of(host);
  for (const EgressRule& rule : policy.deny)
    if (host_matches(rule, target) || range_contains(rule, target.literal)) return denied(rule.text);
  if (policy.allow.empty()) return allowed();
  for (const EgressRule& rule : policy.allow) {
    if (host_matches(rule, target) || range_contains(rule, target.literal)) return allowed();
    // A name's addresses are not known yet: a range may still allow them at connect time.
    if (!target.literal && is_range(rule)) return allowed();
  }
  return denied(kEgressNotAllowed);
}

}  // namespace pg_outbox::core
