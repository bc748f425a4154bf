#include "core/validation.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace pg_outbox::core;

namespace {

// PostgreSQL message style: non-empty, lower-case start, no trailing period.
void expect_pg_style(const std::optional<std::string>& msg) {
  ASSERT_TRUE(msg.has_value());
  ASSERT_FALSE(msg->empty());
  EXPECT_FALSE((*msg)[0] >= 'A' && (*msg)[0] <= 'Z') << *msg;
  EXPECT_NE(msg->back(), '.') << *msg;
  EXPECT_EQ(msg->find('\n'), std::string::npos) << *msg;
}

}  // namespace

TEST(EndpointName, Accepts) {
  for (const char* ok : {"a", "0", "billing", "orders_feed", "a.b-c_d", "9lives"})
    EXPECT_EQ(check_endpoint_name(ok), std::nullopt) << ok;
  EXPECT_EQ(check_endpoint_name(std::string(63, 'x')), std::nullopt);
}

TEST(EndpointName, Rejects) {
  for (const char* bad : {"", "Billing", "_a", ".a", "-a", "a b", "a/b", "é", "a\n"})
    expect_pg_style(check_endpoint_name(bad));
  expect_pg_style(check_endpoint_name(std::string(64, 'x')));
  expect_pg_style(check_endpoint_name(std::string("a\0b", 3)));
}

TEST(Url, Accepts) {
  for (const char* ok : {"http://127.0.0.1:8080/hooks/billing", "https://example.com", "HTTPS://Example.COM/",
                         "HtTp://a", "http://example.com.", "http://my_host.internal:1/x", "http://host:65535",
                         "http://[::1]:8080/x", "http://[2001:db8::7]/", "http://[::ffff:192.0.2.1]",
                         "https://user:p%40ss@example.com/a?b=c&d=%2F", "http://example.com/a/b;c=d/@x:y?q=1/2?3",
                         "http://example.com?x=1", "http://255.255.255.255/", "http://0.0.0.0:1"})
    EXPECT_EQ(check_url(ok), std::nullopt) << ok;
}

TEST(Url, Host) {
  using pg_outbox::core::url_host;
  EXPECT_EQ(url_host("http://127.0.0.1:8080/hooks"), "127.0.0.1");
  EXPECT_EQ(url_host("https://user:p%40ss@Example.COM/a?b=c"), "Example.COM");
  EXPECT_EQ(url_host("http://[::ffff:127.0.0.1]:80/"), "::ffff:127.0.0.1");
  EXPECT_EQ(url_host("http://localhost?x=1"), "localhost");
  EXPECT_EQ(url_host("ftp://example.com/"), "");
  EXPECT_EQ(url_host("not a url"), "");
}

// SECURITY.md: the form of a URL is checked, not its address; these all pass (the
// egress of the server's OS user is the deployer's to firewall).
TEST(Url, AcceptsAnyAddressForm) {
  for (const char* ok : {"http://127.0.0.1/", "http://[::1]/", "http://169.254.169.254/latest/meta-data",
                         "http://0x7f000001/", "http://localhost:5432/"})
    EXPECT_EQ(check_url(ok), std::nullopt) << ok;
}

TEST(Url, Rejects) {
  for (const char* bad : {"",
                          "ftp://example.com/",
                          "http://",
                          "http:///x",
                          "http://exa mple.com",
                          "http://host:0",
                          "http://host:99999",
                          "http://host:",
                          "http://host:8x",
                          "http://host:080808",
                          "javascript:alert(1)",
                          "example.com/x",
                          "//example.com",
                          "http:/example.com",
                          "http://example.com/#frag",
                          "http://example.com/a b",
                          "http://example.com/\t",
                          "http://example.com/\r\nX-Evil: 1",
                          "http://us\r\ner@example.com/",
                          "http://@example.com:80x",
                          "http://[::1",
                          "http://[::1]x",
                          "http://[zz::1]/",
                          "http://[]/",
                          "http://256.1.1.1/",
                          "http://1.2.3/",
                          "http://01.2.3.4/",
                          "http://a..b/",
                          "http://.a/",
                          "http://ex$ample.com/",
                          "http://example.com/%zz",
                          "http://example.com/%4",
                          "http://example.com/<script>",
                          "http://example.com/caf\xc3\xa9",
                          "http://example.com/\x7f",
                          "http://u<r@example.com/",
                          "http://user@/x",
                          "https://:443/"})
    expect_pg_style(check_url(bad));
  expect_pg_style(check_url(std::string("http://a\0b/", 11)));
  expect_pg_style(check_url("http://" + std::string(64, 'a') + ".com/"));  // label > 63
}

TEST(Url, MessagesDoNotQuoteTheUrl) {
  auto msg = check_url("http://admin:topsecret@exa mple.com/");
  ASSERT_TRUE(msg);
  EXPECT_EQ(msg->find("topsecret"), std::string::npos);
  EXPECT_EQ(*check_url("ftp://x/"), "url scheme must be http or https");
  EXPECT_EQ(*check_url("http://host:0"), "url port must be a number from 1 to 65535");
}

TEST(Header, Accepts) {
  EXPECT_EQ(check_header("X-Api-Key", "abc"), std::nullopt);
  EXPECT_EQ(check_header("authorization", "Bearer a.b.c"), std::nullopt);
  EXPECT_EQ(check_header("!#$%&'*+-.^_`|~09azAZ", "v"), std::nullopt);
  EXPECT_EQ(check_header("X-Empty", ""), std::nullopt);
  EXPECT_EQ(check_header("X-Tab", "a\tb"), std::nullopt);
  EXPECT_EQ(check_header("X-Utf8", "caf\xc3\xa9"), std::nullopt);
  EXPECT_EQ(check_header("X-Max", std::string(kMaxHeaderValueBytes, 'v')), std::nullopt);
}

