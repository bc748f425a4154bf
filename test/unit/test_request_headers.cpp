#include "core/request_headers.hpp"

#include <gtest/gtest.h>

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/webhook_signature.hpp"

using namespace pg_outbox::core;
using Lines = std::vector<std::string>;

namespace {

DeliveryHeaders basic() {
  DeliveryHeaders h;
  h.webhook_id = "msg_42";
  h.timestamp_unix_s = 1700000000;
  h.event_type = "order.created";
  h.attempt = 3;
  h.user_agent = "pg_outbox/1.0";
  return h;
}

const char* kSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const char* kEd25519Secret = "whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=";  // RFC 8032, test 1

Lines as_vector(const HeaderLines& lines) { return Lines(lines.begin(), lines.end()); }

Lines built(const DeliveryHeaders& h, std::string_view body) { return as_vector(build_request_headers(h, body)); }

SigningKeys keys(std::initializer_list<const char*> secrets) {
  SigningKeys out;
  for (const char* s : secrets) out.push_back(SigningKey::parse(s));
  return out;
}

}  // namespace

TEST(WebhookIdFor, KeyOrInstanceAndMessageId) {
  const WebhookIdSource source{"0123456789abcdef", 100};
  EXPECT_EQ(webhook_id_for("order-42", 7, source), "order-42");
  EXPECT_EQ(webhook_id_for("", 100, source), "msg_0123456789abcdef_100");
  EXPECT_EQ(webhook_id_for("", 9223372036854775807LL, source), "msg_0123456789abcdef_9223372036854775807");
  // Enqueued before 0.3.0: the webhook-id it was first sent with.
  EXPECT_EQ(webhook_id_for("", 99, source), "msg_99");
  // Another instance (database, cluster, re-created extension): another webhook-id.
  EXPECT_NE(webhook_id_for("", 100, source), webhook_id_for("", 100, {"fedcba9876543210", 0}));
  EXPECT_EQ(webhook_id_for("", 7, {}), "msg_7");
}

TEST(RequestHeaders, OwnHeadersInOrderWithoutSecret) {
  EXPECT_EQ(built(basic(), "{}"), (Lines{"Content-Type: application/json", "User-Agent: pg_outbox/1.0",
                                         "webhook-id: msg_42", "webhook-timestamp: 1700000000",
                                         "outbox-event-type: order.created", "outbox-attempt: 3", "Expect:"}));
}

TEST(RequestHeaders, SignatureOnlyWithSecretAndOverTheBody) {
  DeliveryHeaders h = basic();
  h.keys = keys({kSecret});
  Lines lines = built(h, R"({"a":1})");
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(lines[6], "webhook-signature: " + webhook_signature(kSecret, "msg_42", 1700000000, R"({"a":1})"));
  EXPECT_EQ(lines[7], "Expect:");
}

TEST(RequestHeaders, StandardWebhooksVectorEndToEnd) {
  DeliveryHeaders h;
  h.webhook_id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
  h.timestamp_unix_s = 1614265330;
  h.keys = keys({kSecret});
  Lines lines = built(h, R"({"test": 2432232314})");
  EXPECT_EQ(lines, (Lines{"Content-Type: application/json", "webhook-id: msg_p5jXN8AQM9LWM0D4loKWxJek",
                          "webhook-timestamp: 1614265330", "outbox-attempt: 1",
                          "webhook-signature: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", "Expect:"}));
}

