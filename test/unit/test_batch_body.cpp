#include "core/batch_body.hpp"

#include <gtest/gtest.h>

#include <string>

using namespace pg_outbox::core;

TEST(BatchBody, StandardWebhooksElements) {
  BatchBody body(Format::StandardWebhooks, "/unused");
  EXPECT_EQ(body.take(), "[]");
  std::string a, b;
  body.element({"msg_1", "order.created", R"({"n": 1})", "", 0}, a);
  body.element({"k\"2", "", "[1]", R"({"x-a": "1"})", 0}, b);
  EXPECT_EQ(a, R"({"id":"msg_1","type":"order.created","payload":{"n": 1}})");
  EXPECT_EQ(b, R"({"id":"k\"2","type":null,"headers":{"x-a": "1"},"payload":[1]})");
  EXPECT_EQ(body.size_with(a), a.size() + 2);  // "[" a "]"
  body.add(a);
  EXPECT_EQ(body.size_with(b), a.size() + b.size() + 3);
  body.add(b);
  EXPECT_EQ(body.count(), 2u);
  const std::string whole = body.take();
  EXPECT_EQ(whole, "[" + a + "," + b + "]");
  EXPECT_EQ(whole.size(), a.size() + b.size() + 3);
  EXPECT_EQ(body.count(), 0u);  // empty again
  EXPECT_EQ(body.take(), "[]");
}

TEST(BatchBody, CloudEventsElementsAreStructuredEvents) {
  BatchBody body(Format::CloudEventsBinary, "/pg_outbox/db/e");
  std::string e = "left over";
  body.element({"msg_1", "t", "{}", R"({"x-a": "1"})", 0}, e);
  std::string structured;
  append_structured_event({"msg_1", "/pg_outbox/db/e", "t", 0}, "{}", structured);
  EXPECT_EQ(e, structured);  // a message's headers have no place in a CloudEvent
}
