#include "core/claim_plan.hpp"
#include "core/clock.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace pg_outbox::core;

namespace {

using Names = std::vector<std::string>;

constexpr int64_t kNow = 1700000000000;

EndpointView http_endpoint(std::string name, size_t outstanding = 0) {
  EndpointView e;
  e.name = std::move(name);
  e.outstanding = outstanding;
  return e;
}

EndpointView notify_endpoint(std::string name) {
  EndpointView e;
  e.name = std::move(name);
  e.notify = true;
  return e;
}

Breaker open_until(int64_t until) {
  Breaker b;
  b.state = BreakerState::Open;
  b.consecutive_failures = 10;
  b.open_until_ms = until;
  b.cooldown_ms = 1000;
  return b;
}

Breaker half_open() {
  Breaker b = open_until(kNow - 1);
  b.state = BreakerState::HalfOpen;
  return b;
}

}  // namespace

TEST(ClaimTarget, BatchOrTwiceTheConnections) {
  EXPECT_EQ(claim_target({500, 64, 1 << 20}), 500u);
  EXPECT_EQ(claim_target({100, 64, 1 << 20}), 128u);
  EXPECT_EQ(claim_target({1, 0, 1 << 20}), 1u);
}

TEST(ShareOf, ItsPartOfTheConnectionsAppliedToTheTarget) {
  ClaimSettings s{500, 64, 64 << 20};
  EndpointView e = http_endpoint("a");
  e.concurrency = 32;
  EXPECT_EQ(share_of(e, s), 250u);  // 500 * 32 / 64
  e.concurrency = 1;
  EXPECT_EQ(share_of(e, s), 7u);  // 500 / 64, rounded down
  e.concurrency = 100;            // counted as every connection
  EXPECT_EQ(share_of(e, s), 500u);
}

// The target is at least twice the connections, so a share is at least twice the
// endpoint's concurrency (counted at most as every connection).
TEST(ShareOf, AtLeastTwiceItsConcurrency) {
  ClaimSettings s{10, 4, 64 << 20};  // target 10
  EndpointView e = http_endpoint("a");
  e.concurrency = 3;
  EXPECT_EQ(share_of(e, s), 7u);  // 10 * 3 / 4
  s = {1, 1000, 64 << 20};        // target 2000
  e.concurrency = 999;
  EXPECT_EQ(share_of(e, s), 1998u);
}

TEST(ShareOf, RateLimitedHoldsTenSecondsWorth) {
  ClaimSettings s{500, 64, 64 << 20};
  EndpointView e = http_endpoint("a");
  e.rate_limit = 3;
  EXPECT_EQ(share_of(e, s), 30u);
  e.rate_limit = 1000;  // more than its share anyway
  EXPECT_EQ(share_of(e, s), 250u);
  e.rate_limit = 0;  // at least one
  EXPECT_EQ(share_of(e, s), 1u);
}

TEST(ShareOf, NoConnectionsCountAsOne) {
  ClaimSettings s{500, 0, 64 << 20};  // slots = 1, target 500
  EndpointView e = http_endpoint("a");
  EXPECT_EQ(share_of(e, s), 500u);
}

TEST(HoldsItsShare, AtTheShareAndNotBelow) {
  ClaimSettings s{500, 64, 64 << 20};
  EXPECT_FALSE(holds_its_share(http_endpoint("a", 0), s));
  EXPECT_FALSE(holds_its_share(http_endpoint("a", 249), s));
  EXPECT_TRUE(holds_its_share(http_endpoint("a", 250), s));
  EXPECT_TRUE(holds_its_share(http_endpoint("a", 251), s));
}

TEST(HoldsItsShare, NothingHeldNeverHoldsEvenAShareOfZero) {
  ClaimSettings s{500, 64, 64 << 20};
  EndpointView e = http_endpoint("a");
  e.concurrency = 0;
  e.rate_limit = 5;
  EXPECT_EQ(share_of(e, s), 0u);
  EXPECT_FALSE(holds_its_share(e, s));
  e.outstanding = 1;
  EXPECT_TRUE(holds_its_share(e, s));
}

