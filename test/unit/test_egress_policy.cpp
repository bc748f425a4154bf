#include "core/egress_policy.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

using namespace pg_outbox::core;

namespace {

using Kind = EgressRule::Kind;

// PostgreSQL message style: non-empty, lower-case start, no trailing period, one line.
void expect_pg_style(const std::optional<std::string>& msg) {
  ASSERT_TRUE(msg.has_value());
  ASSERT_FALSE(msg->empty());
  EXPECT_FALSE((*msg)[0] >= 'A' && (*msg)[0] <= 'Z') << *msg;
  EXPECT_NE(msg->back(), '.') << *msg;
  EXPECT_EQ(msg->find('\n'), std::string::npos) << *msg;
}

std::vector<EgressRule> rules(std::string_view text) {
  std::vector<EgressRule> out;
  auto err = parse_egress_rules(text, out);
  EXPECT_EQ(err, std::nullopt) << text;
  return out;
}

EgressRule rule(std::string_view text) {
  auto parsed = rules(text);
  EXPECT_EQ(parsed.size(), 1u) << text;
  return parsed.empty() ? EgressRule{} : parsed[0];
}

EgressPolicy policy(std::string_view allow, std::string_view deny) {
  EgressPolicy p;
  p.allow = rules(allow);
  p.deny = rules(deny);
  return p;
}

// A socket address as libcurl hands it to the open-socket callback.
class SocketAddress {
 public:
  explicit SocketAddress(const std::string& text) {
    if (text.find(':') != std::string::npos) {
      sockaddr_in6 in6{};
      in6.sin6_family = AF_INET6;
      in6.sin6_port = htons(443);
      EXPECT_EQ(inet_pton(AF_INET6, text.c_str(), &in6.sin6_addr), 1) << text;
      std::memcpy(&storage_, &in6, sizeof in6);
    } else {
      sockaddr_in in{};
      in.sin_family = AF_INET;
      in.sin_port = htons(443);
      EXPECT_EQ(inet_pton(AF_INET, text.c_str(), &in.sin_addr), 1) << text;
      std::memcpy(&storage_, &in, sizeof in);
    }
  }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage_); }

 private:
  sockaddr_storage storage_{};
};

// Connecting to the address itself, as when the URL's host is that IP literal.
EgressDecision connect_to(const EgressPolicy& p, const std::string& address) {
  return check_egress(p, address, SocketAddress(address).get());
}

// Whether a single range rule contains an address (checked as a connected address).
bool contains(std::string_view range, const std::string& address) {
  return !connect_to(policy("", range), address).allowed;
}

}  // namespace

// ---- parsing ----

TEST(EgressParse, EmptyValuesHaveNoRules) {
  for (const char* text : {"", " ", ",", ",, ,", " \t, \n"}) {
    std::vector<EgressRule> out = rules("example.com");  // replaced, not appended to
    EXPECT_EQ(parse_egress_rules(text, out), std::nullopt) << text;
    EXPECT_TRUE(out.empty()) << text;
  }
  EXPECT_TRUE(EgressPolicy{}.empty());
  EXPECT_FALSE(policy("", "10.0.0.0/8").empty());
  EXPECT_FALSE(policy("example.com", "").empty());
}

TEST(EgressParse, KindsTextAndNormalization) {
  auto parsed = rules("  Example.COM. ,*.Hooks.Example.com,*,10.0.0.0/8 ,, 192.0.2.1,fc00::/7,::1,my_host-1");
  ASSERT_EQ(parsed.size(), 8u);
  EXPECT_EQ(parsed[0].kind, Kind::exact_host);
  EXPECT_EQ(parsed[0].text, "Example.COM.");  // as written, for messages
  EXPECT_EQ(parsed[0].host, "example.com");
  EXPECT_EQ(parsed[1].kind, Kind::host_suffix);
  EXPECT_EQ(parsed[1].host, ".hooks.example.com");
  EXPECT_EQ(parsed[2].kind, Kind::any_host);
  EXPECT_EQ(parsed[3].kind, Kind::ipv4_range);
  EXPECT_EQ(parsed[3].text, "10.0.0.0/8");
  EXPECT_EQ(parsed[3].prefix_length, 8);
  EXPECT_EQ(parsed[3].network[0], 10);
  EXPECT_EQ(parsed[4].kind, Kind::ipv4_range);
  EXPECT_EQ(parsed[4].prefix_length, 32);  // a bare address is a range of one
  EXPECT_EQ(parsed[5].kind, Kind::ipv6_range);
  EXPECT_EQ(parsed[5].prefix_length, 7);
  EXPECT_EQ(parsed[6].kind, Kind::ipv6_range);
  EXPECT_EQ(parsed[6].prefix_length, 128);
  EXPECT_EQ(parsed[7].kind, Kind::exact_host);
  EXPECT_EQ(parsed[7].host, "my_host-1");
}

