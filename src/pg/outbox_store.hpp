// The worker's SQL against outbox.* and dlq.*: what it claims, how it settles, and
// housekeeping. Every function runs inside a transaction opened by the caller.
#pragma once

#include "core/circuit_breaker.hpp"
#include "core/delivery_policy.hpp"
#include "pg/spi.hpp"

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
  bool ordered = false;
  bool paused = false;
  core::Breaker breaker;
};

struct ClaimedMessage {
  int64_t id = 0;
  std::string endpoint;
  std::string event_type;
  std::string payload;       // HTTP: the jsonb text; NOTIFY: the whole envelope
  std::string headers_json;  // empty: none
  std::string idempotency_key;
  int attempts = 0;  // including this one
};

// The results of a round of deliveries, written back in one transaction.
struct Settlements {
  struct Sent { int64_t id; int32_t http_status; };
  struct Retry { int64_t id; int64_t delay_ms; std::string error; int32_t http_status; };
  struct Dead { int64_t id; core::DeadReason reason; std::string error; int32_t http_status; std::string body; };
  std::vector<Sent> sent;
  std::vector<Retry> retry;
  std::vector<Dead> dead;
  std::vector<int64_t> released;  // claimed but never attempted: the attempt is given back
  bool empty() const { return sent.empty() && retry.empty() && dead.empty() && released.empty(); }
};

class OutboxStore {
 public:
  // The OID of pg_outbox in this database (0 while it does not exist). A new OID
  // means the extension was dropped and created again: new tables, ids from 1.
  uint32_t extension_oid();
  std::vector<EndpointRow> load_endpoints();
  int64_t recover_in_flight();  // at start: the previous worker's claims go back to pending
  int64_t expire_leases();

  // Claims due pending messages of the given endpoints. Messages of `ordered`
  // endpoints are claimed only when they head their ordering key.
  std::vector<ClaimedMessage> claim(const std::vector<std::string>& endpoints,
                                    const std::vector<std::string>& ordered, int limit, int lease_s, bool notify);
  // Earliest next_attempt_at (unix ms) among pending messages of these endpoints.
  std::optional<int64_t> next_due_ms(const std::vector<std::string>& endpoints);

  void settle(const Settlements& settlements, bool delete_sent);
  void save_breaker(const std::string& endpoint, const core::Breaker& breaker);
  void notify(const std::string& channel, const std::string& payload);

  int64_t purge_sent(int retention_s, int limit);
  int64_t purge_dead_letters(int retention_s, int limit);
  // Pending messages whose endpoint no longer exists (a plain INSERT may name any endpoint).
  std::vector<int64_t> claim_orphans(int limit);
};

}  // namespace pg_outbox::pg
