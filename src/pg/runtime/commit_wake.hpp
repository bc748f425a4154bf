#pragma once

namespace pg_outbox::pg {

// The current transaction wrote messages: wake the worker if it commits.
void wake_worker_at_commit();

// The current transaction changed the extension (CREATE, ALTER, DROP EXTENSION): if it
// commits, the launcher looks at this database again, whatever it last saw there.
void request_launcher_at_commit();

}  // namespace pg_outbox::pg