TEST(EgressParse, MappedRuleBecomesIpv4Range) {
  EgressRule r = rule("::ffff:127.0.0.0/104");
  EXPECT_EQ(r.kind, Kind::ipv4_range);
  EXPECT_EQ(r.prefix_length, 8);
  EXPECT_EQ(r.network[0], 127);
  EXPECT_EQ(r.text, "::ffff:127.0.0.0/104");
  EXPECT_EQ(rule("::ffff:7f00:1").kind, Kind::ipv4_range);
  EXPECT_EQ(rule("::ffff:7f00:1").prefix_length, 32);
  EXPECT_EQ(rule("::ffff:0:0/96").prefix_length, 0);  // all of IPv4
  EXPECT_EQ(rule("::/80").kind, Kind::ipv6_range);    // wider than the mapped block: stays IPv6
}

TEST(EgressParse, PrefixTooLongMessage) {
  std::vector<EgressRule> out;
  EXPECT_EQ(parse_egress_rules("10.0.0.0/33", out),
            "invalid egress rule \"10.0.0.0/33\": prefix length must be 0 to 32");
  EXPECT_EQ(parse_egress_rules("fc00::/129", out),
            "invalid egress rule \"fc00::/129\": prefix length must be 0 to 128");
}

TEST(EgressParse, RejectsBadRulesNamingThem) {
  const char* bad[] = {"10.0.0.0/33",
                       "10.0.0.0/",
                       "10.0.0.0/-1",
                       "10.0.0.0/+8",
                       "10.0.0.0/8/8",
                       "10.0.0.0/x",
                       "10.0.0.0/0008",
                       "::/129",
                       "fc00::/",
                       "256.0.0.1",
                       "1.2.3",
                       "1.2.3.4.5",
                       "010.0.0.1/8",
                       "127.1",
                       "0x7f000001",
                       "2130706433",
                       "10.0.0.0/8.5",
                       "example.com/8",
                       "gg::1",
                       "1:2:3",
                       "[::1]",
                       "[::1]/128",
                       "example.com:443",
                       "https://example.com",
                       "exa mple.com",
                       "ex!ample.com",
                       "example.com/",
                       "*.",
                       "**",
                       "*.*.example.com",
                       "foo.*.com",
                       "*example.com",
                       "example*",
                       ".example.com",
                       "example..com",
                       ".",
                       "*..example.com",
                       "a/b"};
  for (const char* text : bad) {
    std::vector<EgressRule> out;
    auto msg = parse_egress_rules(text, out);
    expect_pg_style(msg);
    if (msg) {
      EXPECT_EQ(msg->rfind(std::string("invalid egress rule \"") + text + "\": ", 0), 0u) << *msg;
    }
  }
  // The message names the bad rule, not the whole value.
  std::vector<EgressRule> out;
  auto msg = parse_egress_rules("10.0.0.0/8, exa$mple.com , 192.168.0.0/16", out);
  ASSERT_TRUE(msg);
  EXPECT_EQ(msg->find("invalid egress rule \"exa$mple.com\": "), 0u) << *msg;
}

