// The worker's constants, and the exception that says the extension changed under it.
// Included only by the files of worker/.
#pragma once

#include "core/circuit_breaker.hpp"
#include "pg/boundary/postgres.hpp"
#include "pg/runtime/settings.hpp"

#include <stdexcept>

namespace pg_outbox::pg::worker {

// The extension was dropped (and perhaps created again) under the worker's feet.
struct ExtensionChanged : std::runtime_error {
  ExtensionChanged() : std::runtime_error("pg_outbox was dropped or created again") {}
};

// Thrown out of Worker::run when pg_outbox is not installed in the worker's database
// (never was, or DROP EXTENSION committed): the worker exits and the launcher starts one
// again when CREATE EXTENSION commits there.
struct ExtensionAbsent {};

constexpr const char* kVersion = PG_OUTBOX_VERSION;  // the extension version this library serves (Makefile)
constexpr const char* kUserAgent = "pg_outbox/" PG_OUTBOX_VERSION;
constexpr int kSettleBatch = 1000;  // results written back per transaction, at most
constexpr int kHousekeepingEveryMs = 1000;
// At SIGTERM, how long the requests already started may take to be answered before the
// worker writes what it has and exits (Worker::stop_gracefully): long enough for a
// receiver's usual answer, short enough that SIGTERM still ends the worker within a
// second, whatever a receiver does (t/001).
constexpr int kStopGraceMs = 500;
constexpr int kOrphanCheckEveryMs = 10000;
constexpr int kPurgeBatch = 1000;
constexpr int kOrphanBatch = 1000;
// Replayed messages moved into the queue per round: 20 ms of the worker's time, so that
// deliveries go on between two batches of a large replay. (An ordered endpoint's replay
// queues its messages itself, its keys' order placed at its own commit.)
constexpr int kReplayBatch = 1000;

inline core::BreakerConfig breaker_config() {
  return {settings.breaker_threshold, settings.backoff_base_ms, settings.backoff_max_ms};
}

}  // namespace pg_outbox::pg::worker
