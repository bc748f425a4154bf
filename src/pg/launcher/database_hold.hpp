// The ProcessUtility hook that keeps the launcher informed (database_hold.cpp).
#pragma once

namespace pg_outbox::pg {

// From _PG_init when preloaded: every backend then holds a database off its worker
// before DROP DATABASE (and the like), and wakes at commit of an extension statement.
void register_database_hold();

}  // namespace pg_outbox::pg