TEST(ClaimableOutstanding, LeavesOutWhatEndpointsAtTheirShareHold) {
  ClaimSettings s{500, 64, 64 << 20};
  std::vector<EndpointView> endpoints{http_endpoint("full", 250), http_endpoint("busy", 50), http_endpoint("idle")};
  EXPECT_EQ(claimable_outstanding(300, endpoints, s), 50u);
  // Requests of an endpoint that is gone (10) count as claimable.
  EXPECT_EQ(claimable_outstanding(310, endpoints, s), 60u);
  // Never below zero.
  EXPECT_EQ(claimable_outstanding(100, endpoints, s), 0u);
  EXPECT_EQ(claimable_outstanding(0, {}, s), 0u);
}

TEST(WantsClaim, BelowHalfTheTarget) {
  ClaimSettings s{500, 64, 64 << 20};
  EXPECT_TRUE(wants_claim(0, s));
  EXPECT_TRUE(wants_claim(249, s));
  EXPECT_FALSE(wants_claim(250, s));
  s = {1, 0, 1 << 20};  // target 1: half is 0, never
  EXPECT_FALSE(wants_claim(0, s));
}

TEST(PlanClaim, SortsEndpointsByWhatMayBeClaimed) {
  ClaimSettings s{500, 64, 64 << 20};
  std::vector<EndpointView> endpoints;
  endpoints.push_back(http_endpoint("h1"));
  endpoints.push_back(notify_endpoint("n1"));
  EndpointView paused = http_endpoint("paused");
  paused.paused = true;
  endpoints.push_back(paused);
  EndpointView parked = notify_endpoint("parked");
  parked.parked = true;
  endpoints.push_back(parked);
  endpoints.push_back(http_endpoint("full", 250));
  EndpointView cooling = http_endpoint("cooling");
  cooling.breaker = open_until(kNow + 5000);
  endpoints.push_back(cooling);
  EndpointView cooling_sooner = http_endpoint("cooling_sooner");
  cooling_sooner.breaker = open_until(kNow + 3000);
  endpoints.push_back(cooling_sooner);
  EndpointView probe = http_endpoint("probe");
  probe.breaker = open_until(kNow);  // cool-down over at open_until
  endpoints.push_back(probe);
  EndpointView probing = http_endpoint("probing");
  probing.breaker = half_open();
  endpoints.push_back(probing);
  endpoints.push_back(http_endpoint("h2", 10));

  ClaimPlan plan = plan_claim(endpoints, s, 260, 0, 0, kNow);
  EXPECT_EQ(plan.http, (Names{"h1", "h2"}));
  EXPECT_EQ(plan.probes, (Names{"probe"}));
  EXPECT_EQ(plan.notify, (Names{"n1"}));
  EXPECT_EQ(plan.all_active, (Names{"h1", "n1", "h2"}));
  EXPECT_EQ(plan.next_breaker_ms, kNow + 3000);
  EXPECT_EQ(plan.next_round, 1u);
  EXPECT_EQ(plan.limit, 490);  // 500 - (260 - 250 held by "full")
  EXPECT_EQ(plan.byte_budget, 64 << 20);
}

