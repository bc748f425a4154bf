#include "pg/worker/results.hpp"

namespace pg_outbox::pg::worker {

void Results::sent(int64_t id, int64_t tid, int32_t http_status, int attempts, const std::string& endpoint,
                   const std::optional<std::string>& ordering_key, store::Settlements::Attempt attempt) {
  pending_.sent.push_back({id, http_status, attempts, endpoint, ordering_key, std::move(attempt), tid});
  count(endpoint, core::Verdict::Sent);
}

void Results::retry(int64_t id, int64_t delay_ms, std::string error, int32_t http_status, int attempts,
                    const std::string& endpoint, store::Settlements::Attempt attempt) {
  pending_.retry.push_back({id, delay_ms, std::move(error), http_status, attempts, endpoint, std::move(attempt)});
  count(endpoint, core::Verdict::Retry);
}

void Results::dead(store::Settlements::Dead dead) {
  count(dead.endpoint, core::Verdict::Dead);
  pending_.dead.push_back(std::move(dead));
}

void Results::dead(int64_t id, const Delivery& delivery, core::DeadReason reason, std::string error,
                   int32_t http_status, std::string body, store::Settlements::Attempt attempt) {
  store::Settlements::Dead d;
  d.id = id;
  d.reason = reason;
  d.error = std::move(error);
  d.http_status = http_status;
  d.body = std::move(body);
  d.attempts = delivery.attempts;
  d.endpoint = delivery.endpoint;
  d.ordering_key = delivery.ordering_key;
  d.attempt = std::move(attempt);
  dead(std::move(d));
}

void Results::restore(Saved saved) {
  pending_ = std::move(saved.pending);
  counted_ = std::move(saved.counted);
}

std::unordered_map<std::string, std::array<uint64_t, 3>> Results::take_counts() {
  std::unordered_map<std::string, std::array<uint64_t, 3>> counts;
  counts.swap(counted_);
  return counts;
}

void Results::clear() {
  pending_ = store::Settlements{};
  counted_.clear();
}

void Results::count(const std::string& endpoint, core::Verdict verdict) {
  auto& counts = counted_[endpoint];
  counts[verdict == core::Verdict::Sent ? 0 : verdict == core::Verdict::Retry ? 1 : 2]++;
}

}  // namespace pg_outbox::pg::worker