TEST(EgressParse, SpecificMessages) {
  std::vector<EgressRule> out;
  auto msg = [&](const char* text) { return parse_egress_rules(text, out).value_or("(accepted)"); };
  EXPECT_EQ(msg("[::1]"), "invalid egress rule \"[::1]\": write IPv6 addresses without brackets");
  EXPECT_EQ(msg("256.0.0.1"), "invalid egress rule \"256.0.0.1\": not a valid IPv4 address");
  EXPECT_EQ(msg("gg::1"), "invalid egress rule \"gg::1\": not a valid IPv6 address");
  EXPECT_EQ(msg("127.1"), "invalid egress rule \"127.1\": an IPv4 address must be written as a dotted quad a.b.c.d");
  EXPECT_EQ(msg("example.com:443"),
            "invalid egress rule \"example.com:443\": a rule must not contain a port (write the host or address "
            "alone)");
  EXPECT_EQ(msg(".example.com"),
            "invalid egress rule \".example.com\": a host pattern must not start with \".\" (write "
            "\"*.example.com\" to match the names below example.com)");
  EXPECT_EQ(msg("foo.*.com"),
            "invalid egress rule \"foo.*.com\": \"*\" may only stand alone or begin a host pattern as \"*.\"");
  EXPECT_EQ(msg("ex!ample.com"),
            "invalid egress rule \"ex!ample.com\": a host pattern may contain only letters, digits, \"-\", \".\" "
            "and \"_\", after an optional leading \"*.\"");
}

// Decision: bits beyond the prefix are refused (like PostgreSQL's cidr type), with the
// range the rule would have meant in the message.
TEST(EgressParse, RefusesHostBitsBeyondPrefix) {
  std::vector<EgressRule> out;
  EXPECT_EQ(parse_egress_rules("10.0.0.1/8", out),
            "invalid egress rule \"10.0.0.1/8\": address has bits set beyond the prefix length (the range starts "
            "at 10.0.0.0/8)");
  EXPECT_EQ(parse_egress_rules("192.168.1.0/16", out),
            "invalid egress rule \"192.168.1.0/16\": address has bits set beyond the prefix length (the range "
            "starts at 192.168.0.0/16)");
  EXPECT_EQ(parse_egress_rules("fe80::1/10", out),
            "invalid egress rule \"fe80::1/10\": address has bits set beyond the prefix length (the range starts "
            "at fe80::/10)");
  EXPECT_EQ(parse_egress_rules("1.2.3.4/0", out),
            "invalid egress rule \"1.2.3.4/0\": address has bits set beyond the prefix length (the range starts "
            "at 0.0.0.0/0)");
  EXPECT_EQ(parse_egress_rules("10.0.0.1/32, 10.0.0.0/8, 0.0.0.0/0, ::/0, fe80::/10", out), std::nullopt);
}

TEST(EgressParse, ErrorLeavesOutputUnchanged) {
  std::vector<EgressRule> out = rules("example.com, 10.0.0.0/8");
  EXPECT_TRUE(parse_egress_rules("192.168.0.0/16, bad rule", out).has_value());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].text, "example.com");
  EXPECT_EQ(out[1].text, "10.0.0.0/8");
}

TEST(EgressParse, QuotesUnprintableBytesEscaped) {
  std::vector<EgressRule> out;
  auto msg = parse_egress_rules(std::string("ex\x01"
                                            "ample.com",
                                            12),
                                out);
  expect_pg_style(msg);
  EXPECT_EQ(msg->find("invalid egress rule \"ex\\x01ample.com\": "), 0u) << *msg;
  msg = parse_egress_rules(
      "b\xc3\xbc"
      "cher.de",
      out);
  expect_pg_style(msg);
  EXPECT_EQ(msg->find("invalid egress rule \"b\\xc3\\xbccher.de\": non-ASCII"), 0u) << *msg;
  msg = parse_egress_rules("exa\tmple.com", out);
  expect_pg_style(msg);
  EXPECT_EQ(msg->find("invalid egress rule \"exa\\x09mple.com\": "), 0u) << *msg;
  msg = parse_egress_rules("a\"b", out);
  expect_pg_style(msg);
  EXPECT_EQ(msg->find("invalid egress rule \"a\\\"b\": "), 0u) << *msg;
}

