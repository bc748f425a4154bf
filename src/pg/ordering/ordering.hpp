// Per-key commit order on ordered endpoints (docs/delivery.md, Ordering); how it works
// is told at the top of ordering.cpp.
#pragma once

#include "pg/boundary/spi.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pg_outbox::pg {

// The number a keyed message of an ordered endpoint is inserted with when its key already
// has a message (outbox.enqueue and outbox.publish: producer/enqueue_row.cpp), until its
// commit places it: a follower then, numbered, or the head if the key emptied meanwhile
// (NULL). Inserted without a number, the message entered the claim index and the head's
// range of the ordering index until its commit numbered it, and that first version, dead
// from then on, cost a heap page to the first scan of each that met it (the worker's claim,
// its lookup of the key's next messages, a promotion). With this number its entry lies
// after every real number (drawn from outbox.commit_order), where a scan from the key's
// first entry stops before it (at the key's first message still there), and the worker's
// lookup never goes (it reads below this number). Only the inserting transaction ever
// sees a row with it; placing it at commit treats it as no number (the row's id orders it
// among the transaction's rows).
constexpr int64_t kProvisionalSeq = INT64_MAX;
// The number a row was inserted with, as order_at_commit takes it: provisional, or none.
inline std::optional<int64_t> inserted_seq(bool provisional) {
  return provisional ? std::optional<int64_t>(kProvisionalSeq) : std::nullopt;
}

// This transaction inserted message `id` under an ordering key (outbox.enqueue, for an
// ordered endpoint, or a plain INSERT, with the ordering_seq it came with), or moved it
// into that key (an UPDATE of its endpoint or ordering_key): when the
// transaction commits it takes its place in the key's commit order, together with the
// transaction's other such messages (their locks taken in one sorted pass).
void order_at_commit(int64_t id, const std::string& endpoint, const std::string& key,
                     std::optional<int64_t> preset = std::nullopt);

// Call after noting an INSERT's rows (order_at_commit): if the commit-time trigger of one
// of them fired before it was noted (the constraints immediate) and left it to be placed
// now, places every row noted so far, as `owner`. Nothing to do otherwise.
void place_noted_if_asked(Oid owner);

// This transaction moved committed message `id` into this key (moves.cpp), from the
// number `seq` it waited with (none: it was a head): placed at commit like an inserted
// row, before the transaction's own inserts of the key, moved rows in their old order.
void order_moved_at_commit(int64_t id, const std::string& endpoint, const std::string& key, std::optional<int64_t> seq);

// Takes the advisory locks of these ordering keys (core::ordering_lock) until the end of
// the transaction, lowest first: everyone takes them in that order, so that two
// transactions with several keys in common never wait for each other in a circle.
void lock_orderings(std::vector<int32_t> locks);

// These keys' heads left the queue (the caller holds their locks): each key's next
// message becomes its head. Returns the (endpoint, ordering_key) of each promoted one.
// SPI must be connected.
Rows promote_next_in_order(const std::vector<std::string>& endpoints, const std::vector<std::string>& keys,
                           Statement::Visibility visibility = Statement::Visibility::kStatement);

}  // namespace pg_outbox::pg
