// Bounded waits (SPEC §3): one endpoint's trouble never holds up the others.
//
// The worker writes every endpoint's results in one transaction. When that fails (a lock
// that an operator's open transaction holds on one endpoint's messages outlasts the
// worker's lock_timeout, a row of one endpoint that a trigger refuses...), it writes them
// endpoint by endpoint, and an endpoint whose write fails alone is parked: left out of
// the claims, its results kept here (the rows stay as they were: pending, or listed by a
// claim, so a crash loses nothing), written again alone after 1 s, then 2, 4, up to 10 s,
// under a lock timeout of 100 ms. A lock held for an hour thus costs the other endpoints
// 100 ms every 10 s, and the parked endpoint goes on the moment it is released.
// NOTIFY endpoints are claimed, notified and settled in a transaction of their own
// (notify_round): a NOTIFY that fails (a full notification queue fails the commit, a
// channel PostgreSQL refuses) rolls back only that, and an endpoint that fails alone is
// parked the same way. The endpoints' breakers are saved with SKIP LOCKED
// (OutboxStore::save_breaker): an open alter_endpoint delays only the breaker's copy.
#include "pg/worker/worker.hpp"

#include "pg/boundary/boundary.hpp"
#include "pg/worker/worker_internal.hpp"

extern "C" {
#include "utils/guc.h"
}

#include <algorithm>
#include <map>

