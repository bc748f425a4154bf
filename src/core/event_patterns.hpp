// Subscriptions of outbox.publish (docs/delivery.md, Publish and subscribe): which
// subscription patterns match an event type. A pattern is an exact event type, or a
// prefix followed by ".*" that matches every event type starting with the prefix and a
// dot ("order.*" matches "order.created" and "order.line.added", not "order").
#pragma once

#include <string>
#include <vector>

namespace pg_outbox::core {

// Every pattern that matches the event type: itself, then "<prefix>.*" for each dot of
// it that has something before it ("a.b.c": "a.b.c", "a.*", "a.b.*"). Looking these up
// with one "= ANY" finds every subscriber in one index scan.
std::vector<std::string> patterns_matching(const std::string& event_type);

}  // namespace pg_outbox::core
