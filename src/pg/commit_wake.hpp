#pragma once

namespace pg_outbox::pg {

// Installs the transaction callback that wakes the worker at commit (every backend).
void register_commit_wake();

}  // namespace pg_outbox::pg
