// The next message of each key whose head the worker took out of the queue: the worker
// claims it itself, by id, instead of writing it into the claim index (how and why:
// successors.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pg_outbox::pg::successors {

// In the worker's settle, right after the statements that moved these keys' heads (their
// locks held): each key's first message, if it waits behind a head that is gone now, is
// the worker's to claim once this transaction commits. One not due yet becomes a head in
// the table instead (the claim index knows when it comes due). SPI connected.
void find(const std::vector<std::string>& endpoints, const std::vector<std::string>& keys);

// Messages the worker holds to claim, each with its endpoint (store::claim's next_in_line),
// the number it waited with (one the claim finds with another number, or none, was moved
// meanwhile, and is not its key's next any more) and where its row version was last
// seen (tid_number): the claim reads it there, not through the primary key.
struct Ready {
  std::vector<int64_t> ids;
  std::vector<int64_t> seqs;
  std::vector<int64_t> tids;
  std::vector<std::string> endpoints;
};

// Those of the endpoints given, for the claim.
Ready ready(const std::vector<std::string>& endpoints);

// The claim took these, or passed them and did not take them: the ones it took are
// forgotten when it commits, and so are those that are no longer the worker's to claim
// (gone, made a head, moved). SPI connected.
void after_claim(const std::vector<int64_t>& passed, const std::vector<int64_t>& taken);

// Before a claim, and at housekeeping: what was found before a change to the endpoints
// (an alter_endpoint(ordered => ...) numbers the queue again), or belongs to an endpoint
// the worker no longer serves, becomes a head in the table if it is still its key's
// first message, and is forgotten at commit. Returns the endpoints' version it judged
// by. SPI connected.
uint64_t settle_stale(const std::function<bool(const std::string&)>& served);

// Whether no change to the endpoints committed since settle_stale returned this version.
// Such a change is counted before it is visible: when this is true after the claim, the
// claim's snapshot saw none, and the held messages it took were still next.
bool endpoints_unchanged_since(uint64_t endpoints_version);

// This transaction, not the worker's, made a key's next message of this endpoint its
// head in the table, or took keyed messages of it out of the queue, or moved one from or
// to it: at its commit, the lines of the endpoint's messages the worker looked up ahead
// are stale (successors.cpp).
void reordered_at_commit(const std::string& endpoint);
// The same for every endpoint (a TRUNCATE of the queue).
void reordered_everything_at_commit();

// When the worker starts serving the database: a worker that stopped held the next
// messages of some keys in its memory; the first message of every key that has no head
// becomes one. SPI connected.
void heal();

// Everything held, at once (the extension was dropped or the worker starts afresh).
void forget();

}  // namespace pg_outbox::pg::successors
