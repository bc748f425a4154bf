#include "core/notify_envelope.hpp"

#include <gtest/gtest.h>

using pg_outbox::core::notify_envelope;

// The expected texts are what PostgreSQL 15 prints for
// jsonb_build_object('id', id, 'event_type', event_type, 'payload', payload)::text.
TEST(NotifyEnvelope, IsLaidOutAsJsonbPrintsIt) {
  EXPECT_EQ(notify_envelope(42, R"({"order": 7, "items": [1, 2]})", std::string_view("order.created")),
            R"({"id": 42, "payload": {"order": 7, "items": [1, 2]}, "event_type": "order.created"})");
}

TEST(NotifyEnvelope, AMissingEventTypeIsNull) {
  EXPECT_EQ(notify_envelope(1, "[]", std::nullopt), R"({"id": 1, "payload": [], "event_type": null})");
}

TEST(NotifyEnvelope, TheEventTypeIsEscaped) {
  EXPECT_EQ(notify_envelope(9007199254740993, R"("é")", std::string_view(R"(a"b\c)")),
            R"({"id": 9007199254740993, "payload": "é", "event_type": "a\"b\\c"})");
}
