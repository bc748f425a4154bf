// Argument checks shared by the SQL-callable outbox._check_* functions and
// outbox.enqueue: each throws SqlError (22023) with the rule that was broken.
#pragma once

#include "pg/boundary/postgres.hpp"

namespace pg_outbox::pg {

void check_idempotency_key(const char* key);
void check_headers(Datum headers);  // a jsonb

}  // namespace pg_outbox::pg
