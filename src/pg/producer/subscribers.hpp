// Who outbox.publish delivers an event type to (docs/delivery.md, Publish and subscribe):
// the endpoints subscribed to it by its exact name or by a "prefix.*" pattern, read from
// outbox.endpoint_subscriptions with one indexed lookup and kept per backend until a
// change to that table commits (its statement trigger sends a relcache invalidation).
#pragma once

#include "pg/boundary/postgres.hpp"

#include <string>
#include <vector>

namespace pg_outbox::pg {

// The endpoints subscribed to the event type, by name. `owner`: the extension's owner,
// who reads the table.
std::vector<std::string> subscribers_of(const std::string& event_type, Oid owner);

// Publishes that found no subscriber in this database (metrics()).
void count_unmatched_publish();
uint64 unmatched_publishes();

}  // namespace pg_outbox::pg
