// What a transfer keeps of a response: the head of the body and the final response's
// Retry-After, fed line by line as libcurl's callbacks would be.
#include "http/response_capture.hpp"

#include "core/ascii.hpp"
#include "http/http_client.hpp"

#include <gtest/gtest.h>

#include <string>

namespace {

using pg_outbox::http::capture_body;
using pg_outbox::http::capture_header;
using pg_outbox::http::kBodyHeadLimit;
using pg_outbox::http::kRetryAfterLimit;
using pg_outbox::http::Response;

size_t header(Response& r, std::string line) { return capture_header(line.data(), 1, line.size(), &r); }
size_t body(Response& r, std::string data) { return capture_body(data.data(), 1, data.size(), &r); }

TEST(ResponseCapture, RetryAfterIsTrimmedAndMatchedWithoutCase) {
  Response r;
  EXPECT_EQ(header(r, "HTTP/1.1 503 Service Unavailable\r\n"), 34u);
  EXPECT_EQ(header(r, "retry-AFTER: \t 120 \r\n"), 21u);
  EXPECT_EQ(r.retry_after, "120");
  header(r, "Content-Type: text/plain\r\n");
  EXPECT_EQ(r.retry_after, "120");
}

TEST(ResponseCapture, OnlyTheFinalResponsesRetryAfterIsKept) {
  Response r;
  header(r, "HTTP/1.1 100 Continue\r\n");
  header(r, "Retry-After: 5\r\n");
  header(r, "\r\n");
  header(r, "HTTP/1.1 200 OK\r\n");
  EXPECT_EQ(r.retry_after, "");
}

TEST(ResponseCapture, LongRetryAfterIsCut) {
  Response r;
  header(r, "Retry-After: " + std::string(500, '9') + "\r\n");
  EXPECT_EQ(r.retry_after, std::string(kRetryAfterLimit, '9'));
}

TEST(ResponseCapture, BodyHeadIsBoundedAndTheRestAccepted) {
  Response r;
  EXPECT_EQ(body(r, std::string(1000, 'a')), 1000u);
  EXPECT_EQ(body(r, std::string(1000, 'b')), 1000u);
  ASSERT_EQ(r.body_head.size(), kBodyHeadLimit);
  EXPECT_EQ(r.body_head, std::string(1000, 'a') + std::string(kBodyHeadLimit - 1000, 'b'));
}

TEST(Ascii, TrimRemovesOnlyTheGivenCharacters) {
  using pg_outbox::core::ascii_trim;
  using pg_outbox::core::kHeaderSpace;
  EXPECT_EQ(ascii_trim(" \t value \r\n", kHeaderSpace), "value");
  EXPECT_EQ(ascii_trim("a b", kHeaderSpace), "a b");
  EXPECT_EQ(ascii_trim(" \r\n", kHeaderSpace), "");
  EXPECT_EQ(ascii_trim("", kHeaderSpace), "");
  EXPECT_EQ(ascii_trim("\fx\f", kHeaderSpace), "\fx\f");
}

}  // namespace

TEST(ResponseCapture, WebhookDeliveryAbortIsMatchedWithoutCase) {
  Response r;
  header(r, "HTTP/1.1 200 OK\r\n");
  EXPECT_FALSE(r.delivery_abort);
  header(r, "Webhook-Delivery: \t ABORT \r\n");
  EXPECT_TRUE(r.delivery_abort);
}

TEST(ResponseCapture, OtherWebhookDeliveryValuesDoNotAbort) {
  Response r;
  header(r, "HTTP/1.1 500 Internal Server Error\r\n");
  header(r, "webhook-delivery: aborted\r\n");
  header(r, "x-webhook-delivery: abort\r\n");
  EXPECT_FALSE(r.delivery_abort);
}

TEST(ResponseCapture, OnlyTheFinalResponsesAbortCounts) {
  Response r;
  header(r, "HTTP/1.1 100 Continue\r\n");
  header(r, "webhook-delivery: abort\r\n");
  header(r, "\r\n");
  header(r, "HTTP/1.1 200 OK\r\n");
  EXPECT_FALSE(r.delivery_abort);
}
