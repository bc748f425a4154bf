// The GUCs (docs/operations.md, Configuration), defined in one place. The variables are written only by
// PostgreSQL's GUC machinery (at start and on SIGHUP) and read by everyone else.
#pragma once

#include "core/egress_policy.hpp"

namespace pg_outbox::pg {

struct Settings {
  char* database = nullptr;  // restart; empty: every database with the extension
  int max_workers = 8;       // restart; delivery workers (one per served database), the launcher aside
  bool enabled = true;
  int poll_interval_ms = 1000;
  int batch_size = 500;
  int max_concurrency = 64;
  int endpoint_concurrency = 32;  // an endpoint's cap on requests in flight, unless it has its own
  int http_timeout_ms = 5000;
  int max_attempts = 10;
  int backoff_base_ms = 1000;
  int backoff_max_ms = 3600 * 1000;
  int lease_s = 300;
  int breaker_threshold = 10;
  int disable_after_s = 5 * 86400;      // nothing but failures this long pauses an endpoint; 0: never
  int sent_retention_s = 86400;         // 0: delete a message as soon as it is sent
  int attempt_retention_s = 7 * 86400;  // 0: no attempt is logged
  int dlq_retention_s = -1;             // -1: keep dead letters for ever
  int max_payload_size = 1 << 20;       // bytes; larger payloads are refused or dead-lettered
  int max_inflight_bytes = 64 << 20;    // bytes of payload the worker holds at once
  char* egress_allow = nullptr;         // rules (core/egress_policy.hpp); checked when set
  char* egress_deny = nullptr;
};

extern Settings settings;

void define_settings();

// The egress policy the two GUCs hold now (they were checked when they were set).
core::EgressPolicy egress_policy();

}  // namespace pg_outbox::pg
