// The endpoints as the worker sees them, the copy of each breaker and failing streak it
// keeps in outbox.endpoints for the next worker, and the pause of an endpoint that
// retires itself.
#pragma once

#include "core/circuit_breaker.hpp"
#include "core/endpoint_retirement.hpp"
#include "core/cloudevents.hpp"

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
  bool pull = false;  // read by application workers (consumer/README.md), never pushed
  core::Format format = core::Format::StandardWebhooks;
  std::string source;  // CloudEvents source: the endpoint's, or core::default_source
  int batch_size = 1;  // most messages in one request (docs/delivery.md, Batches)
  core::Breaker breaker;
  core::FailingStreak failing;  // outbox.endpoints.failing_since
  int64_t resumed_at_ms = 0;    // unix ms of the operator's last resume_endpoint; 0: never
};

// The channel on which the worker announces what operators' tooling should know, as
// JSON (docs/operations.md, Endpoints that retire themselves).
constexpr const char* kEventsChannel = "pg_outbox_events";

// Every endpoint, with its secrets (expired ones included until they are deleted).
std::vector<EndpointRow> load_endpoints();

// Forgets the secrets whose rotation's grace has ended (the worker no longer signs with
// them, docs/operations.md, Rotating a secret). A row an operator's open rotate_secret
// holds waits for a later round. Returns how many.
int64_t delete_expired_secrets();

// Skipped (false) while another transaction holds the endpoint's row (an operator's open
// alter_endpoint): the breaker's copy waits, deliveries do not. The failing streak is
// saved with it.
bool save_breaker(const std::string& endpoint, const core::Breaker& breaker, const core::FailingStreak& failing);

// Pauses the endpoint for `reason` (docs/operations.md, Endpoints that retire themselves)
// and queues the JSON event for NOTIFY channel pg_outbox_events, sent at commit. Not
// when it is paused already, or when an operator resumed it after since_ms (the failures
// judged are older than the resume, or the 410 came before it): a resume always wins.
enum class RetireResult {
  Retired,     // paused; the event was queued
  NotRetired,  // paused already, or resumed since: nothing to do
  RowBusy,     // another transaction holds the row: try again at the next settle
};
RetireResult retire_endpoint(const std::string& endpoint, core::PauseReason reason, int64_t since_ms);

}  // namespace pg_outbox::pg::store
