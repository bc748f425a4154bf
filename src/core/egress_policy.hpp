// The egress policy: where the server may send HTTP. Two superuser GUCs,
// pg_outbox.egress_allow and pg_outbox.egress_deny, each hold a comma-separated list
// of rules; a rule is a host name pattern or a CIDR range. The policy is checked
// against the address libcurl actually connects to (and the URL's host name), so a
// name that resolves to 127.0.0.1 or 169.254.169.254 cannot slip past a deny of
// those ranges. Deny wins; an empty allow list allows everything not denied; a
// non-empty allow list allows only what one of its rules matches.
//
// Rules (whitespace around an entry and empty entries are ignored):
//   10.0.0.0/8, 192.0.2.1       IPv4 range, or one address (= /32)
//   fc00::/7, ::1               IPv6 range, or one address (= /128), without brackets
//   example.com                 exactly that name
//   *.example.com               any name below example.com (not example.com itself)
//   *                           every destination (names and IP literals alike)
// Host patterns are case-insensitive and ignore a trailing dot, on the pattern and on
// the host. A pattern other than "*" never matches an IP-literal host: addresses are
// matched by CIDR rules only.
//
// IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) are IPv4 addresses here, wherever they
// appear: the connected address, an IP-literal host, and a rule written in that form
// (::ffff:7f00:0/104 is the rule 127.0.0.0/8). Otherwise [::ffff:127.0.0.1] would get
// past a deny of 127.0.0.0/8. Apart from that the families are separate, as in
// pg_hba.conf: 0.0.0.0/0 is every IPv4 address, ::/0 every IPv6 one. Other IPv6
// forms that embed an IPv4 address (the deprecated IPv4-compatible ::a.b.c.d, NAT64
// 64:ff9b::/96, 6to4 2002::/16) are not special-cased: they are IPv6 addresses and
// are denied by IPv6 rules (add 64:ff9b::/96 to the deny list where NAT64 is in use).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct sockaddr;

namespace pg_outbox::core {

// One parsed rule.
struct EgressRule {
  enum class Kind {
    exact_host,   // "example.com"
    host_suffix,  // "*.example.com"
    any_host,     // "*"
    ipv4_range,   // "10.0.0.0/8", "192.0.2.1"
    ipv6_range,   // "fc00::/7", "::1"
  };
  Kind kind = Kind::exact_host;
  // The rule as written, without the surrounding whitespace: what error messages and
  // decisions quote, so the operator recognizes it.
  std::string text;
  // exact_host: the name, lower-case, without a trailing dot ("example.com").
  // host_suffix: the suffix to match, lower-case, with its leading dot (".example.com").
  std::string host;
  // Ranges: the network address in network byte order (IPv4 in the first 4 bytes),
  // with no bit set beyond prefix_length.
  std::array<unsigned char, 16> network{};
  int prefix_length = 0;  // ranges: 0..32 (IPv4) or 0..128 (IPv6)
};

// The parsed values of both GUCs. Immutable after parsing: the worker builds a new one
// when the configuration is reloaded.
struct EgressPolicy {
  std::vector<EgressRule> allow;  // pg_outbox.egress_allow
  std::vector<EgressRule> deny;   // pg_outbox.egress_deny
  // No rule at all: everything is allowed (the fast path: nothing to check).
  bool empty() const { return allow.empty() && deny.empty(); }
};

// Parses one GUC value ("" = no rules) into out, replacing its contents. On a bad rule
// returns a message naming the rule, e.g.
//   invalid egress rule "10.0.0.0/33": prefix length must be 0 to 32
// and leaves out unchanged. A range with bits set beyond its prefix ("10.0.0.1/8") is
// refused, as PostgreSQL's cidr type does, because it is more often a typo for a
// narrower range than a way of writing the wider one; the message suggests the range
// the rule would have meant. Numbers that resolvers read as IPv4 addresses but that
// are not dotted quads ("127.1", "0x7f000001") are refused too: write a.b.c.d.
std::optional<std::string> parse_egress_rules(std::string_view text, std::vector<EgressRule>& out);

// The rule text of a decision that a non-empty allow list refused.
inline constexpr std::string_view kEgressNotAllowed = "not in pg_outbox.egress_allow";
// The rule text of a decision refused because there was no IPv4 or IPv6 address to
// check (a null sockaddr or another family): the policy fails closed.
inline constexpr std::string_view kEgressNoAddress = "address family not covered by the egress policy";

struct EgressDecision {
  bool allowed = false;
  // When denied: the text of the deny rule that matched, or kEgressNotAllowed, or
  // kEgressNoAddress. Empty when allowed.
  std::string rule;
};

// The check at connect time (e.g. from CURLOPT_OPENSOCKETFUNCTION).
// host: the URL's host as written (a name, or an IP literal; brackets around an IPv6
// literal are tolerated). An IP literal includes the numeric IPv4 forms that
// getaddrinfo and libcurl accept ("127.1", "0x7f000001", "2130706433").
// address: the socket address about to be connected to (AF_INET or AF_INET6; any
// other family, or null, is denied unless the policy is empty).
// Denied when a deny rule matches: a host pattern the host, or a range the address
// (or the host, when it is an IP literal: that can only differ from the address
// through a proxy, and never allows more). Else, with a non-empty allow list, allowed
// only when an allow rule matches: a host pattern the host, or a range the address.
EgressDecision check_egress(const EgressPolicy& policy, std::string_view host, const struct sockaddr* address);

// The check without an address (create_endpoint, where only the URL is known). An
// IP-literal host is checked as the address; a name only against the host patterns:
// it is denied by a matching deny pattern, or by an allow list that has no matching
// pattern and no range at all (with ranges in the allow list, its addresses decide at
// connect time). A host that a deny rule refuses here, check_egress refuses too.
EgressDecision check_egress_host(const EgressPolicy& policy, std::string_view host);

}  // namespace pg_outbox::core
