// Writing a round's results back: delivered messages leave the queue for the history,
// retried ones get their next attempt, dead ones move to the DLQ, requests given back
// unstarted leave their claims. All in the caller's transaction, so that a failed write
// changes nothing and can be tried again.
#pragma once

#include "core/delivery_policy.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pg_outbox::pg::store {

// Every result carries the attempt number it settles (the queue's row records it for a
// retry, or it travels with the row to the history or the DLQ), and its endpoint:
// results are written per endpoint when writing them all together fails.
struct Settlements {
  // A request that was made, for the attempt log (outbox.attempts): a result that carries
  // none (a message dead-lettered before it was sent) logs no attempt.
  struct Attempt {
    int64_t started_ms = 0;    // unix ms
    int64_t duration_us = -1;  // -1: not timed (NOTIFY leaves at commit)
    std::string body;          // the head of a failed answer (core::ResponseJudgement::failure_body)
    int number = 0;            // the attempt's number when the result records another (a 410's
                               // uncounted attempt); 0: the result's attempts
  };
  struct Sent {
    int64_t id;
    int32_t http_status;  // 0: none (NOTIFY)
    int attempts;
    std::string endpoint;
    std::optional<std::string> ordering_key;  // ClaimedMessage::ordering_key
    std::optional<Attempt> attempt;
    int64_t tid = 0;  // ClaimedMessage::tid; 0: not known (a pull reader's ack)
  };
  struct Retry {
    int64_t id;
    int64_t delay_ms;
    std::string error;
    int32_t http_status;  // 0: no answer
    int attempts;
    std::string endpoint;
    std::optional<Attempt> attempt;
  };
  struct Dead {
    int64_t id = 0;
    core::DeadReason reason = core::DeadReason::None;
    std::string error;
    int32_t http_status = 0;  // 0: no answer
    std::string body;         // the head of the receiver's answer, if any
    int attempts = 0;
    std::string endpoint;
    std::optional<std::string> ordering_key;
    std::optional<Attempt> attempt;
  };
  std::vector<Sent> sent;
  std::vector<Retry> retry;
  std::vector<Dead> dead;
  std::vector<int64_t> finished_claims;  // outbox.claims rows whose every message is settled
  std::vector<int64_t> given_back;       // taken back unstarted: no longer in flight, attempt not made

  bool empty() const {
    return sent.empty() && retry.empty() && dead.empty() && finished_claims.empty() && given_back.empty();
  }
  bool has_results() const { return !sent.empty() || !retry.empty() || !dead.empty(); }
  // Moves the results (not the claims or give-backs) of `from` to the end of these.
  void take_results(Settlements& from);
};

// What the settle keeps besides the queue's changes: delivered messages in
// outbox.history (else they are deleted), the attempts made in outbox.attempts.
struct Keep {
  bool history = true;
  bool attempts = true;
};

// Who takes a key's next message when its head leaves: the worker's settle claims it
// itself (ordering/successors.hpp); for any other (a pull reader's ack) the queue's AFTER
// DELETE trigger makes it the head in the table (ordering/ordering.cpp).
enum class Succession { kInTable, kClaimedByWorker };

// The keyed heads that leave the queue hand their place to their key's next message,
// under the keys' locks, taken first.
void settle(const Settlements& settlements, Keep keep, Succession succession = Succession::kInTable);

// What a settle keeps under the retention settings (pg_outbox.sent_retention and
// pg_outbox.attempt_retention; 0 keeps nothing).
Keep kept();

// A NOTIFY on the channel, sent when the transaction commits.
void notify(const std::string& channel, const std::string& payload);

}  // namespace pg_outbox::pg::store
