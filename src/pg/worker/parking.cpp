#include "pg/worker/parking.hpp"

#include "core/delivery_policy.hpp"
#include "pg/boundary/boundary.hpp"

#include <algorithm>

namespace pg_outbox::pg::worker {

std::map<std::string, store::Settlements> by_endpoint(store::Settlements& all) {
  std::map<std::string, store::Settlements> groups;
  for (auto& s : all.sent) groups[s.endpoint].sent.push_back(std::move(s));
  for (auto& r : all.retry) groups[r.endpoint].retry.push_back(std::move(r));
  for (auto& d : all.dead) groups[d.endpoint].dead.push_back(std::move(d));
  all.sent.clear();
  all.retry.clear();
  all.dead.clear();
  return groups;
}

bool Parking::is_parked(const std::string& endpoint, int64_t now_ms) const {
  auto parked = parked_.find(endpoint);
  return parked != parked_.end() && (parked->second.until_ms > now_ms || parked->second.results.has_results());
}

bool Parking::holds_results() const {
  return std::any_of(parked_.begin(), parked_.end(), [](const auto& p) { return p.second.results.has_results(); });
}

void Parking::park(const std::string& endpoint, store::Settlements results, const std::string& error, int64_t now_ms) {
  Parked& parked = parked_[endpoint];
  const bool fresh = parked.parkings == 0;
  const int64_t delay_ms = core::park_delay_ms(++parked.parkings);
  parked.until_ms = now_ms + delay_ms;
  parked.results.take_results(results);
  pg_call([&] {
    ereport(LOG, (errmsg("pg_outbox worker: endpoint \"%s\" is %sheld up: %s", endpoint.c_str(), fresh ? "" : "still ",
                         error.c_str()),
                  errdetail("Its deliveries pause and are tried again alone in %lld ms; the other endpoints go on.",
                            static_cast<long long>(delay_ms))));
  });
}

bool Parking::unpark(const std::string& endpoint) {
  if (parked_.erase(endpoint) == 0) return false;
  pg_call([&] { ereport(LOG, (errmsg("pg_outbox worker: endpoint \"%s\" goes on", endpoint.c_str()))); });
  return true;
}

void Parking::set_aside(store::Settlements& pending) {
  if (parked_.empty()) return;
  for (auto& [endpoint, results] : by_endpoint(pending)) {
    auto parked = parked_.find(endpoint);
    if (parked != parked_.end())
      parked->second.results.take_results(results);
    else
      pending.take_results(results);
  }
}

std::vector<std::string> Parking::due(int64_t now_ms) const {
  std::vector<std::string> due;
  for (const auto& [endpoint, parked] : parked_)
    if (parked.until_ms <= now_ms && parked.results.has_results()) due.push_back(endpoint);
  return due;
}

store::Settlements Parking::take_results(const std::string& endpoint) {
  store::Settlements results;
  results.take_results(parked_[endpoint].results);
  return results;
}

void Parking::keep_results(const std::string& endpoint, store::Settlements& results) {
  parked_[endpoint].results.take_results(results);
}

void Parking::append_ids(std::vector<int64_t>& ids) const {
  for (const auto& [endpoint, parked] : parked_) {
    for (const auto& s : parked.results.sent) ids.push_back(s.id);
    for (const auto& r : parked.results.retry) ids.push_back(r.id);
    for (const auto& d : parked.results.dead) ids.push_back(d.id);
  }
}

std::vector<int64_t> Parking::until_ms() const {
  std::vector<int64_t> until;
  for (const auto& [endpoint, parked] : parked_) until.push_back(parked.until_ms);
  return until;
}

}  // namespace pg_outbox::pg::worker