// ---- CIDR matching ----

TEST(EgressCidr, Ipv4Boundaries) {
  EXPECT_FALSE(contains("10.0.0.0/8", "9.255.255.255"));
  EXPECT_TRUE(contains("10.0.0.0/8", "10.0.0.0"));
  EXPECT_TRUE(contains("10.0.0.0/8", "10.255.255.255"));
  EXPECT_FALSE(contains("10.0.0.0/8", "11.0.0.0"));
  // Prefixes that end inside a byte.
  EXPECT_FALSE(contains("172.16.0.0/12", "172.15.255.255"));
  EXPECT_TRUE(contains("172.16.0.0/12", "172.16.0.0"));
  EXPECT_TRUE(contains("172.16.0.0/12", "172.31.255.255"));
  EXPECT_FALSE(contains("172.16.0.0/12", "172.32.0.0"));
  EXPECT_FALSE(contains("100.64.0.0/10", "100.63.255.255"));
  EXPECT_TRUE(contains("100.64.0.0/10", "100.127.255.255"));
  EXPECT_FALSE(contains("100.64.0.0/10", "100.128.0.0"));
  EXPECT_TRUE(contains("128.0.0.0/1", "255.255.255.255"));
  EXPECT_FALSE(contains("128.0.0.0/1", "127.255.255.255"));
  EXPECT_TRUE(contains("192.0.2.2/31", "192.0.2.3"));
  EXPECT_FALSE(contains("192.0.2.2/31", "192.0.2.4"));
  // /32 and a bare address: exactly one address.
  for (const char* one : {"192.0.2.1/32", "192.0.2.1"}) {
    EXPECT_TRUE(contains(one, "192.0.2.1"));
    EXPECT_FALSE(contains(one, "192.0.2.0"));
    EXPECT_FALSE(contains(one, "192.0.2.2"));
  }
  // /0: every IPv4 address, and no IPv6 one.
  EXPECT_TRUE(contains("0.0.0.0/0", "0.0.0.0"));
  EXPECT_TRUE(contains("0.0.0.0/0", "255.255.255.255"));
  EXPECT_FALSE(contains("0.0.0.0/0", "2001:db8::1"));
}

