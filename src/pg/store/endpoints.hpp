// The endpoints as the worker sees them, and the copy of each breaker it keeps in
// outbox.endpoints for the next worker.
#pragma once

#include "core/circuit_breaker.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pg_outbox::pg::store {

// One of an endpoint's signing secrets (outbox.endpoint_secrets).
struct EndpointSecret {
  std::string secret;
  int64_t expires_at_ms = 0;  // unix ms; 0: the current secret
  bool operator==(const EndpointSecret& other) const {
    return secret == other.secret && expires_at_ms == other.expires_at_ms;
  }
  bool operator!=(const EndpointSecret& other) const { return !(*this == other); }
};

struct EndpointRow {
  std::string name;
  std::string url;      // empty for a NOTIFY endpoint
  std::string channel;  // empty for an HTTP endpoint
  std::string headers_json;
  std::vector<EndpointSecret> secrets;  // current first; none: unsigned
  std::optional<int> timeout_ms;
  std::optional<int> max_attempts;
  std::optional<int> concurrency;  // most requests in flight; none: pg_outbox.endpoint_concurrency
  std::optional<int> rate_limit;   // most requests started per second; none: no limit
  bool ordered = false;
  bool paused = false;
  bool has_max_pending = false;
  core::Breaker breaker;
};

// Every endpoint, with its secrets (expired ones included until they are deleted).
std::vector<EndpointRow> load_endpoints();

// Forgets the secrets whose rotation's grace has ended (the worker no longer signs with
// them, docs/operations.md, Rotating a secret). A row an operator's open rotate_secret
// holds waits for a later round. Returns how many.
int64_t delete_expired_secrets();

// Skipped (false) while another transaction holds the endpoint's row (an operator's open
// alter_endpoint): the breaker's copy waits, deliveries do not.
bool save_breaker(const std::string& endpoint, const core::Breaker& breaker);

}  // namespace pg_outbox::pg::store
