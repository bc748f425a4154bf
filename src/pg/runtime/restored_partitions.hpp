// A restore's time partitions take the place of the worker's empty ones
// (restored_partitions.cpp).
#pragma once
#include "pg/boundary/postgres.hpp"

extern "C" {
#include "nodes/nodes.h"
}

namespace pg_outbox::pg {

// From the utility hook, before a statement runs: before pg_dump's CREATE TABLE or ATTACH
// PARTITION of a time partition of outbox.history or outbox.attempts, drops the worker's
// empty partition that would make it fail. Raises an ERROR as PostgreSQL does.
void make_room_for_restored_partition(Node* stmt);

}  // namespace pg_outbox::pg
