// HTTP endpoints a claim found with nothing to take, left out of the claims that follow
// until something can have changed that. One busy endpoint holding its share of the
// claim target leaves the others' room to the claim; without this, every settle of the
// busy one ran a claim that walked every idle endpoint's part of the queue and found
// nothing (4,300 empty claim transactions in a drain of 100,000 beside one idle
// endpoint), at a cost that grows with the number of endpoints.
//
// What can give a quiet endpoint something to claim, and how it ends the quiet:
//  - a commit (a new message, a requeue, a resume, an alter: each wakes the worker):
//    forget_all(), on every commit's wake;
//  - one of its messages coming due (a retry, a deliver_at): `until_ms`, the earliest
//    due time of the endpoints claimed, at most a poll interval away;
//  - a result of its own written (a retry scheduled, a key's next message taken by the
//    settle, a breaker closed): forget(name);
//  - another endpoints version (created, altered, dropped): is_quiet() is false for
//    every name once the version differs from the one the quiet was noted under;
//  - a message given back to it (an endpoint altered, a lease run out): forget(name);
//  - the wall clock set back before the quiet began (its end would be that much later);
//  - a configuration reload (a shorter poll interval): forget_all().
// What wakes nobody (an operator's UPDATE of next_attempt_at, a lock on a row released)
// is seen within the poll interval, as it was by an idle worker before.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

namespace pg_outbox::core {

class QuietEndpoints {
 public:
  // names found with nothing to claim at now_ms by a claim that saw every claimable
  // message of theirs (not cut short by its limit or its byte budget), under endpoints
  // version `version`; nothing of theirs comes due before until_ms.
  void note(const std::vector<std::string>& names, int64_t now_ms, int64_t until_ms, uint64_t version);
  bool is_quiet(const std::string& name, int64_t now_ms, uint64_t version) const;
  void forget(const std::string& name) { names_.erase(name); }
  void forget_all() { names_.clear(); }
  bool empty() const { return names_.empty(); }
  // When the quiet ends by itself (INT64_MAX when no endpoint is quiet at now_ms): the
  // worker must look again then, whatever else it sleeps for.
  int64_t until_ms(int64_t now_ms) const;

 private:
  std::unordered_set<std::string> names_;
  int64_t noted_ms_ = 0;  // the earliest note of names_: a clock set back before it ends the quiet
  int64_t until_ms_ = 0;
  uint64_t version_ = 0;
};

// Whether a claim that took `claimed` messages, counting `claimed_bytes` against its
// byte budget, saw every claimable message of the endpoints it was given: it took fewer
// than its limit, and what it took is under the budget (a message is cut by the budget
// only when the messages before it reach it: store/claims.cpp).
bool claim_saw_everything(size_t claimed, int limit, int64_t claimed_bytes, int64_t byte_budget);

}  // namespace pg_outbox::core
