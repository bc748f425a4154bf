#include "core/plain_http_url.hpp"

#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <string>
#include <vector>

using namespace pg_outbox::core;

namespace {

std::vector<unsigned char> address_of(const PlainHttpTarget& t) {
  return {t.address, t.address + (t.family == AF_INET ? 4 : 16)};
}

}  // namespace

TEST(PlainHttpUrl, Ipv4WithoutPortOrPath) {
  const auto t = plain_http_target("http://127.0.0.1");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->family, AF_INET);
  EXPECT_EQ(address_of(*t), (std::vector<unsigned char>{127, 0, 0, 1}));
  EXPECT_EQ(t->port, 80);
  EXPECT_EQ(t->host_header, "127.0.0.1");
  EXPECT_EQ(t->target, "/");
  EXPECT_EQ(t->address_text, "127.0.0.1");
  // The bytes after the first four stay zero.
  for (int i = 4; i < 16; ++i) EXPECT_EQ(t->address[i], 0) << i;
}

TEST(PlainHttpUrl, Ipv4WithPortPathQueryAndFragment) {
  const auto t = plain_http_target("http://10.1.2.254:8080/hooks/a?x=1&y=%20#frag");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->family, AF_INET);
  EXPECT_EQ(address_of(*t), (std::vector<unsigned char>{10, 1, 2, 254}));
  EXPECT_EQ(t->port, 8080);
  EXPECT_EQ(t->host_header, "10.1.2.254:8080");
  EXPECT_EQ(t->target, "/hooks/a?x=1&y=%20");
  EXPECT_EQ(t->address_text, "10.1.2.254");
}

TEST(PlainHttpUrl, Port80IsLeftOutOfTheHostHeader) {
  for (const char* url : {"http://192.0.2.1:80/", "http://192.0.2.1:0080/", "http://192.0.2.1/"}) {
    SCOPED_TRACE(url);
    const auto t = plain_http_target(url);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->port, 80);
    EXPECT_EQ(t->host_header, "192.0.2.1");
  }
}

TEST(PlainHttpUrl, PortRange) {
  EXPECT_EQ(plain_http_target("http://192.0.2.1:1/")->port, 1);
  EXPECT_EQ(plain_http_target("http://192.0.2.1:65535/")->host_header, "192.0.2.1:65535");
  EXPECT_EQ(plain_http_target("http://192.0.2.1:08081")->host_header, "192.0.2.1:8081");  // as libcurl writes it
  EXPECT_EQ(plain_http_target("http://192.0.2.1:000000000000000000000443")->port, 443);
}

TEST(PlainHttpUrl, SchemeIsCaseInsensitive) {
  for (const char* url : {"HTTP://127.0.0.1/", "hTtP://127.0.0.1/"}) {
    SCOPED_TRACE(url);
    ASSERT_TRUE(plain_http_target(url));
    EXPECT_EQ(plain_http_target(url)->target, "/");
  }
}

TEST(PlainHttpUrl, Ipv6Literals) {
  const auto t = plain_http_target("http://[::1]:8080/x");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->family, AF_INET6);
  std::vector<unsigned char> loopback(16, 0);
  loopback[15] = 1;
  EXPECT_EQ(address_of(*t), loopback);
  EXPECT_EQ(t->port, 8080);
  EXPECT_EQ(t->host_header, "[::1]:8080");
  EXPECT_EQ(t->target, "/x");
  EXPECT_EQ(t->address_text, "::1");

  const auto plain = plain_http_target("http://[2001:db8::2]");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->host_header, "[2001:db8::2]");
  EXPECT_EQ(plain->target, "/");
  EXPECT_EQ(plain->address[0], 0x20);
  EXPECT_EQ(plain->address[1], 0x01);
  EXPECT_EQ(plain->address[2], 0x0d);
  EXPECT_EQ(plain->address[3], 0xb8);
  EXPECT_EQ(plain->address[15], 2);
}

