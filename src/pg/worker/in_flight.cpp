#include "pg/worker/in_flight.hpp"

#include <iterator>

namespace pg_outbox::pg::worker {

void InFlight::claim_recorded(int64_t claim_id, size_t messages) { claims_[claim_id] = messages; }

void InFlight::queue(int64_t id, Delivery delivery) {
  ++outstanding_[delivery.endpoint];
  held_bytes_ += delivery.payload_bytes;
  deliveries_[id] = std::move(delivery);
}

void InFlight::batch(std::vector<int64_t> ids) {
  if (ids.size() < 2) return;  // a request of one message is tagged with its id anyway
  const int64_t tag = ids.front();
  batches_[tag] = std::move(ids);
}

std::vector<int64_t> InFlight::take_request(uint64_t tag) {
  const int64_t id = static_cast<int64_t>(tag);
  auto found = batches_.find(id);
  if (found == batches_.end()) return {id};
  std::vector<int64_t> ids = std::move(found->second);
  batches_.erase(found);
  return ids;
}

std::optional<Delivery> InFlight::leave(int64_t id, size_t& held_before) {
  auto found = deliveries_.find(id);
  if (found == deliveries_.end()) return std::nullopt;
  Delivery delivery = std::move(found->second);
  deliveries_.erase(found);
  held_bytes_ -= delivery.payload_bytes;
  held_before = 0;
  auto held = outstanding_.find(delivery.endpoint);
  if (held != outstanding_.end()) {
    held_before = held->second;
    if (--held->second == 0) outstanding_.erase(held);
  }
  return delivery;
}

void InFlight::member_settled(int64_t claim_id) {
  auto claim = claims_.find(claim_id);
  if (claim == claims_.end()) return;
  if (--claim->second == 0) {
    finished_claims_.push_back(claim_id);
    claims_.erase(claim);
  }
}

std::vector<int64_t> InFlight::take_finished_claims() {
  std::vector<int64_t> finished;
  finished.swap(finished_claims_);
  return finished;
}

void InFlight::keep_finished_claims(std::vector<int64_t>& claims) {
  std::move(claims.begin(), claims.end(), std::back_inserter(finished_claims_));
  claims.clear();
}

const Delivery* InFlight::find(int64_t id) const {
  auto found = deliveries_.find(id);
  return found == deliveries_.end() ? nullptr : &found->second;
}

std::vector<int64_t> InFlight::ids() const {
  std::vector<int64_t> ids;
  ids.reserve(deliveries_.size());
  for (const auto& [id, delivery] : deliveries_) ids.push_back(id);
  return ids;
}

void InFlight::clear() {
  deliveries_.clear();
  outstanding_.clear();
  claims_.clear();
  batches_.clear();
  finished_claims_.clear();
  held_bytes_ = 0;
}

}  // namespace pg_outbox::pg::worker