TEST(EgressCidr, Ipv6Boundaries) {
  EXPECT_FALSE(contains("fc00::/7", "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"));
  EXPECT_TRUE(contains("fc00::/7", "fc00::"));
  EXPECT_TRUE(contains("fc00::/7", "fd12:3456::1"));
  EXPECT_TRUE(contains("fc00::/7", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"));
  EXPECT_FALSE(contains("fc00::/7", "fe00::"));
  EXPECT_TRUE(contains("fe80::/10", "fe80::1"));
  EXPECT_TRUE(contains("fe80::/10", "febf:ffff::1"));
  EXPECT_FALSE(contains("fe80::/10", "fec0::1"));
  EXPECT_TRUE(contains("2001:db8::/32", "2001:db8:ffff::1"));
  EXPECT_FALSE(contains("2001:db8::/32", "2001:db9::"));
  EXPECT_TRUE(contains("2001:db8::/127", "2001:db8::1"));
  EXPECT_FALSE(contains("2001:db8::/127", "2001:db8::2"));
  // /128 and a bare address: exactly one address.
  for (const char* one : {"::1/128", "::1"}) {
    EXPECT_TRUE(contains(one, "::1"));
    EXPECT_FALSE(contains(one, "::"));
    EXPECT_FALSE(contains(one, "::2"));
  }
  // ::/0: every IPv6 address, and no IPv4 one (the families are separate).
  EXPECT_TRUE(contains("::/0", "::"));
  EXPECT_TRUE(contains("::/0", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"));
  EXPECT_FALSE(contains("::/0", "127.0.0.1"));
  EXPECT_FALSE(contains("::/0", "::ffff:127.0.0.1"));  // a mapped address is IPv4
}

// ---- IPv4-mapped IPv6 addresses ----

TEST(EgressMapped, HostLiteralDeniedByIpv4Range) {
  EgressPolicy p = policy("", "127.0.0.0/8");
  for (const char* host :
       {"::ffff:127.0.0.1", "::FFFF:127.0.0.1", "::ffff:7f00:1", "[::ffff:127.0.0.1]", "0:0:0:0:0:ffff:7f00:1"}) {
    EgressDecision d = check_egress_host(p, host);
    EXPECT_FALSE(d.allowed) << host;
    EXPECT_EQ(d.rule, "127.0.0.0/8") << host;
  }
  EXPECT_TRUE(check_egress_host(p, "::ffff:128.0.0.1").allowed);
}

TEST(EgressMapped, ConnectedAddressDeniedByIpv4Range) {
  EgressPolicy p = policy("", "127.0.0.0/8");
  // A name that resolves to the mapped form (an AF_INET6 socket to ::ffff:127.0.0.1).
  EgressDecision d = check_egress(p, "innocent.example.com", SocketAddress("::ffff:127.0.0.1").get());
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.rule, "127.0.0.0/8");
  EXPECT_FALSE(connect_to(p, "::ffff:127.0.0.1").allowed);
  EXPECT_FALSE(check_egress(p, "[::ffff:127.0.0.1]", SocketAddress("::ffff:127.0.0.1").get()).allowed);
  EXPECT_TRUE(check_egress(p, "example.com", SocketAddress("::ffff:93.184.216.34").get()).allowed);
}

TEST(EgressMapped, RuleInMappedFormMatchesIpv4) {
  EgressPolicy p = policy("", "::ffff:169.254.0.0/112");
  EXPECT_FALSE(connect_to(p, "169.254.169.254").allowed);
  EXPECT_FALSE(connect_to(p, "::ffff:169.254.169.254").allowed);
  EXPECT_TRUE(connect_to(p, "169.255.0.1").allowed);
}

TEST(EgressMapped, AllowListMatchesMappedAddress) {
  EgressPolicy p = policy("93.184.216.0/24", "");
  EXPECT_TRUE(check_egress(p, "example.com", SocketAddress("::ffff:93.184.216.34").get()).allowed);
  EXPECT_TRUE(check_egress_host(p, "::ffff:93.184.216.34").allowed);
  EXPECT_FALSE(check_egress_host(p, "::ffff:93.184.217.34").allowed);
}

// Decision: only ::ffff:0:0/96 is folded into IPv4. The deprecated IPv4-compatible form
// (::a.b.c.d) and NAT64 (64:ff9b::/96) are IPv6 addresses, matched by IPv6 rules.
TEST(EgressMapped, CompatibleAndNat64FormsAreNotSpecialCased) {
  EgressPolicy p = policy("", "127.0.0.0/8");
  EXPECT_TRUE(connect_to(p, "::127.0.0.1").allowed);
  EXPECT_TRUE(connect_to(p, "64:ff9b::7f00:1").allowed);
  EgressPolicy nat64 = policy("", "64:ff9b::/96");
  EXPECT_FALSE(connect_to(nat64, "64:ff9b::7f00:1").allowed);
}

// ---- host patterns ----

TEST(EgressHost, ExactName) {
  EgressPolicy p = policy("", "metadata.google.internal");
  EXPECT_FALSE(check_egress_host(p, "metadata.google.internal").allowed);
  EXPECT_EQ(check_egress_host(p, "metadata.google.internal").rule, "metadata.google.internal");
  EXPECT_TRUE(check_egress_host(p, "x.metadata.google.internal").allowed);
  EXPECT_TRUE(check_egress_host(p, "google.internal").allowed);
  EXPECT_TRUE(check_egress_host(p, "metadata.google.internal.evil.com").allowed);
}

TEST(EgressHost, WildcardMatchesNamesBelowNotTheApex) {
  EgressPolicy p = policy("", "*.example.com");
  EXPECT_FALSE(check_egress_host(p, "a.example.com").allowed);
  EXPECT_FALSE(check_egress_host(p, "a.b.example.com").allowed);
  EXPECT_EQ(check_egress_host(p, "a.example.com").rule, "*.example.com");
  EXPECT_TRUE(check_egress_host(p, "example.com").allowed);     // not the apex
  EXPECT_TRUE(check_egress_host(p, "badexample.com").allowed);  // a label boundary
  EXPECT_TRUE(check_egress_host(p, "example.com.evil").allowed);
  EXPECT_TRUE(check_egress_host(p, ".example.com").allowed);  // no label before the suffix
}

TEST(EgressHost, CaseInsensitiveAndTrailingDot) {
  EgressPolicy p = policy("", "Api.Example.COM, *.HOOKS.example.com.");
  for (const char* host : {"api.example.com", "API.EXAMPLE.COM", "api.example.com.", "Api.Example.Com.",
                           "x.hooks.example.com", "X.Hooks.Example.Com."})
    EXPECT_FALSE(check_egress_host(p, host).allowed) << host;
  EXPECT_TRUE(check_egress_host(p, "hooks.example.com.").allowed);
  EXPECT_TRUE(check_egress_host(p, "api.example.com..").allowed);  // only one trailing dot is ignored
}

TEST(EgressHost, PatternsNeverMatchIpLiterals) {
  EgressPolicy p = policy("", "*.0.0.1, localhost, *.1, 0x7f000001x");
  for (const char* host : {"127.0.0.1", "10.0.0.1", "::1", "[::1]", "127.0.0.1."}) {
    EXPECT_TRUE(check_egress_host(p, host).allowed) << host;
    EXPECT_TRUE(check_egress(p, host, SocketAddress("192.0.2.1").get()).allowed) << host;
  }
  EXPECT_FALSE(check_egress_host(p, "localhost").allowed);
  EXPECT_FALSE(check_egress_host(p, "a.0.0.1").allowed);  // a name, so the pattern applies
  // An allow list of names does not let an IP literal through.
  EgressPolicy allow = policy("*.example.com", "");
  EXPECT_EQ(check_egress_host(allow, "93.184.216.34").rule, kEgressNotAllowed);
}

// Numbers that getaddrinfo and libcurl read as IPv4 addresses are IP literals too.
TEST(EgressHost, NumericIpv4FormsAreLiterals) {
  EgressPolicy p = policy("", "127.0.0.0/8");
  for (const char* host : {"127.1", "0x7f000001", "2130706433", "017700000001", "0x7f.0.0.1"}) {
    EgressDecision d = check_egress_host(p, host);
    EXPECT_FALSE(d.allowed) << host;
    EXPECT_EQ(d.rule, "127.0.0.0/8") << host;
  }
  EXPECT_TRUE(check_egress_host(p, "deadbeef").allowed);  // a name
}

TEST(EgressHost, StarMatchesEveryDestination) {
  EgressPolicy deny_all = policy("", "*");
  for (const char* host : {"example.com", "localhost", "127.0.0.1", "::1", "[2001:db8::1]"}) {
    EXPECT_FALSE(check_egress_host(deny_all, host).allowed) << host;
    EXPECT_EQ(check_egress_host(deny_all, host).rule, "*") << host;
  }
  EXPECT_FALSE(check_egress(deny_all, "example.com", SocketAddress("93.184.216.34").get()).allowed);
  EgressPolicy allow_all = policy("*", "");
  EXPECT_TRUE(connect_to(allow_all, "93.184.216.34").allowed);
  EXPECT_TRUE(connect_to(allow_all, "2001:db8::1").allowed);
  EXPECT_TRUE(check_egress_host(allow_all, "example.com").allowed);
}

// ---- decisions ----

TEST(EgressCheck, EmptyPolicyAllowsEverything) {
  EgressPolicy p;
  EXPECT_TRUE(connect_to(p, "127.0.0.1").allowed);
  EXPECT_TRUE(connect_to(p, "169.254.169.254").allowed);
  EXPECT_TRUE(check_egress_host(p, "localhost").allowed);
  EXPECT_TRUE(check_egress(p, "localhost", nullptr).allowed);  // nothing to check
  EXPECT_EQ(connect_to(p, "::1").rule, "");
}

TEST(EgressCheck, EmptyAllowListAllowsAllThatIsNotDenied) {
  EgressPolicy p = policy("", "10.0.0.0/8");
  EXPECT_TRUE(connect_to(p, "93.184.216.34").allowed);
  EXPECT_TRUE(check_egress(p, "anything.example", SocketAddress("2001:db8::1").get()).allowed);
  EXPECT_FALSE(connect_to(p, "10.1.2.3").allowed);
}

TEST(EgressCheck, DenyWinsOverAllow) {
  EgressPolicy p = policy("*.example.com, 10.0.0.0/8, *", "10.0.0.5, internal.example.com");
  EgressDecision d = connect_to(p, "10.0.0.5");
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.rule, "10.0.0.5");
  d = check_egress(p, "internal.example.com", SocketAddress("93.184.216.34").get());
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.rule, "internal.example.com");
  d = check_egress(p, "api.example.com", SocketAddress("10.0.0.5").get());
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.rule, "10.0.0.5");
  EXPECT_TRUE(connect_to(p, "10.0.0.6").allowed);
  EXPECT_TRUE(check_egress(p, "api.example.com", SocketAddress("93.184.216.34").get()).allowed);
}