namespace pg_outbox::pg {

using namespace worker_detail;

namespace {

constexpr int64_t kParkFirstMs = 1000;
constexpr int64_t kParkMaxMs = 10000;
constexpr const char* kAloneLockTimeout = "100ms";

template <typename T>
void append(std::vector<T>& to, std::vector<T>& from) {
  std::move(from.begin(), from.end(), std::back_inserter(to));
  from.clear();
}

// Moves the results of `from` into `to`; finished claims stay in `from`.
void append_results(Settlements& to, Settlements& from) {
  append(to.sent, from.sent);
  append(to.retry, from.retry);
  append(to.dead, from.dead);
}

std::map<std::string, Settlements> by_endpoint(Settlements& all) {
  std::map<std::string, Settlements> groups;
  for (auto& s : all.sent) groups[s.endpoint].sent.push_back(std::move(s));
  for (auto& r : all.retry) groups[r.endpoint].retry.push_back(std::move(r));
  for (auto& d : all.dead) groups[d.endpoint].dead.push_back(std::move(d));
  all.sent.clear();
  all.retry.clear();
  all.dead.clear();
  return groups;
}

}  // namespace

// Left out of claims until its time has come and its results are written.
bool Worker::is_parked(const std::string& endpoint, int64_t now) const {
  auto parked = parked_.find(endpoint);
  return parked != parked_.end() && (parked->second.until_ms > now || !parked->second.results.empty());
}

bool Worker::holds_parked_results() const {
  return std::any_of(parked_.begin(), parked_.end(), [](const auto& p) { return !p.second.results.empty(); });
}

// A claim's row goes when its last message is settled, but not while results of its
// messages wait with a parked endpoint: a worker that starts again must still find
// them claimed, and count the attempt.
void Worker::hold_back_claims() {
  if (holds_parked_results()) {
    append(deferred_claims_, pending_.finished_claims);
  } else {
    append(pending_.finished_claims, deferred_claims_);
  }
}

// Writing everything together failed: each endpoint's results alone, then what belongs
// to none (the claims whose every message is settled). An endpoint whose write fails
// alone is parked with its results.
void Worker::settle_apart(const std::string& error) {
  pg_call([&] {
    ereport(LOG, (errmsg("pg_outbox worker: writing the results of every endpoint together failed: %s", error.c_str()),
                  errdetail("The worker writes them endpoint by endpoint.")));
  });
  auto groups = by_endpoint(pending_);
  try {
    for (auto& [endpoint, results] : groups) {
      std::string alone_error;
      if (settle_alone(results, alone_error)) {
        written(results);
        results = Settlements{};
      } else {
        park(endpoint, std::move(results), alone_error);
      }
    }
  } catch (...) {
    // The extension may be gone (recover_from_error decides): what was not written yet
    // goes back with the rest.
    for (auto& [endpoint, results] : groups) append_results(pending_, results);
    throw;
  }
}

// One endpoint's results in a transaction of their own, under a short lock timeout.
bool Worker::settle_alone(Settlements& results, std::string& error) {
  try {
    in_transaction("pg_outbox: settling one endpoint", [&] {
      require_same_extension();
      pg_call([] {
        (void)set_config_option("lock_timeout", kAloneLockTimeout, PGC_SUSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0,
                                false);
      });
      store_.settle(results, settings.sent_retention_s > 0);
    });
    return true;
  } catch (const PgError& e) {
    const int sqlstate = e.data()->sqlerrcode;
    error = e.what();
    abort_transaction();
    if (extension_may_be_gone(sqlstate)) throw;
    return false;
  }
}

void Worker::park(const std::string& endpoint, Settlements results, const std::string& error) {
  Parked& parked = parked_[endpoint];
  const bool fresh = parked.backoff_ms == 0;
  parked.backoff_ms = fresh ? kParkFirstMs : std::min(2 * parked.backoff_ms, kParkMaxMs);
  parked.until_ms = now_ms() + parked.backoff_ms;
  append_results(parked.results, results);
  pg_call([&] {
    ereport(LOG, (errmsg("pg_outbox worker: endpoint \"%s\" is %sheld up: %s", endpoint.c_str(), fresh ? "" : "still ",
                         error.c_str()),
                  errdetail("Its deliveries pause and are tried again alone in %lld ms; the other endpoints go on.",
                            static_cast<long long>(parked.backoff_ms))));
  });
}

void Worker::unpark(const std::string& endpoint) {
  if (parked_.erase(endpoint) == 0) return;
  more_due_ = true;
  pg_call([&] { ereport(LOG, (errmsg("pg_outbox worker: endpoint \"%s\" goes on", endpoint.c_str()))); });
}

// Results that arrive for a parked endpoint (its requests already in flight) wait with
// the others it holds: written together with the rest, they would fail it again.
void Worker::set_aside_results_of_parked() {
  if (parked_.empty()) return;
  for (auto& [endpoint, results] : by_endpoint(pending_)) {
    auto parked = parked_.find(endpoint);
    if (parked != parked_.end())
      append_results(parked->second.results, results);
    else
      append_results(pending_, results);
  }
}

// Parked endpoints whose time has come, with results to write: alone again.
void Worker::retry_parked() {
  const int64_t now = now_ms();
  std::vector<std::string> due;
  for (const auto& [endpoint, parked] : parked_)
    if (parked.until_ms <= now && !parked.results.empty()) due.push_back(endpoint);
  for (const std::string& endpoint : due) {
    Settlements results = std::move(parked_[endpoint].results);
    parked_[endpoint].results = Settlements{};
    std::string error;
    bool ok = false;
    try {
      ok = settle_alone(results, error);
    } catch (...) {
      append_results(parked_[endpoint].results, results);
      throw;
    }
    if (ok) {
      written(results);
      unpark(endpoint);
    } else {
      park(endpoint, std::move(results), error);
    }
  }
}

// NOTIFY endpoints: claimed, notified and settled in one transaction of their own (the
// notifications leave at its commit, with the rows' new state). The other endpoints'
// results wait outside it. When it fails for several endpoints, each is tried alone, to
// park only the one that fails.
size_t Worker::notify_round(const std::vector<std::string>& endpoints) {
  Settlements others = std::move(pending_);
  pending_ = Settlements{};
  size_t claimed = 0;
  std::string error;
  try {
    in_settling_transaction("pg_outbox: NOTIFY", [&] {
      require_same_extension();
      auto rows = store_.claim(endpoints, settings.batch_size, {}, settings.max_inflight_bytes,
                               settings.max_payload_size, true);
      claimed = rows.size();
      deliver_notify(rows);
      store_.settle(pending_, settings.sent_retention_s > 0);
    });
  } catch (const PgError& e) {
    const int sqlstate = e.data()->sqlerrcode;
    error = e.what();
    abort_transaction();
    pending_ = std::move(others);
    if (extension_may_be_gone(sqlstate)) throw;
    if (endpoints.size() == 1) {
      park(endpoints[0], Settlements{}, error);
      return 0;
    }
    size_t total = 0;
    for (const std::string& endpoint : endpoints) total += notify_round({endpoint});
    return total;
  }
  written(pending_);  // NOTIFY's own results, written in its transaction
  pending_ = std::move(others);
  for (const std::string& endpoint : endpoints) unpark(endpoint);
  if (claimed == static_cast<size_t>(settings.batch_size)) more_due_ = true;
  return claimed;
}

}  // namespace pg_outbox::pg
