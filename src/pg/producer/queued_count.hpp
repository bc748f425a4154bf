// How many undelivered messages each endpoint with a max_pending has, kept in shared
// memory, so that outbox.enqueue checks max_pending without counting rows; how it stays
// right is told at the top of queued_count.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pg_outbox::pg {

struct DatabaseSlot;

// Producer side (any backend of the database).
enum class Room {
  kFree,     // under max_pending: the message is counted for this transaction
  kFull,     // max_pending messages are undelivered (committed or being enqueued)
  kUnknown,  // the endpoint is not counted (yet): the caller counts rows
};
// `reserved`: this transaction now counts one more message of the endpoint (also while
// the worker has yet to count it, with kUnknown, so that its commit is not missed).
Room reserve_queued(const std::string& endpoint, int64_t max_pending, bool& reserved);
// Takes back a reservation: the message was refused, or not inserted after all (an
// idempotency key already queued, or inserted by a statement that noted it itself).
void release_queued(const std::string& endpoint);
// A plain INSERT statement added n messages (counted, never refused).
void note_queued(const std::string& endpoint, int64_t n);
// Rows left the queue, or moved to another endpoint, otherwise than by the worker (an
// operator's DELETE or UPDATE, TRUNCATE, drop_endpoint): the worker counts again.
void queue_changed();

// How many undelivered messages each endpoint has in the queue, counting no more than
// `limit` of each when one is given: its heads (the claim index) and the messages
// waiting behind them (the ordering index), in the statement's own snapshot. The one
// count of rows, for enqueue before the worker has counted an endpoint and for the
// worker's recount. SPI must be connected.
std::vector<int64_t> count_queued_rows(const std::vector<std::string>& endpoints,
                                       std::optional<int64_t> limit = std::nullopt);

// Worker side.
// n messages of the endpoint left the queue in a transaction that has committed.
void queued_removed(DatabaseSlot& slot, const std::string& endpoint, int64_t n);
// Whether a recount was asked for since the last call (and clears the request).
bool queued_recount_due(DatabaseSlot& slot);
// Keeps entries for exactly these endpoints (the ones with a max_pending) and marks them
// being counted; call right before the statement that counts, in its transaction.
void begin_recount(DatabaseSlot& slot, const std::vector<std::string>& endpoints);
// The count that statement found, with what committed since begin_recount.
void finish_recount(DatabaseSlot& slot, const std::string& endpoint, int64_t counted);

}  // namespace pg_outbox::pg
