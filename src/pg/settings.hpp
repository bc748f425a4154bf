// The GUCs of SPEC §4, defined in one place. The variables are written only by
// PostgreSQL's GUC machinery (at start and on SIGHUP) and read by everyone else.
#pragma once

namespace pg_outbox::pg {

struct Settings {
  char* database = nullptr;      // restart
  bool enabled = true;
  int poll_interval_ms = 1000;
  int batch_size = 500;
  int max_concurrency = 64;
  int http_timeout_ms = 5000;
  int max_attempts = 10;
  int backoff_base_ms = 1000;
  int backoff_max_ms = 3600 * 1000;
  int lease_s = 300;
  int breaker_threshold = 10;
  int sent_retention_s = 86400;  // 0: delete a message as soon as it is sent
  int dlq_retention_s = -1;      // -1: keep dead letters for ever
};

extern Settings settings;

void define_settings();

}  // namespace pg_outbox::pg
