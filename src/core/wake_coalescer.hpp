// Coalescing the wakes of commits into claims. Every commit that queues a message wakes
// the worker; under thousands of commits per second, a claim per commit would spend the
// database's CPU on claims of one message each (and on empty ones), while one claim per
// few milliseconds takes them all. So a commit's wake that comes within `gap` of the
// last claim does not claim at once: the claim is deferred to last claim + gap.
//
// The gap is kMinGapMs while claims find work, and doubles up to kMaxGapMs while they
// come back empty (commits for a paused endpoint, or for messages due later): a stream
// of commits that bring nothing claimable costs at most one empty claim per 50 ms.
//
// Only a commit's wake is deferred: a claim that is due for other reasons (the last
// claim was full, so more is waiting; a retry or a deliver_at came due) goes at once.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pg_outbox::core {

class WakeCoalescer {
 public:
  static constexpr int kMinGapMs = 2;
  static constexpr int kMaxGapMs = 50;

  // Whether a claim is due now. woken: a commit asked for this wake; more_due: the last
  // claim was full (or something else made room), claim again at once; next_claim_ms:
  // when the next claim is due otherwise (a message comes due, the poll interval). A
  // commit's wake within the gap of the last claim is not a reason to claim now: it
  // lowers next_claim_ms to the end of the gap instead (the worker's wait ends then).
  // The caller claims only if this is true and there is room (wants_claim).
  bool should_claim(bool woken, bool more_due, int64_t now_ms, int64_t& next_claim_ms) const;

  // A claim starts at now_ms: the gap counts from here. Called before the claim runs,
  // so that a claim that fails still counts as the last one.
  void claim_started(int64_t now_ms);
  // The claim took `claimed` messages (HTTP and NOTIFY): the gap goes back to the
  // minimum when it found work, and doubles (up to the maximum) when it found none.
  // Not called when the claim failed: the gap stays as it was.
  void claim_finished(size_t claimed);

  int gap_ms() const { return gap_ms_; }
  int64_t last_claim_ms() const { return last_claim_ms_; }

 private:
  int64_t last_claim_ms_ = 0;  // unix ms: no claim yet is "long ago", the first wake is not deferred
  int gap_ms_ = kMinGapMs;
};

}  // namespace pg_outbox::core
