#include "core/http_request_head.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace pg_outbox::core;

TEST(HttpRequestHead, TheHeadLibcurlSendsForAPost) {
  EXPECT_EQ(http_post_head("/hooks/a?x=1", "127.0.0.1:8080", {"Content-Type: application/json", "webhook-id: 7"}, 12),
            "POST /hooks/a?x=1 HTTP/1.1\r\n"
            "Host: 127.0.0.1:8080\r\n"
            "Accept: */*\r\n"
            "Content-Type: application/json\r\n"
            "webhook-id: 7\r\n"
            "Content-Length: 12\r\n"
            "\r\n");
}

TEST(HttpRequestHead, WithoutAContentTypeTheFormOneIsSent) {
  EXPECT_EQ(http_post_head("/", "[::1]:81", {}, 0),
            "POST / HTTP/1.1\r\nHost: [::1]:81\r\nAccept: */*\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 0\r\n\r\n");
}

TEST(HttpRequestHead, SemicolonSendsAnEmptyValueAndABareColonRemoves) {
  const std::string head =
      http_post_head("/", "h", {"X-Empty;", "Accept:", "Content-Type:  ", "X-Kept: v", "Expect:"}, 3);
  EXPECT_EQ(head,
            "POST / HTTP/1.1\r\nHost: h\r\n"
            "X-Empty:\r\n"
            "X-Kept: v\r\n"
            "Content-Length: 3\r\n\r\n");
}

TEST(HttpRequestHead, TheCallersHostAndAcceptReplaceTheClientsOwn) {
  const std::string head = http_post_head("/", "10.0.0.1", {"host: example.test", "ACCEPT: text/plain"}, 1);
  EXPECT_EQ(head,
            "POST / HTTP/1.1\r\nhost: example.test\r\nACCEPT: text/plain\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1\r\n\r\n");
}

TEST(HttpRequestHead, FramingIsTheClientsOwn) {
  const std::string head =
      http_post_head("/", "h", {"Content-Length: 99", "Transfer-Encoding: chunked", "Expect: 100-continue"}, 5);
  EXPECT_EQ(head,
            "POST / HTTP/1.1\r\nHost: h\r\nAccept: */*\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 5\r\n\r\n");
}

TEST(HttpRequestHead, ValuesAreTrimmedAndALineWithoutColonIsSkipped) {
  EXPECT_EQ(http_post_head("/", "h", {"X-A:   spaced value  ", "not a header"}, 0),
            "POST / HTTP/1.1\r\nHost: h\r\nAccept: */*\r\nX-A: spaced value\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 0\r\n\r\n");
}
