// Per-key commit order on ordered endpoints (SPEC §3 "Ordering"); how it works is told
// at the top of ordering.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pg_outbox::pg {

// Installs the transaction callback that forgets a transaction's ordering work at its end.
void register_ordering();

// This transaction inserted message `id` under an ordering key (outbox.enqueue, for an
// ordered endpoint, or a plain INSERT, with the ordering_seq it came with): when the
// transaction commits it takes its place in the key's commit order, together with the
// transaction's other such messages (their locks taken in one sorted pass).
void order_at_commit(int64_t id, const std::string& endpoint, const std::string& key,
                     std::optional<int64_t> preset = std::nullopt);

// This process is the worker: its settles promote the next message of each key in the
// statement that moves the head (OutboxStore::settle), not through the row trigger.
void set_ordering_worker();

// Takes the advisory locks of these ordering keys (core::ordering_lock) until the end of
// the transaction, lowest first: everyone takes them in that order, so that two
// transactions with several keys in common never wait for each other in a circle.
void lock_orderings(std::vector<int32_t> locks);

}  // namespace pg_outbox::pg