TEST(EgressCheck, FirstMatchingDenyRuleIsNamed) {
  EgressPolicy p = policy("", "192.168.0.0/16, 192.168.1.0/24, *.lan");
  EXPECT_EQ(connect_to(p, "192.168.1.1").rule, "192.168.0.0/16");
  EXPECT_EQ(check_egress(p, "printer.lan", SocketAddress("192.168.1.1").get()).rule, "192.168.0.0/16");
  EXPECT_EQ(check_egress(p, "printer.lan", SocketAddress("93.184.216.34").get()).rule, "*.lan");
}

TEST(EgressCheck, AllowListMissNamesTheGuc) {
  EgressPolicy p = policy("*.example.com, 203.0.113.0/24", "");
  EgressDecision d = check_egress(p, "evil.test", SocketAddress("198.51.100.7").get());
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.rule, "not in pg_outbox.egress_allow");
  EXPECT_EQ(d.rule, kEgressNotAllowed);
  EXPECT_EQ(connect_to(p, "2001:db8::1").rule, kEgressNotAllowed);
}

TEST(EgressCheck, AllowedByHostPatternOrByAddress) {
  EgressPolicy p = policy("*.example.com, 203.0.113.0/24", "");
  // By name, whatever it resolves to (nothing denies it).
  EXPECT_TRUE(check_egress(p, "api.example.com", SocketAddress("198.51.100.7").get()).allowed);
  // By address, whatever the name.
  EXPECT_TRUE(check_egress(p, "other.test", SocketAddress("203.0.113.9").get()).allowed);
  EXPECT_TRUE(connect_to(p, "203.0.113.9").allowed);
}

