#include "core/claim_plan.hpp"

#include <algorithm>

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

size_t claim_target(const ClaimSettings& settings) {
  return static_cast<size_t>(std::max(settings.batch_size, 2 * settings.max_concurrency));
}

size_t share_of(int concurrency, std::optional<int> rate_limit, const ClaimSettings& settings, int batch_size) {
  const size_t slots = static_cast<size_t>(std::max(1, settings.max_concurrency));
  // Its part of the connections: its cap, counted at most as every connection.
  const size_t cap = std::min(static_cast<size_t>(concurrency), slots);
  const size_t per_request = static_cast<size_t>(std::max(1, batch_size));
  const size_t share = std::max(cap, claim_target(settings) * cap / slots) * per_request;
  if (rate_limit) return std::min(share, std::max<size_t>(1, 10 * static_cast<size_t>(*rate_limit)) * per_request);
  return share;
}

size_t share_of(const EndpointView& endpoint, const ClaimSettings& settings) {
  return share_of(endpoint.concurrency, endpoint.rate_limit, settings, endpoint.batch_size);
}

bool holds_its_share(const EndpointView& endpoint, const ClaimSettings& settings) {
  // An endpoint that holds nothing never holds its share, even a share of 0.
  return endpoint.outstanding > 0 && endpoint.outstanding >= share_of(endpoint, settings);
}

size_t claimable_outstanding(size_t in_flight, const std::vector<EndpointView>& endpoints,
                             const ClaimSettings& settings) {
  size_t total = in_flight;
  for (const EndpointView& endpoint : endpoints)
    if (holds_its_share(endpoint, settings)) total -= std::min(total, endpoint.outstanding);
  return total;
}

bool wants_claim(size_t claimable, const ClaimSettings& settings, int widest) {
  return claimable < claim_target(settings) * static_cast<size_t>(std::max(1, widest)) / 2;
}

int widest_batch(const std::vector<EndpointView>& endpoints) {
  int widest = 1;
  for (const EndpointView& endpoint : endpoints)
    if (!endpoint.notify && !endpoint.paused) widest = std::max(widest, endpoint.batch_size);
  return widest;
}

ClaimPlan plan_claim(const std::vector<EndpointView>& endpoints, const ClaimSettings& settings, size_t in_flight,
                     int64_t held_bytes, size_t round, int64_t now_ms) {
  ClaimPlan plan;
  int widest = 1;  // the largest batch size of the HTTP endpoints claimed
  for (const EndpointView& endpoint : endpoints) {
    if (endpoint.paused || endpoint.parked) continue;
    if (!endpoint.notify && holds_its_share(endpoint, settings)) continue;  // its results make room
    if (endpoint.notify) {
      plan.notify.push_back(endpoint.name);
      plan.all_active.push_back(endpoint.name);
      continue;
    }
    switch (admission(endpoint.breaker, now_ms)) {
      case Admission::Normal:
        if (endpoint.quiet) break;  // nothing to claim until something changes
        plan.http.push_back(endpoint.name);
        widest = std::max(widest, endpoint.batch_size);
        plan.all_active.push_back(endpoint.name);
        break;
      case Admission::ProbeOnly:
        plan.probes.push_back(endpoint.name);
        break;
      case Admission::None:
        if (endpoint.breaker.state == BreakerState::Open)
          plan.next_breaker_ms = std::min(plan.next_breaker_ms, endpoint.breaker.open_until_ms);
        break;
    }
  }
  // The counter advances only for a claim with HTTP endpoints, and the NOTIFY rotation
  // reads it after that advance.
  if (!plan.http.empty())
    std::rotate(plan.http.begin(), plan.http.begin() + static_cast<std::ptrdiff_t>(round++ % plan.http.size()),
                plan.http.end());
  if (!plan.notify.empty())
    std::rotate(plan.notify.begin(), plan.notify.begin() + static_cast<std::ptrdiff_t>(round % plan.notify.size()),
                plan.notify.end());
  plan.next_round = round;

  const size_t target = claim_target(settings) * static_cast<size_t>(widest);
  const size_t room = target - std::min(target, claimable_outstanding(in_flight, endpoints, settings));
  plan.limit = static_cast<int>(std::min<size_t>(room, static_cast<size_t>(settings.batch_size)));
  plan.byte_budget = std::max<int64_t>(0, settings.max_inflight_bytes - held_bytes);
  if (plan.byte_budget == 0) plan.limit = 0;
  return plan;
}

int64_t next_claim_at(int64_t now_ms, int poll_interval_ms, int64_t next_breaker_ms, std::optional<int64_t> due_in_ms) {
  const int64_t poll = now_ms + poll_interval_ms;
  return std::min({poll, next_breaker_ms, due_in_ms && *due_in_ms > 0 ? now_ms + *due_in_ms : poll});
}

}  // namespace pg_outbox::core
