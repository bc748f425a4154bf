// When the worker writes its results back. Each write is a transaction whose fixed part
// (the statement's start, the history's partition routing, the commit) cost as much as
// 20 messages' own rows: a drain that wrote every round wrote about 37 results at a
// time, and spent 8.6 µs a message on it. While results come in fast, plain deliveries
// therefore wait for the next write, at most kSettleEveryMs after the last one, or until
// kSettleAtOnce of them wait. Once the last write had fewer than kSettleLight, each is
// written at once again: a light flow (1,000 messages a second) gains nothing from
// waiting, and its late writes, made just before the next claim, put 0.35 ms on the
// median from commit to receipt.
// A result that changes what the worker does next is written at once: a failure (a
// retry, a dead letter), a message given back, or an ordered key's message, whose next
// one waits for it. A breaker that changed is written with the results, or at the next
// round when none wait (its endpoint's row may be locked: it must not make a busy loop).
//
// Waiting results are not lost to a crash: their messages stay claimed (outbox.claims)
// and a worker that starts again sends them once more, as it does for those in flight.
// A stop (SIGTERM) writes them before the worker exits (Worker::stop_gracefully). Claims
// skip their messages, as they skip those in flight.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pg_outbox::core {

constexpr int kSettleEveryMs = 5;
constexpr size_t kSettleAtOnce = 128;
constexpr size_t kSettleLight = 16;

// The last write of results: when, and how many deliveries it wrote.
struct LastSettle {
  int64_t at_ms = 0;
  size_t results = 0;
};

// When the waiting results are due to be written (INT64_MAX when none wait; 0: at once).
// waiting: how many deliveries; urgent: one of the results must not wait. A wall clock
// set back before the last write makes them due at once, not after the step back.
int64_t settle_at_ms(size_t waiting, bool urgent, const LastSettle& last, int64_t now_ms);

}  // namespace pg_outbox::core
