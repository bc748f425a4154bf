// The endpoints as the worker sees them, and the copy of each breaker it keeps in
// outbox.endpoints for the next worker.
#pragma once

#include "core/circuit_breaker.hpp"
#include "core/cloudevents.hpp"

#include <optional>
#include <string>
#include <vector>

namespace pg_outbox::pg::store {

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
  core::Format format = core::Format::StandardWebhooks;
  std::string source;  // CloudEvents source: the endpoint's, or core::default_source
  int batch_size = 1;  // most messages in one request (docs/delivery.md, Batches)
  core::Breaker breaker;
};

std::vector<EndpointRow> load_endpoints();

// Skipped (false) while another transaction holds the endpoint's row (an operator's open
// alter_endpoint): the breaker's copy waits, deliveries do not.
bool save_breaker(const std::string& endpoint, const core::Breaker& breaker);

}  // namespace pg_outbox::pg::store