TEST(PlanClaim, AnEndpointAtItsShareIsLeftOutWhateverItsCircuit) {
  ClaimSettings s{500, 64, 64 << 20};
  EndpointView full_and_open = http_endpoint("x", 250);
  full_and_open.breaker = open_until(kNow + 1000);
  EndpointView full_probe = http_endpoint("y", 250);
  full_probe.breaker = open_until(kNow - 1);
  ClaimPlan plan = plan_claim({full_and_open, full_probe}, s, 500, 0, 0, kNow);
  EXPECT_TRUE(plan.http.empty());
  EXPECT_TRUE(plan.probes.empty());
  EXPECT_EQ(plan.next_breaker_ms, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(plan.limit, 500);  // what they hold does not count against the room
}

TEST(PlanClaim, NotifyEndpointsIgnoreShareAndBreaker) {
  ClaimSettings s{500, 64, 64 << 20};
  EndpointView n = notify_endpoint("n");
  n.outstanding = 1000;
  n.breaker = open_until(kNow + 1000);
  ClaimPlan plan = plan_claim({n}, s, 0, 0, 7, kNow);
  EXPECT_EQ(plan.notify, (Names{"n"}));
  EXPECT_EQ(plan.all_active, (Names{"n"}));
  EXPECT_EQ(plan.next_breaker_ms, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(plan.next_round, 7u);  // no HTTP endpoint: the counter stays
}

TEST(PlanClaim, RotatesByTheRound) {
  ClaimSettings s;
  std::vector<EndpointView> endpoints{http_endpoint("a"), http_endpoint("b"), http_endpoint("c")};
  EXPECT_EQ(plan_claim(endpoints, s, 0, 0, 0, kNow).http, (Names{"a", "b", "c"}));
  EXPECT_EQ(plan_claim(endpoints, s, 0, 0, 1, kNow).http, (Names{"b", "c", "a"}));
  EXPECT_EQ(plan_claim(endpoints, s, 0, 0, 2, kNow).http, (Names{"c", "a", "b"}));
  EXPECT_EQ(plan_claim(endpoints, s, 0, 0, 4, kNow).http, (Names{"b", "c", "a"}));
  EXPECT_EQ(plan_claim(endpoints, s, 0, 0, 4, kNow).next_round, 5u);
  // all_active keeps the caller's order.
  EXPECT_EQ(plan_claim(endpoints, s, 0, 0, 1, kNow).all_active, (Names{"a", "b", "c"}));
}

TEST(PlanClaim, EachEndpointLeadsInTurnOverSuccessiveClaims) {
  ClaimSettings s;
  std::vector<EndpointView> endpoints{http_endpoint("a"), http_endpoint("b"), http_endpoint("c")};
  size_t round = 0;
  Names leaders;
  for (int claim = 0; claim < 6; ++claim) {
    ClaimPlan plan = plan_claim(endpoints, s, 0, 0, round, kNow);
    leaders.push_back(plan.http.front());
    round = plan.next_round;
  }
  EXPECT_EQ(leaders, (Names{"a", "b", "c", "a", "b", "c"}));
}

// The NOTIFY rotation reads the counter after the HTTP rotation advanced it.
TEST(PlanClaim, NotifyRotatesByTheRoundAfterHttpAdvancedIt) {
  ClaimSettings s;
  std::vector<EndpointView> both{http_endpoint("a"), http_endpoint("b"), notify_endpoint("x"), notify_endpoint("y"),
                                 notify_endpoint("z")};
  ClaimPlan plan = plan_claim(both, s, 0, 0, 0, kNow);
  EXPECT_EQ(plan.http, (Names{"a", "b"}));         // by 0
  EXPECT_EQ(plan.notify, (Names{"y", "z", "x"}));  // by 1
  EXPECT_EQ(plan.next_round, 1u);
  plan = plan_claim(both, s, 0, 0, 4, kNow);
  EXPECT_EQ(plan.http, (Names{"a", "b"}));         // by 4 % 2
  EXPECT_EQ(plan.notify, (Names{"z", "x", "y"}));  // by 5 % 3
  // Without HTTP endpoints the NOTIFY ones rotate by the round itself, which stays.
  std::vector<EndpointView> notify_only{notify_endpoint("x"), notify_endpoint("y"), notify_endpoint("z")};
  plan = plan_claim(notify_only, s, 0, 0, 4, kNow);
  EXPECT_EQ(plan.notify, (Names{"y", "z", "x"}));  // by 4 % 3
  EXPECT_EQ(plan.next_round, 4u);
}

TEST(PlanClaim, LimitIsTheRoomAtMostABatch) {
  ClaimSettings s{100, 64, 64 << 20};  // target 128
  std::vector<EndpointView> endpoints{http_endpoint("a", 0)};
  EXPECT_EQ(plan_claim(endpoints, s, 0, 0, 0, kNow).limit, 100);
  EXPECT_EQ(plan_claim(endpoints, s, 40, 0, 0, kNow).limit, 88);
  EXPECT_EQ(plan_claim(endpoints, s, 128, 0, 0, kNow).limit, 0);
  EXPECT_EQ(plan_claim(endpoints, s, 1000, 0, 0, kNow).limit, 0);
}

TEST(PlanClaim, ASpentByteBudgetClaimsNothing) {
  ClaimSettings s{500, 64, 1000};
  std::vector<EndpointView> endpoints{http_endpoint("a")};
  ClaimPlan plan = plan_claim(endpoints, s, 0, 999, 0, kNow);
  EXPECT_EQ(plan.byte_budget, 1);
  EXPECT_EQ(plan.limit, 500);
  plan = plan_claim(endpoints, s, 0, 1000, 0, kNow);
  EXPECT_EQ(plan.byte_budget, 0);
  EXPECT_EQ(plan.limit, 0);
  plan = plan_claim(endpoints, s, 0, 5000, 0, kNow);  // a lowered max_inflight_bytes
  EXPECT_EQ(plan.byte_budget, 0);
  EXPECT_EQ(plan.limit, 0);
  EXPECT_EQ(plan.http, (Names{"a"}));  // still listed: the probes and next_due_in_ms use the lists
}

TEST(PlanClaim, BreakersFollowTheClock) {
  ManualClock clock(kNow);
  ClaimSettings s;
  EndpointView e = http_endpoint("a");
  e.breaker = open_until(kNow + 2000);
  ClaimPlan plan = plan_claim({e}, s, 0, 0, 0, clock.now_ms());
  EXPECT_TRUE(plan.probes.empty());
  EXPECT_EQ(plan.next_breaker_ms, kNow + 2000);
  EXPECT_EQ(plan.next_round, 0u);
  clock.advance(1999);
  EXPECT_TRUE(plan_claim({e}, s, 0, 0, 0, clock.now_ms()).probes.empty());
  clock.advance(1);
  plan = plan_claim({e}, s, 0, 0, 0, clock.now_ms());
  EXPECT_EQ(plan.probes, (Names{"a"}));
  EXPECT_EQ(plan.next_breaker_ms, std::numeric_limits<int64_t>::max());
  EXPECT_TRUE(plan.all_active.empty());  // a probe is not asked about its next message
}

TEST(NextClaimAt, EarliestOfPollBreakerAndNextDue) {
  const int64_t none = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(next_claim_at(kNow, 1000, none, std::nullopt), kNow + 1000);
  EXPECT_EQ(next_claim_at(kNow, 1000, none, 300), kNow + 300);
  EXPECT_EQ(next_claim_at(kNow, 1000, none, 5000), kNow + 1000);
  EXPECT_EQ(next_claim_at(kNow, 1000, kNow + 200, 300), kNow + 200);
  // Due already (blocked or claimed otherwise): the poll, not a busy loop.
  EXPECT_EQ(next_claim_at(kNow, 1000, none, 0), kNow + 1000);
  EXPECT_EQ(next_claim_at(kNow, 1000, none, -50), kNow + 1000);
  EXPECT_EQ(next_claim_at(kNow, 1000, kNow + 10, -50), kNow + 10);
}

// The decisions of the worker's claim as they were written inside it (endpoints in a
// map's order, the counter a member), against plan_claim on random states.
namespace {

struct Reference {
  ClaimSettings settings;
  std::vector<EndpointView> endpoints;  // the map, in its iteration order
  std::map<std::string, size_t> outstanding_;
  size_t deliveries = 0;
  int64_t held_bytes_ = 0;
  size_t claim_round_ = 0;

  const EndpointView* find(const std::string& name) const {
    for (const auto& e : endpoints)
      if (e.name == name) return &e;
    return nullptr;
  }
  size_t target() const { return static_cast<size_t>(std::max(settings.batch_size, 2 * settings.max_concurrency)); }
  size_t share(const EndpointView& endpoint) const {
    const size_t slots = static_cast<size_t>(std::max(1, settings.max_concurrency));
    const size_t cap = std::min(static_cast<size_t>(endpoint.concurrency), slots);
    const size_t share = std::max(cap, target() * cap / slots);
    if (endpoint.rate_limit)
      return std::min(share, std::max<size_t>(1, 10 * static_cast<size_t>(*endpoint.rate_limit)));
    return share;
  }
  bool holds(const std::string& name) const {
    auto held = outstanding_.find(name);
    const EndpointView* endpoint = find(name);
    return held != outstanding_.end() && endpoint != nullptr && held->second >= share(*endpoint);
  }
  size_t claimable() const {
    size_t total = deliveries;
    for (const auto& [name, held] : outstanding_)
      if (holds(name)) total -= std::min(total, held);
    return total;
  }
  ClaimPlan claim(int64_t now) {
    ClaimPlan p;
    for (auto& endpoint : endpoints) {
      const std::string& name = endpoint.name;
      if (endpoint.paused || endpoint.parked) continue;
      if (!endpoint.notify && holds(name)) continue;
      if (endpoint.notify) {
        p.notify.push_back(name);
        p.all_active.push_back(name);
        continue;
      }
      switch (admission(endpoint.breaker, now)) {
        case Admission::Normal:
          p.http.push_back(name);
          p.all_active.push_back(name);
          break;
        case Admission::ProbeOnly:
          p.probes.push_back(name);
          break;
        case Admission::None:
          if (endpoint.breaker.state == BreakerState::Open)
            p.next_breaker_ms = std::min(p.next_breaker_ms, endpoint.breaker.open_until_ms);
          break;
      }
    }
    if (!p.http.empty()) std::rotate(p.http.begin(), p.http.begin() + (claim_round_++ % p.http.size()), p.http.end());
    if (!p.notify.empty())
      std::rotate(p.notify.begin(), p.notify.begin() + (claim_round_ % p.notify.size()), p.notify.end());
    size_t room = target() - std::min(target(), claimable());
    p.limit = static_cast<int>(std::min<size_t>(room, static_cast<size_t>(settings.batch_size)));
    p.byte_budget = std::max<int64_t>(0, settings.max_inflight_bytes - held_bytes_);
    if (p.byte_budget == 0) p.limit = 0;
    p.next_round = claim_round_;
    return p;
  }
};

}  // namespace

TEST(PlanClaim, MatchesTheWorkersClaimOnRandomStates) {
  std::mt19937_64 random(20240611);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(random); };
  ManualClock clock(kNow);
  Reference reference;
  size_t round = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    clock.advance(pick(0, 3000));
    reference.settings = {pick(1, 600), pick(0, 80), static_cast<int64_t>(pick(0, 5000))};
    reference.endpoints.clear();
    reference.outstanding_.clear();
    reference.deliveries = static_cast<size_t>(pick(0, 20));  // requests of dropped endpoints
    reference.held_bytes_ = pick(0, 6000);
    const int n = pick(0, 8);
    for (int i = 0; i < n; ++i) {
      EndpointView e;
      e.name = "e" + std::to_string(i);
      e.notify = pick(0, 4) == 0;
      e.paused = pick(0, 6) == 0;
      e.parked = pick(0, 6) == 0;
      e.concurrency = pick(0, 100);
      if (pick(0, 3) == 0) e.rate_limit = pick(0, 50);
      e.outstanding = pick(0, 2) == 0 ? 0 : static_cast<size_t>(pick(1, 400));
      switch (pick(0, 3)) {
        case 0:
          break;
        case 1:
          e.breaker = open_until(clock.now_ms() + pick(-2000, 2000));
          break;
        case 2:
          e.breaker = half_open();
          break;
        default:
          e.breaker.consecutive_failures = pick(0, 9);
      }
      if (e.outstanding > 0) reference.outstanding_[e.name] = e.outstanding;
      reference.deliveries += e.outstanding;
      reference.endpoints.push_back(e);
    }
    const ClaimPlan want = reference.claim(clock.now_ms());
    const ClaimPlan got = plan_claim(reference.endpoints, reference.settings, reference.deliveries,
                                     reference.held_bytes_, round, clock.now_ms());
    round = got.next_round;
    ASSERT_EQ(got.http, want.http) << trial;
    ASSERT_EQ(got.probes, want.probes) << trial;
    ASSERT_EQ(got.notify, want.notify) << trial;
    ASSERT_EQ(got.all_active, want.all_active) << trial;
    ASSERT_EQ(got.limit, want.limit) << trial;
    ASSERT_EQ(got.byte_budget, want.byte_budget) << trial;
    ASSERT_EQ(got.next_breaker_ms, want.next_breaker_ms) << trial;
    ASSERT_EQ(got.next_round, want.next_round) << trial;
    ASSERT_EQ(claimable_outstanding(reference.deliveries, reference.endpoints, reference.settings),
              reference.claimable())
        << trial;
    for (const auto& e : reference.endpoints) {
      ASSERT_EQ(share_of(e, reference.settings), reference.share(e)) << trial;
      ASSERT_EQ(holds_its_share(e, reference.settings), reference.holds(e.name)) << trial;
    }
  }
}

