// What the worker's files share: its constants, its clock, and the exception that
// says the extension changed under it. Included only by src/pg/worker*.cpp.
#pragma once

#include "core/circuit_breaker.hpp"
#include "pg/boundary/postgres.hpp"
#include "pg/runtime/settings.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace pg_outbox::pg::worker_detail {

// The extension was dropped (and perhaps created again) under the worker's feet.
struct ExtensionChanged : std::runtime_error {
  ExtensionChanged() : std::runtime_error("pg_outbox was dropped or created again") {}
};

#define PG_OUTBOX_VERSION "0.3.0"  // the extension version this library serves
constexpr const char* kVersion = PG_OUTBOX_VERSION;
constexpr const char* kUserAgent = "pg_outbox/" PG_OUTBOX_VERSION;
constexpr size_t kResponseBodyLimit = 1024;  // dlq.dead_letters.response_body keeps the first 1 KiB
constexpr int kSettleBatch = 1000;           // results written back per transaction, at most
// Gap between claims that commits trigger: 2 ms while claims find work, doubling up
// to 50 ms while they come back empty (commits for a paused endpoint, say).
constexpr int kWakeCoalesceMinMs = 2;
constexpr int kWakeCoalesceMaxMs = 50;
constexpr int kHousekeepingEveryMs = 1000;
constexpr int kOrphanCheckEveryMs = 10000;
constexpr int kPurgeBatch = 1000;
constexpr int kOrphanBatch = 1000;

// Errors that may mean DROP EXTENSION committed while a statement waited: the loop's
// recover_from_error tells that apart; nothing else may take them for an endpoint's own.
inline bool extension_may_be_gone(int sqlstate) {
  return sqlstate == ERRCODE_UNDEFINED_TABLE || sqlstate == ERRCODE_INVALID_SCHEMA_NAME ||
         sqlstate == ERRCODE_UNDEFINED_FUNCTION;
}

inline int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

inline core::BreakerConfig breaker_config() {
  return {settings.breaker_threshold, settings.backoff_base_ms, settings.backoff_max_ms};
}

}  // namespace pg_outbox::pg::worker_detail