// The reason the policy looks at the connected address: a harmless-looking name that
// resolves to a denied address (DNS rebinding, a hostile record, /etc/hosts).
TEST(EgressCheck, NameResolvingToDeniedAddressIsDenied) {
  EgressPolicy p = policy("", "127.0.0.0/8, 169.254.0.0/16");
  EXPECT_TRUE(check_egress_host(p, "metadata.attacker.example").allowed);  // create_endpoint cannot know
  EgressDecision d = check_egress(p, "metadata.attacker.example", SocketAddress("169.254.169.254").get());
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.rule, "169.254.0.0/16");
  EXPECT_FALSE(check_egress(p, "localhost", SocketAddress("127.0.0.1").get()).allowed);
}

// A proxy would make the connected address differ from an IP-literal host: deny rules
// apply to both.
TEST(EgressCheck, DenyRangesApplyToIpLiteralHostToo) {
  EgressPolicy p = policy("", "169.254.0.0/16");
  EXPECT_FALSE(check_egress(p, "169.254.169.254", SocketAddress("203.0.113.1").get()).allowed);
}

TEST(EgressCheck, UnknownAddressFamilyFailsClosed) {
  EgressPolicy p = policy("", "10.0.0.0/8");
  EXPECT_EQ(check_egress(p, "example.com", nullptr).rule, kEgressNoAddress);
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  EgressDecision d = check_egress(p, "example.com", reinterpret_cast<const sockaddr*>(&un));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.rule, kEgressNoAddress);
}

