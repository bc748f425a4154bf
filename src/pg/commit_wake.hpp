#pragma once

namespace pg_outbox::pg {

// Installs the transaction callback that wakes the worker at commit (every backend).
void register_commit_wake();

// The current transaction wrote messages: wake the worker if it commits.
void wake_worker_at_commit();

}  // namespace pg_outbox::pg
