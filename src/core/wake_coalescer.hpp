// Coalescing the wakes of commits into claims. Every commit that queues a message wakes
// the worker; under thousands of commits per second, a claim per commit would spend the
// database's CPU on claims of one message each (and on empty ones), while one claim per
// few milliseconds takes them all. So a commit's wake that comes within `gap` of the
// last claim does not claim at once: the claim is deferred to last claim + gap.
//
// The gap is kMinGapMs while claims find work, and grows with the time the worker has
// gone without: a quarter of the time from the last claim that found work to the last
// claim, up to kMaxGapMs. A stream of commits that bring nothing claimable (commits for
// a paused endpoint, or for messages due later) costs at most one empty claim per 50 ms
// once it has lasted 250 ms. The minimum is what a light flow waits: with 2 ms, a commit
// soon after a claim waited up to 2 ms for the next (COMMIT → receipt at 1,000 messages
// a second: p50 1.64–1.71 ms, against 1.12–1.20 ms with 1 ms; p99 3.9–4.1 against
// 3.3–3.5 ms). 1 ms costs the worker's main thread at most a claim a millisecond: at
// that rate 5,000 claims more per 20,000 messages, a quarter more CPU (7 % of a core).
// A drain claims again as soon as its claims come back full, whatever the gap. A steady
// flow of messages keeps the minimum, although many of its claims come back empty (a
// claim takes every message committed before it began, and the wakes of those that
// committed just before then come after it): the gap doubled on each empty claim once,
// and at 1,000 messages/s that deferred one message in a hundred by 16 to 50 ms.
//
// Only a commit's wake is deferred: a claim that is due for other reasons (the last
// claim was full, so more is waiting; a retry or a deliver_at came due) goes at once.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pg_outbox::core {

class WakeCoalescer {
 public:
  static constexpr int kMinGapMs = 1;
  static constexpr int kMaxGapMs = 50;
  static constexpr int kIdleShare = 4;  // the gap is the time without work divided by this

  // Whether a claim is due now. woken: a commit asked for this wake; more_due: the last
  // claim was full (or something else made room), claim again at once; next_claim_ms:
  // when the next claim is due otherwise (a message comes due, the poll interval). A
  // commit's wake within the gap of the last claim is not a reason to claim now: it
  // lowers next_claim_ms to the end of the gap instead (the worker's wait ends then).
  // The caller claims only if this is true and there is room (wants_claim).
  bool should_claim(bool woken, bool more_due, int64_t now_ms, int64_t& next_claim_ms) const;

  // A claim starts at now_ms: the gap counts from here. Called before the claim runs,
  // so that a claim that fails still counts as the last one (one that found nothing).
  void claim_started(int64_t now_ms);
  // The claim took `claimed` messages (HTTP and NOTIFY): if any, the worker has work as
  // of the claim's start, and the gap is back to the minimum.
  // Not called when the claim failed.
  void claim_finished(size_t claimed);

  int gap_ms() const;
  int64_t last_claim_ms() const { return last_claim_ms_; }

 private:
  int64_t last_claim_ms_ = 0;  // unix ms: no claim yet is "long ago", the first wake is not deferred
  int64_t last_work_ms_ = 0;   // the start of the last claim that found work (or of the first claim)
};

}  // namespace pg_outbox::core
