// What the worker claims: due messages of the endpoints it may claim for now, the
// record that makes a claim's attempts count even if the worker dies, when the next
// message comes due, and what a dead worker's claims leave behind.
#pragma once

#include "pg/ordering/successors.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pg_outbox::pg::store {

struct ClaimedMessage {
  int64_t id = 0;
  int64_t tid = 0;  // where its row version is (tid_number): the settle finds it there
  std::string endpoint;
  std::string event_type;
  bool has_event_type = false;  // event_type is not NULL
  std::string payload;          // the jsonb text; empty when too large
  std::string headers_json;     // empty: none
  std::string idempotency_key;
  int64_t created_unix_us = 0;  // enqueued at (CloudEvents' time; ClaimFor::kPayloadWithTime only)
  int attempts = 0;             // including this one
  int64_t payload_size = 0;     // as stored, uncompressed (outbox._payload_size)
  bool too_large = false;       // over pg_outbox.max_payload_size: not read, never sent
  // A keyed message's key: the settle takes its lock before the message leaves the queue
  // (store::settle), and the worker claims the key's next message once it left
  // (successors.hpp). A message being delivered keeps its key (ordering/moves.cpp refuses
  // to move it).
  std::optional<std::string> ordering_key;
  // Its number behind its key's head (none: a head): a key's next message the worker
  // held is claimed only with the number it was found with (worker/claim.cpp).
  std::optional<int64_t> ordering_seq;
};

// What a claim reads besides the payload. kPayloadWithTime: created_unix_us too (a
// CloudEvents endpoint is among those claimed: their time attribute; the others, and
// NOTIFY endpoints, need not pay for it).
enum class ClaimFor { kPayload, kPayloadWithTime };

// Due messages of the given endpoints, the oldest due taken first, returned in id order;
// none of `excluded` (in flight), none waiting behind its key's head: the heads, and those
// of next_in_line (the keys' next messages the worker holds, ordering/successors.hpp)
// that still wait in the table. Payloads are read while their total stays under
// budget_bytes (the first always is); a payload over max_payload_size is not read at all.
// For NOTIFY, the payload is the envelope the channel carries.
std::vector<ClaimedMessage> claim(const std::vector<std::string>& endpoints, int limit,
                                  const std::vector<int64_t>& excluded, int64_t budget_bytes, int64_t max_payload_size,
                                  ClaimFor purpose, const successors::Ready& next_in_line);

// Records a batch handed to HTTP (outbox.claims); returns its id.
int64_t record_claim(const std::vector<int64_t>& ids, const std::vector<int32_t>& attempts);

// How long until the earliest next_attempt_at among the messages of these endpoints not
// excluded, from the transaction's now() (0 or less: due already, so blocked).
std::optional<int64_t> next_due_in_ms(const std::vector<std::string>& endpoints, const std::vector<int64_t>& excluded);

// At start: the claims a previous worker left. Their attempts are recorded on the
// messages still in the queue (the requests may have reached the receiver), and the
// claims go. With log_attempts, each of those attempts is logged in outbox.attempts at
// its claim's time, its outcome unknown. Returns how many messages were in them.
int64_t recover_claims(bool log_attempts);

}  // namespace pg_outbox::pg::store
