// The worker's SQL against outbox.* and dlq.*: what it claims, how it settles, and
// housekeeping. Every function runs inside a transaction opened by the caller.
#pragma once

#include "core/circuit_breaker.hpp"
#include "core/request_headers.hpp"
#include "core/delivery_policy.hpp"
#include "pg/boundary/spi.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pg_outbox::pg {

struct EndpointRow {
  std::string name;
  std::string url;      // empty for a NOTIFY endpoint
  std::string channel;  // empty for an HTTP endpoint
  std::string headers_json;
  std::string secret;  // empty: unsigned
  std::optional<int> timeout_ms;
  std::optional<int> max_attempts;
  std::optional<int> concurrency;  // most requests in flight; none: pg_outbox.endpoint_concurrency
  std::optional<int> rate_limit;   // most requests started per second; none: no limit
  bool ordered = false;
  bool paused = false;
  bool has_max_pending = false;
  core::Breaker breaker;
};

struct ClaimedMessage {
  int64_t id = 0;
  std::string endpoint;
  std::string event_type;
  std::string payload;       // HTTP: the jsonb text; NOTIFY: the whole envelope; empty when too large
  std::string headers_json;  // empty: none
  std::string idempotency_key;
  int attempts = 0;          // including this one
  int64_t payload_size = 0;  // as stored, uncompressed (outbox._payload_size)
  bool too_large = false;    // over pg_outbox.max_payload_size: not read, never sent
  // A keyed message: the lock its key's order is decided under, which the settle takes
  // before the message leaves the queue (pg/ordering.hpp), in sorted order with the
  // others: the trigger that promotes the key's next message takes it too.
  std::optional<int32_t> ordering_lock;
};

// The results of a round of deliveries, written back in one transaction. Every result
// carries the attempt number it settles: the queue's row records it (a retry), or it
// travels with the row to the history or the DLQ. And its endpoint: results are written
// per endpoint when writing them all together fails (Worker::settle_apart).
struct Settlements {
  struct Sent {
    int64_t id;
    int32_t http_status;
    int attempts;
    std::string endpoint;
    std::optional<int32_t> ordering_lock;  // ClaimedMessage::ordering_lock
  };
  struct Retry {
    int64_t id;
    int64_t delay_ms;
    std::string error;
    int32_t http_status;
    int attempts;
    std::string endpoint;
  };
  struct Dead {
    int64_t id;
    core::DeadReason reason;
    std::string error;
    int32_t http_status;
    std::string body;
    int attempts;
    std::string endpoint;
    std::optional<int32_t> ordering_lock;
  };
  std::vector<Sent> sent;
  std::vector<Retry> retry;
  std::vector<Dead> dead;
  std::vector<int64_t> finished_claims;  // outbox.claims rows whose every message is settled
  std::vector<int64_t> given_back;       // taken back unstarted: no longer in flight, attempt not made
  bool empty() const {
    return sent.empty() && retry.empty() && dead.empty() && finished_claims.empty() && given_back.empty();
  }
};

class OutboxStore {
 public:
  // The OID of pg_outbox in this database (0 while it does not exist). A new OID
  // means the extension was dropped and created again: new tables, ids from 1.
  uint32_t extension_oid();
  std::string extension_version();
  // This database's instance id for webhook-ids (outbox._instance(), made if missing).
  core::WebhookIdSource webhook_id_source();
  std::vector<EndpointRow> load_endpoints();
  // At start: the claims a previous worker left. Their attempts are recorded on the
  // messages still in the queue (the requests may have reached the receiver), and the
  // claims go. Returns how many messages were in them.
  int64_t recover_claims();

  // Due messages of the given endpoints, oldest first, none of `excluded` (in flight),
  // none waiting behind its key's head. Keyed messages come with their ordering lock.
  // Payloads
  // are read while their total stays under budget_bytes (the first always is); a
  // payload over max_payload_size is not read at all.
  std::vector<ClaimedMessage> claim(const std::vector<std::string>& endpoints, int limit,
                                    const std::vector<int64_t>& excluded, int64_t budget_bytes,
                                    int64_t max_payload_size, bool notify);
  // Records a batch handed to HTTP (outbox.claims); returns its id.
  int64_t record_claim(const std::vector<int64_t>& ids, const std::vector<int32_t>& attempts);
  // How long until the earliest next_attempt_at among the messages of these endpoints
  // not excluded, from the transaction's now() (0 or less: due already, so blocked).
  std::optional<int64_t> next_due_in_ms(const std::vector<std::string>& endpoints,
                                        const std::vector<int64_t>& excluded);

  // keep_history: delivered messages go to outbox.history (else they are deleted).
  void settle(const Settlements& settlements, bool keep_history);
  // Skipped (false) while another transaction holds the endpoint's row (an operator's
  // open alter_endpoint): the breaker's copy waits, deliveries do not.
  bool save_breaker(const std::string& endpoint, const core::Breaker& breaker);
  void notify(const std::string& channel, const std::string& payload);

  // History partitions of width_s seconds exist up to the returned time (unix ms).
  int64_t prepare_history(int width_s);
  // Drops what retention has passed; rows of a partition wider than width_s (made for a
  // longer retention) are deleted one by one, so that a shorter retention holds at once.
  int64_t retire_history(int retention_s, int width_s);
  // Handled dead letters past retention; rows another transaction holds wait for a later round.
  int64_t purge_dead_letters(int retention_s, int limit);
  // Messages whose endpoint no longer exists (a plain INSERT may name any endpoint),
  // found through the distinct endpoints of the queue, not by reading every row.
  // How many messages each endpoint has in the queue (for max_pending's count).
  std::vector<int64_t> count_queued(const std::vector<std::string>& endpoints);
  struct Orphan {
    int64_t id;
    int attempts;
    std::string endpoint;
  };
  std::vector<Orphan> find_orphans(const std::vector<int64_t>& excluded, int limit);
};

}  // namespace pg_outbox::pg