TEST(EgressCheck, HostOnlyCheckOfNames) {
  // An allow list with ranges: a name's addresses decide at connect time.
  EgressPolicy with_ranges = policy("*.example.com, 203.0.113.0/24", "");
  EXPECT_TRUE(check_egress_host(with_ranges, "other.test").allowed);
  EXPECT_TRUE(check_egress_host(with_ranges, "203.0.113.5").allowed);
  EXPECT_EQ(check_egress_host(with_ranges, "198.51.100.1").rule, kEgressNotAllowed);
  // An allow list of names only: a name that matches none can never be allowed.
  EgressPolicy names_only = policy("*.example.com, example.org", "");
  EXPECT_TRUE(check_egress_host(names_only, "example.org").allowed);
  EXPECT_TRUE(check_egress_host(names_only, "a.example.com").allowed);
  EXPECT_EQ(check_egress_host(names_only, "other.test").rule, kEgressNotAllowed);
  // Deny ranges do not judge names before they are resolved.
  EXPECT_TRUE(check_egress_host(policy("", "0.0.0.0/0, ::/0"), "example.com").allowed);
}

// The deny list docs/operations.md (Egress policy) recommends for production.
TEST(EgressCheck, RecommendedProductionDenyList) {
  EgressPolicy p = policy("",
                          "127.0.0.0/8, ::1/128, 0.0.0.0/8, 169.254.0.0/16, fe80::/10, 10.0.0.0/8, 172.16.0.0/12, "
                          "192.168.0.0/16, fc00::/7, 100.64.0.0/10");
  ASSERT_EQ(p.deny.size(), 10u);
  const std::pair<const char*, const char*> denied[] = {{"127.0.0.1", "127.0.0.0/8"},
                                                        {"127.255.255.254", "127.0.0.0/8"},
                                                        {"::1", "::1/128"},
                                                        {"::ffff:127.0.0.1", "127.0.0.0/8"},
                                                        {"0.0.0.0", "0.0.0.0/8"},
                                                        {"169.254.169.254", "169.254.0.0/16"},
                                                        {"::ffff:169.254.169.254", "169.254.0.0/16"},
                                                        {"fe80::1", "fe80::/10"},
                                                        {"10.0.0.1", "10.0.0.0/8"},
                                                        {"10.255.255.255", "10.0.0.0/8"},
                                                        {"172.16.0.1", "172.16.0.0/12"},
                                                        {"172.31.255.254", "172.16.0.0/12"},
                                                        {"192.168.1.1", "192.168.0.0/16"},
                                                        {"fc00::1", "fc00::/7"},
                                                        {"fd00:ec2::254", "fc00::/7"},
                                                        {"100.64.0.1", "100.64.0.0/10"},
                                                        {"100.127.255.254", "100.64.0.0/10"},
                                                        {"::ffff:10.0.0.1", "10.0.0.0/8"}};
  for (const auto& [address, deny_rule] : denied) {
    EgressDecision connected = check_egress(p, "innocent.example.com", SocketAddress(address).get());
    EXPECT_FALSE(connected.allowed) << address;
    EXPECT_EQ(connected.rule, deny_rule) << address;
    EgressDecision literal = check_egress_host(p, address);
    EXPECT_FALSE(literal.allowed) << address;
    EXPECT_EQ(literal.rule, deny_rule) << address;
  }
  for (const char* address :
       {"93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "1.1.1.1", "11.0.0.1", "172.32.0.1", "172.15.255.255",
        "192.169.0.1", "100.128.0.1", "169.255.0.1", "::ffff:93.184.216.34"}) {
    EXPECT_TRUE(check_egress(p, "example.com", SocketAddress(address).get()).allowed) << address;
    EXPECT_TRUE(check_egress_host(p, address).allowed) << address;
    EXPECT_EQ(check_egress_host(p, address).rule, "") << address;
  }
}
