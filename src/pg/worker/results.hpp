// Results not yet written back, and what they add to the shared counters of
// worker_status() and metrics() once the transaction that wrote them has committed.
#pragma once

#include "core/delivery_policy.hpp"
#include "pg/store/settlements.hpp"
#include "pg/worker/in_flight.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <optional>
#include <unordered_map>

namespace pg_outbox::pg::worker {

class Results {
 public:
  // A result for a message, counted under its endpoint (published at commit).
  // `attempt`: the request made, for the attempt log.
  // tid: where the claim read its row (ClaimedMessage::tid).
  void sent(int64_t id, int64_t tid, int32_t http_status, int attempts, const std::string& endpoint,
            const std::optional<std::string>& ordering_key, store::Settlements::Attempt attempt);
  void retry(int64_t id, int64_t delay_ms, std::string error, int32_t http_status, int attempts,
             const std::string& endpoint, store::Settlements::Attempt attempt);
  void dead(store::Settlements::Dead dead);
  // A delivery's dead letter: its message, attempts, endpoint and key, with the reason
  // and the attempt that ended it.
  void dead(int64_t id, const Delivery& delivery, core::DeadReason reason, std::string error, int32_t http_status,
            std::string body, store::Settlements::Attempt attempt);
  void given_back(int64_t id) { pending_.given_back.push_back(id); }

  store::Settlements& pending() { return pending_; }
  const store::Settlements& pending() const { return pending_; }
  bool empty() const { return pending_.empty(); }
  // What a transaction that may fail saves first and puts back if it does: results it
  // wrote are unwritten again, and counts are published only once it has committed.
  struct Saved {
    store::Settlements pending;
    std::unordered_map<std::string, std::array<uint64_t, 3>> counted;
  };
  Saved save() const { return {pending_, counted_}; }
  void restore(Saved saved);
  // The counts of committed results, added to the slot's counters (status.cpp).
  std::unordered_map<std::string, std::array<uint64_t, 3>> take_counts();
  bool has_counts() const { return !counted_.empty(); }
  void clear();

 private:
  void count(const std::string& endpoint, core::Verdict verdict);

  store::Settlements pending_;
  std::unordered_map<std::string, std::array<uint64_t, 3>> counted_;  // per endpoint: sent, retried, dead
};

}  // namespace pg_outbox::pg::worker
