#include "core/cloudevents.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/request_headers.hpp"

using namespace pg_outbox::core;

namespace {

std::vector<std::string> as_vector(const HeaderLines& lines) { return {lines.begin(), lines.end()}; }

}  // namespace

TEST(CloudEvents, Formats) {
  EXPECT_EQ(parse_format("standard-webhooks"), Format::StandardWebhooks);
  EXPECT_EQ(parse_format("cloudevents-binary"), Format::CloudEventsBinary);
  EXPECT_EQ(parse_format("cloudevents-structured"), Format::CloudEventsStructured);
  EXPECT_EQ(parse_format("CloudEvents-Binary"), std::nullopt);
  EXPECT_EQ(parse_format(""), std::nullopt);
  EXPECT_EQ(content_type_of(Format::StandardWebhooks), "application/json");
  EXPECT_EQ(content_type_of(Format::CloudEventsBinary), "application/json");
  EXPECT_EQ(content_type_of(Format::CloudEventsStructured), "application/cloudevents+json");
  EXPECT_EQ(batch_content_type_of(Format::StandardWebhooks), "application/json");
  EXPECT_EQ(batch_content_type_of(Format::CloudEventsBinary), "application/cloudevents-batch+json");
  EXPECT_EQ(batch_content_type_of(Format::CloudEventsStructured), "application/cloudevents-batch+json");
}

TEST(CloudEvents, Rfc3339InUtcWithMicroseconds) {
  EXPECT_EQ(rfc3339_utc(0), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(rfc3339_utc(1700000000123456LL), "2023-11-14T22:13:20.123456Z");
  EXPECT_EQ(rfc3339_utc(951782400000001LL), "2000-02-29T00:00:00.000001Z");  // a leap day
  EXPECT_EQ(rfc3339_utc(-1), "1969-12-31T23:59:59.999999Z");
}

TEST(CloudEvents, HeaderValuesPercentEncodedAsTheBindingSays) {
  EXPECT_EQ(percent_encode_header_value("order.created"), "order.created");
  EXPECT_EQ(percent_encode_header_value("a b\"c%d"), "a%20b%22c%25d");
  EXPECT_EQ(percent_encode_header_value("caf\xc3\xa9"), "caf%C3%A9");
  EXPECT_EQ(percent_encode_header_value(std::string("\x7f\x01", 2)), "%7F%01");
  EXPECT_EQ(percent_encode_header_value("!~/:?#[]@"), "!~/:?#[]@");  // printable ASCII stays
}

TEST(CloudEvents, DefaultSourceNamesTheDatabase) {
  EXPECT_EQ(default_source("postgres", "billing"), "/pg_outbox/postgres/billing");
  EXPECT_EQ(default_source("my db/é", "a.b"), "/pg_outbox/my%20db%2F%C3%A9/a.b");
}

TEST(CloudEvents, BinaryHeaders) {
  std::vector<std::string> lines;
  append_binary_headers({"msg_1", "/pg_outbox/db/e", "paid \xc3\xa9", 0}, lines);
  EXPECT_EQ(lines, (std::vector<std::string>{"ce-specversion: 1.0", "ce-id: msg_1", "ce-source: /pg_outbox/db/e",
                                             "ce-type: paid%20%C3%A9", "ce-time: 1970-01-01T00:00:00.000000Z"}));
}

TEST(CloudEvents, StructuredEventIsJsonAroundThePayload) {
  std::string out;
  append_structured_event({"k\"1", "/s", "t\\x\n", 1000000}, R"({"a": [1, 2]})", out);
  EXPECT_EQ(out, R"({"specversion":"1.0","id":"k\"1","source":"/s","type":"t\\x\u000A",)"
                 R"("time":"1970-01-01T00:00:01.000000Z","datacontenttype":"application/json","data":{"a": [1, 2]}})");
}

TEST(CloudEvents, RequestHeadersCarryTheFormat) {
  DeliveryHeaders h;
  h.webhook_id = "msg_1";
  h.timestamp_unix_s = 1700000000;
  h.event_type = "t";
  h.endpoint_headers = {{"ce-type", "forged"}, {"X-A", "1"}};
  h.message_headers = {{"CE-Source", "forged"}};
  h.cloudevents = true;
  h.content_type = "application/cloudevents+json";
  h.cloudevent_lines = {"ce-id: msg_1"};
  auto lines = as_vector(build_request_headers(h, "{}"));
  EXPECT_EQ(lines[0], "X-A: 1");  // the user's ce-* headers are dropped
  EXPECT_EQ(lines[1], "Content-Type: application/cloudevents+json");
  EXPECT_EQ(lines[2], "ce-id: msg_1");
  // Without a CloudEvents format, ce-* headers are a user's like any other.
  h.cloudevents = false;
  h.cloudevent_lines.clear();
  h.content_type = "application/json";
  lines = as_vector(build_request_headers(h, "{}"));
  EXPECT_EQ(lines[0], "ce-type: forged");
  EXPECT_EQ(lines[2], "CE-Source: forged");
}