TEST(PlainHttpUrl, Ipv6HostHeaderIsTheShorterFormAsLibcurlWritesIt) {
  // libcurl 7.88 rewrites an IPv6 literal to inet_ntop's form only when that is shorter.
  const auto longer = plain_http_target("http://[0:0:0:0:0:0:0:1]:81/");
  ASSERT_TRUE(longer);
  EXPECT_EQ(longer->host_header, "[::1]:81");
  EXPECT_EQ(longer->address_text, "::1");
  const auto same_length = plain_http_target("http://[::FFFF:127.0.0.1]/");
  ASSERT_TRUE(same_length);
  EXPECT_EQ(same_length->host_header, "[::FFFF:127.0.0.1]");
  EXPECT_EQ(same_length->address_text, "::ffff:127.0.0.1");
}

TEST(PlainHttpUrl, TargetFromPathQueryAndFragment) {
  struct Case {
    const char* url;
    const char* target;
  };
  for (const Case& c : std::vector<Case>{
           {"http://1.2.3.4", "/"},
           {"http://1.2.3.4/", "/"},
           {"http://1.2.3.4?x", "/?x"},
           {"http://1.2.3.4:81?x=1&y", "/?x=1&y"},
           {"http://1.2.3.4#f", "/"},
           {"http://1.2.3.4?x#f", "/?x"},
           {"http://1.2.3.4/?a#b", "/?a"},
           {"http://1.2.3.4/a#b?c", "/a"},
           {"http://1.2.3.4/a?b#", "/a?b"},
           {"http://1.2.3.4/p?", "/p?"},
           {"http://1.2.3.4//a//b/", "//a//b/"},
           {"http://1.2.3.4/a/.b/..c/...", "/a/.b/..c/..."},
           {"http://1.2.3.4/a?b/../c", "/a?b/../c"},
           {"http://1.2.3.4/%2e%2e/x", "/%2e%2e/x"},
           {"http://1.2.3.4/a:b@c", "/a:b@c"},
       }) {
    SCOPED_TRACE(c.url);
    const auto t = plain_http_target(c.url);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->target, c.target);
  }
}

TEST(PlainHttpUrl, EverythingElseIsLeftToLibcurl) {
  for (const char* url : {
           "",
           "http:",
           "http://",
           "http:/1.2.3.4/",
           "http:1.2.3.4",
           "https://127.0.0.1/",
           "ftp://127.0.0.1/",
           "httpx://127.0.0.1/",
           " http://127.0.0.1/",
           "http://localhost/",
           "http://example.com:8080/",
           "http://user@127.0.0.1/",
           "http://user:pw@127.0.0.1/",
           "http://@127.0.0.1/",
           "http:///x",
           "http://:80/",
           "http://?x",
           "http://1.2.3.4:",
           "http://1.2.3.4:/",
           "http://1.2.3.4:0/",
           "http://1.2.3.4:65536/",
           "http://1.2.3.4:99999999999999999999/",
           "http://1.2.3.4:+80/",
           "http://1.2.3.4:-80/",
           "http://1.2.3.4:8a/",
           "http://1.2.3.4:80:81/",
           "http://1.2.3.4 /",
           "http://1.2.3.4/a b",
           "http://1.2.3.4/a\tb",
           "http://1.2.3.4/\x7f",
           "http://1.2.3.4/caf\xc3\xa9",
           "http://1.2.3.4/\n",
           "http://1.2.3.4%30/",
           "http://%31.2.3.4/",
           "http://1.2.3/",
           "http://1.2.3.4.5/",
           "http://1.2.3.4./",
           "http://256.1.1.1/",
           "http://01.2.3.4/",
           "http://0x7f.0.0.1/",
           "http://2130706433/",
           "http://127.1/",
           "http://::1/",
           "http://[::1/",
           "http://[::1]x/",
           "http://[::1]x80/",
           "http://[::1]80/",
           "http://[::1]:/",
           "http://[::1]:0/",
           "http://[]/",
           "http://[1.2.3.4]/",
           "http://[::1]]/",
           "http://[[::1]]/",
           "http://[fe80::1%25eth0]/",
           "http://[fe80::1%eth0]/",
           "http://[::g]/",
           "http://1.2.3.4/a/../b",
           "http://1.2.3.4/./a",
           "http://1.2.3.4/a/.",
           "http://1.2.3.4/..",
           "http://1.2.3.4/a/..?x",
       }) {
    SCOPED_TRACE(url);
    EXPECT_FALSE(plain_http_target(url));
  }
  const std::string with_nul("http://1.2.3.4/a\0b", 18);
  EXPECT_FALSE(plain_http_target(with_nul));
}