TEST(ClaimPlanBatches, ABatchingEndpointsShareIsInMessages) {
  const ClaimSettings s{500, 64, 64 << 20};
  EndpointView e;
  e.name = "b";
  e.concurrency = 32;
  e.batch_size = 100;
  EXPECT_EQ(share_of(e, s), 25000u);  // 250 requests of 100
  EXPECT_EQ(share_of(32, std::nullopt, s, 100), 25000u);
  e.rate_limit = 2;  // requests per second: 10 s of them, 100 messages each
  EXPECT_EQ(share_of(e, s), 2000u);
}

TEST(ClaimPlanBatches, TheTargetGrowsWithTheWidestBatch) {
  const ClaimSettings s{500, 64, 64 << 20};
  EndpointView single, batching;
  single.name = "s";
  batching.name = "b";
  batching.batch_size = 100;
  EXPECT_EQ(widest_batch({single}), 1);
  EXPECT_EQ(widest_batch({single, batching}), 100);
  batching.paused = true;
  EXPECT_EQ(widest_batch({single, batching}), 1);
  batching.paused = false;
  // 300 messages held: too many for unbatched endpoints, three requests for batching ones.
  EXPECT_FALSE(wants_claim(300, s));
  EXPECT_TRUE(wants_claim(300, s, 100));
  // The plan's room is counted against the wider target; a claim still takes at most
  // pg_outbox.batch_size messages.
  batching.outstanding = 300;
  ClaimPlan plan = plan_claim({single, batching}, s, 300, 0, 0, 0);
  EXPECT_EQ(plan.limit, 500);
  plan = plan_claim({single}, s, 300, 0, 0, 0);
  EXPECT_EQ(plan.limit, 200);
}

TEST(PlanClaim, QuietEndpointsAreLeftOutButTheirProbesGo) {
  EndpointView quiet = http_endpoint("quiet");
  quiet.quiet = true;
  EndpointView probing = http_endpoint("probing");
  probing.quiet = true;
  probing.breaker = open_until(kNow - 1);  // cooled down: its probe is due
  EndpointView busy = http_endpoint("busy");
  ClaimPlan plan = plan_claim({quiet, probing, busy}, ClaimSettings{}, 0, 0, 0, kNow);
  EXPECT_EQ(plan.http, Names({"busy"}));
  EXPECT_EQ(plan.all_active, Names({"busy"}));  // their due times are the quiet's end
  EXPECT_EQ(plan.probes, Names({"probing"}));
}