// During a rotation: one header, a signature per key, current first, space-separated;
// each verifies alone (the signature of one key does not depend on the other).
TEST(RequestHeaders, RotationSignsWithEveryKeyInOneHeader) {
  DeliveryHeaders h;
  h.webhook_id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
  h.timestamp_unix_s = 1614265330;
  h.keys = keys({kEd25519Secret, kSecret});
  Lines lines = built(h, R"({"test": 2432232314})");
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[4],
            "webhook-signature: "
            "v1a,fldxM4gAKugP6nnt1hdz3sgGfZ6d99nzrMFnZOELIxbzEHoVmAb2ADpkJK7zgPePmPsle0zV9jSeGlHFG2NVAw== "
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

TEST(RequestHeaders, EmptyEventTypeAndUserAgentAreOmitted) {
  DeliveryHeaders h = basic();
  h.event_type.clear();
  h.user_agent.clear();
  for (const auto& l : built(h, "{}")) {
    EXPECT_NE(l.rfind("outbox-event-type", 0), 0u) << l;
    EXPECT_NE(l.rfind("User-Agent", 0), 0u) << l;
  }
}

TEST(RequestHeaders, EndpointHeadersCannotBeReplacedByMessageHeaders) {
  DeliveryHeaders h = basic();
  h.endpoint_headers = {{"Authorization", "Bearer endpoint"}, {"X-Team", "billing"}, {"X-Env", "prod"}};
  h.message_headers = {{"authorization", "Bearer producer"}, {"x-team", "payments"}, {"X-Env", ""}, {"X-Trace", "abc"}};
  Lines lines = built(h, "{}");
  Lines user(lines.begin(), lines.begin() + 4);
  EXPECT_EQ(user, (Lines{"Authorization: Bearer endpoint", "X-Team: billing", "X-Env: prod", "X-Trace: abc"}));
  EXPECT_EQ(lines[4], "Content-Type: application/json");
}

TEST(RequestHeaders, LaterDuplicateWithinMessageHeadersWins) {
  DeliveryHeaders h = basic();
  h.message_headers = {{"X-B", "1"}, {"x-b", "2"}};
  Lines lines = built(h, "{}");
  EXPECT_EQ(lines[0], "x-b: 2");
  EXPECT_EQ(lines[1], "Content-Type: application/json");
}

TEST(RequestHeaders, LaterDuplicateWithinOneListWins) {
  DeliveryHeaders h = basic();
  h.endpoint_headers = {{"X-A", "1"}, {"x-a", "2"}};
  Lines lines = built(h, "{}");
  EXPECT_EQ(lines[0], "x-a: 2");
  EXPECT_EQ(lines[1], "Content-Type: application/json");
}

TEST(RequestHeaders, ReservedUserHeadersAreDropped) {
  DeliveryHeaders h = basic();
  h.keys = keys({kSecret});
  h.endpoint_headers = {{"Content-Type", "text/plain"}, {"X-Keep", "1"}, {"Content-Length", "0"}};
  h.message_headers = {
      {"WEBHOOK-ID", "forged"},           {"webhook-timestamp", "1"}, {"Webhook-Signature", "v1,forged"},
      {"outbox-event-type", "forged"},    {"Outbox-Attempt", "99"},   {"user-agent", "evil"},
      {"Transfer-Encoding", "chunked"},   {"Expect", "100-continue"}, {"Connection", "close"},
      {"Host", "admin.internal.example"}, {"X-Keep-Too", "2"}};
  Lines lines = built(h, "{}");
  ASSERT_EQ(lines.size(), 10u);
  EXPECT_EQ(lines[0], "X-Keep: 1");
  EXPECT_EQ(lines[1], "X-Keep-Too: 2");
  for (const auto& l : lines) EXPECT_EQ(l.find("forged"), std::string::npos) << l;
  for (const auto& l : lines) EXPECT_EQ(l.find("evil"), std::string::npos) << l;
  for (const auto& l : lines) EXPECT_EQ(l.find("admin.internal"), std::string::npos) << l;
  EXPECT_EQ(lines.back(), "Expect:");
}

TEST(RequestHeaders, EmptyUserValueUsesCurlsSemicolonForm) {
  DeliveryHeaders h = basic();
  h.message_headers = {{"X-Empty", ""}};
  EXPECT_EQ(built(h, "{}")[0], "X-Empty;");
}

TEST(RequestHeaders, InvalidHeaderThrowsNamingItButNotItsValue) {
  DeliveryHeaders h = basic();
  h.message_headers = {{"X-Token", "SECRETVALUE\r\nX-Evil: 1"}};
  try {
    built(h, "{}");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("X-Token"), std::string::npos) << what;
    EXPECT_EQ(what.find("SECRETVALUE"), std::string::npos) << what;
  }
}

TEST(RequestHeaders, InvalidInputsThrow) {
  auto throws = [](DeliveryHeaders h) { EXPECT_THROW(built(h, "{}"), std::invalid_argument); };
  DeliveryHeaders h = basic();
  h.endpoint_headers = {{"Bad Name", "v"}};
  throws(h);
  h = basic();
  h.message_headers = {{"", "v"}};
  throws(h);
  h = basic();
  h.message_headers = {{"Webhook-Id", "x\ny"}};  // dropped, but still a bad message
  throws(h);
  h = basic();
  h.event_type = "order\r\ncreated";
  throws(h);
  h = basic();
  h.webhook_id = "id\n";
  throws(h);
  h = basic();
  h.webhook_id.clear();
  throws(h);
  h = basic();
  h.message_headers = {{"X-Big", std::string(8193, 'v')}};
  throws(h);
}

TEST(RequestHeaders, RestampRenewsTimestampAndSignatureInPlace) {
  DeliveryHeaders h;
  h.endpoint_headers = {{"X-Tenant", "42"}};
  h.webhook_id = "msg_7";
  h.timestamp_unix_s = 1700000000;
  h.event_type = "order.created";
  h.attempt = 2;
  h.keys = keys({kEd25519Secret, kSecret});  // a rotation: both are made again
  h.user_agent = "pg_outbox/test";
  const std::string body = R"({"n":1})";
  const Lines lines = built(h, body);
  HeaderLines stamped = build_request_headers(h, body);
  restamp_request_headers(stamped, 1700000123, h.webhook_id, h.keys, body);
  const Lines restamped = as_vector(stamped);
  h.timestamp_unix_s = 1700000123;
  EXPECT_EQ(restamped, built(h, body));  // as if built at the later second
  ASSERT_EQ(restamped.size(), lines.size());
  size_t changed = 0;
  for (size_t i = 0; i < lines.size(); ++i) changed += lines[i] != restamped[i];
  EXPECT_EQ(changed, 2u);  // the timestamp and the signature, nothing else
}

TEST(RequestHeaders, RestampWithoutSecretChangesOnlyTheTimestamp) {
  DeliveryHeaders h;
  h.webhook_id = "msg_8";
  h.timestamp_unix_s = 1700000000;
  HeaderLines lines = build_request_headers(h, "{}");
  restamp_request_headers(lines, 1700000009, h.webhook_id, {}, "{}");
  h.timestamp_unix_s = 1700000009;
  EXPECT_EQ(as_vector(lines), built(h, "{}"));
}
