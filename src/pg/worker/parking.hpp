// Endpoints held up: one endpoint's trouble never holds up the others (docs/delivery.md,
// Bounded waits).
//
// The worker writes every endpoint's results in one transaction. When that fails (a lock
// that an operator's open transaction holds on one endpoint's messages outlasts the
// worker's lock_timeout, a row of one endpoint that a trigger refuses...), it writes them
// endpoint by endpoint (settle.cpp), and an endpoint whose write fails alone is parked
// here: left out of the claims, its results kept (the rows stay as they were: pending, or
// listed by a claim, so a crash loses nothing), written again alone after 1 s, then 2, 4,
// up to 10 s (core::park_delay_ms). A lock held for an hour thus costs the other
// endpoints 100 ms every 10 s, and the parked endpoint goes on the moment it is released.
#pragma once

#include "pg/store/settlements.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace pg_outbox::pg::worker {

class Parking {
 public:
  // Left out of claims until its time has come and its results are written.
  bool is_parked(const std::string& endpoint, int64_t now_ms) const;
  bool holds_results() const;
  bool empty() const { return parked_.empty(); }
  // Parks the endpoint (again) with these results, and says so in the log.
  void park(const std::string& endpoint, store::Settlements results, const std::string& error, int64_t now_ms);
  // Its results are written: it goes on. False if it was not parked.
  bool unpark(const std::string& endpoint);
  // Moves the results of parked endpoints out of `pending` into their keeping: written
  // together with the rest, they would fail it again.
  void set_aside(store::Settlements& pending);
  // The parked endpoints whose time has come, with results to write.
  std::vector<std::string> due(int64_t now_ms) const;
  store::Settlements take_results(const std::string& endpoint);
  void keep_results(const std::string& endpoint, store::Settlements& results);
  // The ids of the parked results (the claim must not take them again).
  void append_ids(std::vector<int64_t>& ids) const;
  // When each parked endpoint is next tried (for the loop's sleep).
  std::vector<int64_t> until_ms() const;
  void clear() { parked_.clear(); }

 private:
  struct Parked {
    int64_t until_ms = 0;  // left out of claims until then; its results tried again then
    int parkings = 0;      // in a row, for the backoff
    store::Settlements results;
  };
  std::unordered_map<std::string, Parked> parked_;
};

// The results of `all`, by endpoint (all keeps its claims and give-backs).
std::map<std::string, store::Settlements> by_endpoint(store::Settlements& all);

}  // namespace pg_outbox::pg::worker