TEST(Header, RejectsBadNames) {
  for (const char* bad :
       {"", "X Api", "X:Api", "X-Api\r\nX-Evil", "X(1)", "X\"", "X/Y", "X@Y", "X{}", "caf\xc3\xa9", "X\tY"})
    expect_pg_style(check_header(bad, "v"));
  expect_pg_style(check_header(std::string("X\0Y", 3), "v"));
}

TEST(Header, RejectsBadValuesWithoutQuotingThem) {
  const std::string secretish = "sk_live_TOPSECRET";
  for (const std::string& bad :
       {secretish + "\r\nX-Evil: 1", secretish + "\n", secretish + "\r", secretish + std::string(1, '\0'),
        secretish + "\x01", secretish + "\x1f", secretish + "\x7f"}) {
    auto msg = check_header("X-Api-Key", bad);
    expect_pg_style(msg);
    EXPECT_EQ(msg->find("TOPSECRET"), std::string::npos) << *msg;
    EXPECT_NE(msg->find("X-Api-Key"), std::string::npos) << *msg;  // names the header
  }
  expect_pg_style(check_header("X-Big", std::string(kMaxHeaderValueBytes + 1, 'v')));
}

TEST(Secret, Accepts) {
  EXPECT_EQ(check_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), std::nullopt);  // 24 bytes
  // 64 bytes of zeros encode to 88 characters.
  std::string b64_64 = std::string(84, 'A') + "AA==";
  EXPECT_EQ(check_secret("whsec_" + b64_64), std::nullopt);
  // An ed25519 seed (test_signing_key.cpp has the other forms).
  EXPECT_EQ(check_secret("whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A="), std::nullopt);
}

TEST(Secret, RejectsWithoutLeakingTheValue) {
  const std::string key = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
  const std::string bad[] = {"",
                             key,
                             "WHSEC_" + key,
                             "whsec_",
                             "whsec_" + key + "\n",
                             "whsec_" + key.substr(0, 31),               // not a multiple of 4
                             "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLa-w",   // URL-safe alphabet
                             "whsec_" + key.substr(0, 28),               // 21 bytes: too short
                             "whsec_" + std::string(88, 'A'),            // 66 bytes: too long
                             "whsec_" + std::string(84, 'A') + "AAA="};  // 65 bytes: too long
  for (const auto& s : bad) {
    auto msg = check_secret(s);
    expect_pg_style(msg);
    if (!s.empty()) {
      EXPECT_EQ(msg->find(key.substr(0, 20)), std::string::npos) << *msg;
      EXPECT_EQ(msg->find("AAAA"), std::string::npos) << *msg;
    }
  }
}

TEST(IdempotencyKey, Accepts) {
  for (const char* ok : {"a", "order-42", "MSG_1", "msg", "my_msg_1", "caf\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac",
                         "\xf0\x9f\x98\x80", "a:b/c@d"})
    EXPECT_EQ(check_idempotency_key(ok), std::nullopt) << ok;
  EXPECT_EQ(check_idempotency_key(std::string(200, 'k')), std::nullopt);
  // 200 two-byte characters are 400 bytes but 200 characters.
  std::string two_byte;
  for (int i = 0; i < 200; ++i) two_byte += "\xc3\xa9";
  EXPECT_EQ(check_idempotency_key(two_byte), std::nullopt);
  two_byte += "\xc3\xa9";
  expect_pg_style(check_idempotency_key(two_byte));
}

TEST(IdempotencyKey, Rejects) {
  for (const char* bad : {"", "a.b", "a b", "a\tb", "a\nb", "a\x01", "a\x7f", "a\xc2\x85", /* NEL (C1) */
                          "a\xc2\xa0"
                          "b",                                                           /* NBSP */
                          "a\xe3\x80\x80", /* ideographic space */ "a\xe2\x80\xa8",      /* LS */
                          "\xff", "\xc3", "\xc0\xae", /* overlong "." */ "\xed\xa0\x80", /* surrogate */
                          "\xf4\x90\x80\x80", /* > U+10FFFF */ "\xe0\x80\xae" /* overlong */})
    expect_pg_style(check_idempotency_key(bad));
  expect_pg_style(check_idempotency_key(std::string(201, 'k')));
  // pg_outbox's own webhook-ids: a key must never be taken for another message's.
  expect_pg_style(check_idempotency_key("msg_1"));
  expect_pg_style(check_idempotency_key("msg_p5jXN8AQM9LWM0D4loKWxJek"));
  expect_pg_style(check_idempotency_key(std::string("a\0b", 3)));
}

TEST(Channel, AcceptsAndRejects) {
  EXPECT_EQ(check_channel("orders"), std::nullopt);
  EXPECT_EQ(check_channel("Orders Feed.v2"), std::nullopt);
  EXPECT_EQ(check_channel(std::string(63, 'c')), std::nullopt);
  expect_pg_style(check_channel(""));
  expect_pg_style(check_channel(std::string(64, 'c')));
  expect_pg_style(check_channel("a\nb"));
  expect_pg_style(check_channel("a\x7f"));
  expect_pg_style(check_channel(std::string("a\0b", 3)));
}
