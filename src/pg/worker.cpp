#include "pg/worker.hpp"

#include "core/history_layout.hpp"
#include "core/request_headers.hpp"
#include "pg/boundary.hpp"
#include "pg/settings.hpp"
#include "pg/shared_state.hpp"

extern "C" {
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace pg_outbox::pg {

namespace {

// The extension was dropped (and perhaps created again) under the worker's feet.
struct ExtensionChanged : std::runtime_error {
  ExtensionChanged() : std::runtime_error("pg_outbox was dropped or created again") {}
};

constexpr const char* kVersion = "0.3.0";  // the extension version this library serves
constexpr const char* kUserAgent = "pg_outbox/0.3.0";
constexpr size_t kResponseBodyLimit = 1024;  // dlq.dead_letters.response_body keeps the first 1 KiB
constexpr int kSettleBatch = 1000;           // results written back per transaction, at most
constexpr int kHttpSliceMs = 20;             // longest the worker is deaf to its latch
// Gap between claims that commits trigger: 2 ms while claims find work, doubling up
// to 50 ms while they come back empty (commits for a paused endpoint, say).
constexpr int kWakeCoalesceMinMs = 2;
constexpr int kWakeCoalesceMaxMs = 50;
constexpr int kHousekeepingEveryMs = 1000;
constexpr int kOrphanCheckEveryMs = 10000;
constexpr int kPurgeBatch = 1000;
constexpr int kOrphanBatch = 1000;

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

core::BreakerConfig breaker_config() {
  return {settings.breaker_threshold, settings.backoff_base_ms, settings.backoff_max_ms};
}

}  // namespace

Worker::Worker() : client_(settings.max_concurrency), random_(std::random_device{}()) {
  client_.set_egress_policy(egress_policy());
}

void Worker::run() {
  pg_call([] {
    SpinLockAcquire(&shared_state->mutex);
    shared_state->worker_pid = MyProcPid;
    strlcpy(shared_state->database, MyBgworkerEntry->bgw_extra, sizeof shared_state->database);
    shared_state->started_at = GetCurrentTimestamp();
    shared_state->config_loaded_at = PgReloadTime;  // the load this process inherited
    SpinLockRelease(&shared_state->mutex);
    shared_state->worker_latch = MyLatch;
  });
  // The worker's own commits need not wait for the WAL flush: a crash can only undo
  // a claim (the row is pending again), a settle (the row is in_flight again, which
  // the next worker puts back to pending) or a dead-lettering (likewise): each leads
  // to one more delivery, never to a lost message. Producers' commits are untouched.
  pg_call([] {
    SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
    // The worker is a superuser: its queries must never resolve a name through a
    // schema that another role can create objects in (public, "$user").
    SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
    // Plans that cannot flip: every statement of the worker has an index path, and a
    // queue's statistics are always wrong (an ANALYZE of the drained queue says "empty",
    // a minute later it holds 20,000 rows). Sequential and bitmap scans are priced out
    // of the worker's plans, so that the claim and the settle cost the same whatever
    // autovacuum last saw; a table with no usable index is still read.
    SetConfigOption("enable_seqscan", "off", PGC_SUSET, PGC_S_OVERRIDE);
    SetConfigOption("enable_bitmapscan", "off", PGC_SUSET, PGC_S_OVERRIDE);
    // Bounded waits: a lock held by someone else (an operator's open transaction on an
    // endpoint or a message) fails the worker's statement after 2 s instead of holding
    // the worker, and with it every delivery, for as long as the lock lives; the
    // transaction is rolled back and retried like any other error, its results kept.
    SetConfigOption("lock_timeout", "2s", PGC_SUSET, PGC_S_OVERRIDE);
    ereport(LOG, (errmsg("pg_outbox worker started for database \"%s\"", MyBgworkerEntry->bgw_extra)));
  });

  for (;;) {
    // Everything runs inside the try: an ERROR while waiting (a query cancel sent to
    // the worker) or while reloading is logged and backed off like any other.
    try {
      bool woken = wait_for_work();
      if (now_ms() < error_backoff_until_ms_) {
        collect_http_results(kHttpSliceMs);  // keep libcurl moving; settle once the database is back
        continue;
      }
      iterate(woken);
      error_streak_ = 0;
    } catch (const ExtensionChanged&) {
      abort_transaction();
      on_extension_changed();
    } catch (const PgError& e) {
      history_covered_ms_ = 0;  // a partition may be what is missing
      // Copied now: the error lives in the transaction's memory, which the abort frees.
      recover_from_error(e.data()->sqlerrcode, e.what());
    } catch (const std::exception& e) {
      recover_from_error(ERRCODE_INTERNAL_ERROR, e.what());
    }
  }
}

// Sleeps on the latch until a commit, a signal or the next deadline; re-reads the
// GUCs after SIGHUP. Returns whether a commit asked for the wake.
bool Worker::wait_for_work() {
  int timeout = wait_timeout_ms();
  pg_call([&] {
    (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, timeout, PG_WAIT_EXTENSION);
    ResetLatch(MyLatch);
    CHECK_FOR_INTERRUPTS();
  });
  if (ConfigReloadPending) {
    ConfigReloadPending = false;
    pg_call([] { ProcessConfigFile(PGC_SIGHUP); });
    client_.set_max_concurrency(settings.max_concurrency);
    client_.set_egress_policy(egress_policy());
    more_due_ = true;  // batch size or enablement may have changed
    // Shown by worker_status(): tests and operators wait for this, not for a sleep.
    // PgReloadTime is this process's own last read of the files (a fresh worker
    // inherits the postmaster's), so it never claims a load the worker has not seen.
    SpinLockAcquire(&shared_state->mutex);
    shared_state->config_loaded_at = PgReloadTime;
    SpinLockRelease(&shared_state->mutex);
  }
  return pg_atomic_exchange_u32(&shared_state->wake_requested, 0) != 0;
}

// Disk full, statement_timeout, a dropped table...: roll back, log, back off, go on.
// Results not yet written stay in pending_ and are settled once the database is back.
// The extension was dropped (and perhaps created again): what was in flight belongs to
// tables that are gone; wait for the extension, then serve it afresh.
void Worker::on_extension_changed() {
  forget_deliveries();
  ready_ = false;
  pg_call([] {
    ereport(LOG, (errmsg("pg_outbox worker: the extension was dropped or created again"),
                  errdetail("Deliveries in flight for the old tables were abandoned.")));
  });
}

void Worker::recover_from_error(int sqlstate, std::string message) {
  abort_transaction();
  // Gone tables or functions: usually a DROP EXTENSION that committed while the
  // statement waited for its locks (the check at the start of the transaction saw the
  // extension still there). Then it is no error; otherwise wait for the tables anyway.
  if (sqlstate == ERRCODE_UNDEFINED_TABLE || sqlstate == ERRCODE_INVALID_SCHEMA_NAME ||
      sqlstate == ERRCODE_UNDEFINED_FUNCTION) {
    uint32_t oid = extension_oid_;
    try {
      in_transaction("pg_outbox: checking for the extension", [&] { oid = store_.extension_oid(); });
    } catch (const std::exception&) {
      abort_transaction();
    }
    if (oid != extension_oid_) {
      on_extension_changed();
      return;
    }
    ready_ = false;
    forget_deliveries();
  }
  error_streak_ = std::min(error_streak_ + 1, 6);
  int backoff_ms = 100 << error_streak_;
  error_backoff_until_ms_ = now_ms() + backoff_ms;
  pg_call([&] {
    ereport(LOG, (errcode(sqlstate), errmsg("pg_outbox worker: %s", message.c_str()),
                  errdetail("The worker rolled back and retries in %d ms.", backoff_ms)));
  });
  publish_status("recovering from an error");
}

int Worker::wait_timeout_ms() const {
  if (client_.in_flight() + client_.queued() > 0) return 0;  // libcurl waits in collect_http_results
  int64_t now = now_ms();
  if (now < error_backoff_until_ms_) return static_cast<int>(error_backoff_until_ms_ - now);
  if (!ready_ || !settings.enabled) return settings.poll_interval_ms;
  if (more_due_ || !pending_.empty()) return 0;
  int64_t until = std::min(next_claim_ms_, next_housekeeping_ms_);
  return static_cast<int>(std::clamp<int64_t>(until - now, 0, settings.poll_interval_ms));
}

void Worker::iterate(bool woken) {
  if (!prepare_database()) return;
  collect_http_results(client_.in_flight() + client_.queued() > 0 ? kHttpSliceMs : 0);
  settle_pending();
  int64_t now = now_ms();
  if (!settings.enabled) {
    publish_status("disabled");
    return;
  }
  if (woken && !more_due_ && now < last_claim_ms_ + wake_gap_ms_) {
    // Under thousands of commits per second, one claim per few milliseconds takes
    // them all; a claim per commit would spend the producers' CPU on empty queries.
    next_claim_ms_ = std::min(next_claim_ms_, last_claim_ms_ + wake_gap_ms_);
    woken = false;
  }
  if ((woken || more_due_ || now >= next_claim_ms_) && client_.in_flight() + client_.queued() < claim_target() / 2) {
    last_claim_ms_ = now;
    size_t claimed = claim_and_deliver();
    wake_gap_ms_ = claimed > 0 ? kWakeCoalesceMinMs : std::min(2 * wake_gap_ms_, kWakeCoalesceMaxMs);
  }
  if (now >= next_housekeeping_ms_) housekeeping();
  publish_status(deliveries_.empty() ? "idle" : "delivering");
}

// The worker waits harmlessly until CREATE EXTENSION has committed in its database,
// and goes back to waiting when the extension is dropped.
bool Worker::prepare_database() {
  if (ready_) return true;
  int64_t recovered = 0;
  std::string version;
  in_transaction("pg_outbox: checking for the extension", [&] {
    extension_oid_ = store_.extension_oid();
    if (extension_oid_ != 0) version = store_.extension_version();
    if (extension_oid_ != 0 && version == kVersion) recovered = store_.recover_claims();
  });
  if (extension_oid_ != 0 && version != kVersion) {
    // Tables of another version: touch nothing until ALTER EXTENSION ... UPDATE. Said
    // once per version seen, not every poll.
    if (waiting_for_version_ != version) {
      waiting_for_version_ = version;
      pg_call([&] {
        ereport(LOG, (errmsg("pg_outbox worker: the extension in database \"%s\" is version %s; this library "
                             "delivers for version %s only",
                             MyBgworkerEntry->bgw_extra, version.c_str(), kVersion),
                      errhint("Run ALTER EXTENSION pg_outbox UPDATE in that database; its messages wait until then.")));
      });
    }
    publish_status("waiting for ALTER EXTENSION pg_outbox UPDATE");
    return false;
  }
  waiting_for_version_.clear();
  if (extension_oid_ == 0) {
    forget_deliveries();
    endpoints_.clear();
    endpoints_version_ = UINT64_MAX;
    publish_status("waiting for CREATE EXTENSION pg_outbox");
    return false;
  }
  if (recovered > 0)
    pg_call([&] {
      ereport(LOG, (errmsg("pg_outbox worker: %lld claimed messages of a previous worker are pending again, "
                           "their attempt counted",
                           static_cast<long long>(recovered))));
    });
  ready_ = true;
  more_due_ = true;
  endpoints_.clear();  // breakers are reloaded from the table
  endpoints_version_ = UINT64_MAX;
  return true;
}

// Endpoints are re-read when an endpoint function committed a change, and at least
// once per poll interval for direct edits of the table; not on every commit's wake.
// Called first in every transaction that claims or settles: message ids belong to one
// incarnation of the extension's tables, and must never settle rows of the next one.
void Worker::require_same_extension() {
  if (store_.extension_oid() != extension_oid_) throw ExtensionChanged();
}

// Drops every delivery in flight and every result not yet written: they belong to
// tables that no longer exist.
void Worker::forget_deliveries() {
  client_.abandon_all();
  deliveries_.clear();
  claims_.clear();
  held_bytes_ = 0;
  history_covered_ms_ = 0;
  pending_ = Settlements{};
  counted_.clear();
}

void Worker::refresh_endpoints() {
  uint64_t version = pg_atomic_read_u64(&shared_state->endpoints_version);
  int64_t now = now_ms();
  if (version == endpoints_version_ && now - endpoints_loaded_ms_ < settings.poll_interval_ms) return;
  endpoints_version_ = version;
  endpoints_loaded_ms_ = now;
  std::vector<EndpointRow> rows = store_.load_endpoints();
  std::unordered_map<std::string, Endpoint> fresh;
  for (EndpointRow& row : rows) {
    Endpoint endpoint;
    auto known = endpoints_.find(row.name);
    if (known != endpoints_.end()) {
      // The worker's breaker is the live one; the table is its copy for restarts.
      row.breaker = known->second.row.breaker;
      endpoint.breaker_dirty = known->second.breaker_dirty;
    } else {
      core::restore_after_restart(row.breaker, now);
    }
    auto parsed = core::parse_string_object(row.headers_json.empty() ? "{}" : row.headers_json);
    endpoint.headers = std::move(parsed.pairs);
    endpoint.headers_error = std::move(parsed.error);
    endpoint.row = std::move(row);
    std::string name = endpoint.row.name;
    fresh.emplace(std::move(name), std::move(endpoint));
  }
  endpoints_ = std::move(fresh);
}

size_t Worker::claim_target() const {
  // Enough claimed work to keep every connection busy between two claims.
  return static_cast<size_t>(std::max(settings.batch_size, 2 * settings.max_concurrency));
}

int Worker::max_attempts_of(const Endpoint& endpoint) const {
  return endpoint.row.max_attempts.value_or(settings.max_attempts);
}

size_t Worker::claim_and_deliver() {
  // Claimed HTTP messages go to libcurl only once the claim has committed: a claim
  // that fails rolls back, and nothing it took may have been sent.
  std::vector<ClaimedMessage> to_send;
  std::vector<std::string> probed;
  size_t claimed_notify = 0;
  int64_t claim_id = 0;
  in_settling_transaction("pg_outbox: claiming messages", [&] {
    require_same_extension();
    refresh_endpoints();
    int64_t now = now_ms();
    std::vector<std::string> http, notify, ordered, probes, all_active;
    int64_t next_breaker_ms = INT64_MAX;
    for (auto& [name, endpoint] : endpoints_) {
      if (endpoint.row.paused) continue;
      if (endpoint.row.ordered) ordered.push_back(name);
      if (!endpoint.row.channel.empty()) {
        notify.push_back(name);
        all_active.push_back(name);
        continue;
      }
      switch (core::admission(endpoint.row.breaker, now)) {
        case core::Admission::Normal:
          http.push_back(name);
          all_active.push_back(name);
          break;
        case core::Admission::ProbeOnly:
          probes.push_back(name);
          break;
        case core::Admission::None:
          if (endpoint.row.breaker.state == core::BreakerState::Open)
            next_breaker_ms = std::min(next_breaker_ms, endpoint.row.breaker.open_until_ms);
          break;
      }
    }
    // Endpoints come in hash order; rotating it each claim spreads a batch that cannot
    // take everyone across endpoints over time.
    if (!http.empty()) std::rotate(http.begin(), http.begin() + (claim_round_++ % http.size()), http.end());
    if (!notify.empty()) std::rotate(notify.begin(), notify.begin() + (claim_round_ % notify.size()), notify.end());
    size_t room = claim_target() - std::min(claim_target(), client_.in_flight() + client_.queued());
    int limit = static_cast<int>(std::min<size_t>(room, static_cast<size_t>(settings.batch_size)));
    // Payload bytes the worker may still take on: what it holds counts until settled.
    int64_t budget = std::max<int64_t>(0, settings.max_inflight_bytes - held_bytes_);
    if (budget == 0) limit = 0;
    std::vector<int64_t> excluded = in_flight_ids();
    if (!notify.empty()) {
      auto claimed = store_.claim(notify, ordered, settings.batch_size, excluded, settings.max_inflight_bytes,
                                  settings.max_payload_size, true);
      claimed_notify = claimed.size();
      deliver_notify(claimed);
      more_due_ = claimed.size() == static_cast<size_t>(settings.batch_size);
    } else {
      more_due_ = false;
    }
    if (!http.empty() && limit > 0) {
      auto claimed = store_.claim(http, ordered, limit, excluded, budget, settings.max_payload_size, false);
      more_due_ = more_due_ || claimed.size() == static_cast<size_t>(limit);
      std::move(claimed.begin(), claimed.end(), std::back_inserter(to_send));
    }
    for (const std::string& name : probes) {
      // One message goes out as the probe; its result closes or reopens the circuit.
      auto claimed =
          store_.claim({name}, ordered, 1, excluded, settings.max_inflight_bytes, settings.max_payload_size, false);
      if (claimed.empty()) continue;
      probed.push_back(name);
      std::move(claimed.begin(), claimed.end(), std::back_inserter(to_send));
    }
    if (!more_due_) {
      // Nothing more is due now: sleep until the next retry or deliver_at comes due.
      // A past time means blocked rows (ordered keys whose head is out); a settle or
      // a commit wakes us for those.
      // What this claim took is in flight too.
      for (const ClaimedMessage& m : to_send) excluded.push_back(m.id);
      std::optional<int64_t> due_in = all_active.empty() ? std::nullopt : store_.next_due_in_ms(all_active, excluded);
      int64_t poll = now + settings.poll_interval_ms;
      next_claim_ms_ = std::min({poll, next_breaker_ms, due_in && *due_in > 0 ? now + *due_in : poll});
    }
    if (!to_send.empty()) {
      // The batch's record: its attempts count even if the worker dies mid-delivery.
      std::vector<int64_t> ids;
      std::vector<int32_t> attempts;
      for (const ClaimedMessage& m : to_send) {
        ids.push_back(m.id);
        attempts.push_back(m.attempts);
      }
      claim_id = store_.record_claim(ids, attempts);
    }
    settle_pending();  // NOTIFY results settle in this transaction
  });
  if (claim_id != 0) claims_[claim_id] = to_send.size();
  for (const std::string& name : probed) {
    Endpoint& endpoint = endpoints_.at(name);
    core::on_probe_claimed(endpoint.row.breaker);
    endpoint.breaker_dirty = true;
  }
  start_http(to_send, claim_id);
  return claimed_notify + to_send.size();
}

// The messages handed to libcurl: the next claim must not take them again.
std::vector<int64_t> Worker::in_flight_ids() const {
  std::vector<int64_t> ids;
  ids.reserve(deliveries_.size());
  for (const auto& [tag, delivery] : deliveries_) ids.push_back(static_cast<int64_t>(tag));
  return ids;
}

// One more message of a claim is settled; the claim's row goes with the last one.
void Worker::claim_member_settled(int64_t claim_id) {
  auto claim = claims_.find(claim_id);
  if (claim == claims_.end()) return;
  if (--claim->second == 0) {
    pending_.finished_claims.push_back(claim_id);
    claims_.erase(claim);
  }
}

void Worker::start_http(const std::vector<ClaimedMessage>& claimed, int64_t claim_id) {
  int64_t now_s = now_ms() / 1000;
  for (const ClaimedMessage& m : claimed) {
    Endpoint& endpoint = endpoints_.at(m.endpoint);  // claimed by endpoint name
    if (m.too_large) {
      // Never read, never sent: the receiver would refuse it and the worker must not
      // hold it. No attempt was made.
      pending_.dead.push_back({m.id,
                               core::DeadReason::PayloadTooLarge,
                               "payload of " + std::to_string(m.payload_size) +
                                   " bytes exceeds pg_outbox.max_payload_size (" +
                                   std::to_string(settings.max_payload_size) + " bytes)",
                               0,
                               {},
                               m.attempts - 1});
      count(m.endpoint, core::Verdict::Dead);
      claim_member_settled(claim_id);
      continue;
    }
    core::DeliveryHeaders headers;
    std::string invalid;
    if (!endpoint.headers) invalid = "endpoint headers: " + endpoint.headers_error;
    if (invalid.empty() && !m.headers_json.empty()) {
      auto parsed = core::parse_string_object(m.headers_json);
      if (!parsed.pairs)
        invalid = "message headers: " + parsed.error;
      else
        headers.message_headers = std::move(*parsed.pairs);
    }
    std::vector<std::string> lines;
    if (invalid.empty()) {
      headers.endpoint_headers = *endpoint.headers;
      headers.webhook_id = core::webhook_id_for(m.idempotency_key, m.id);
      headers.timestamp_unix_s = now_s;
      headers.event_type = m.event_type;
      headers.attempt = m.attempts;
      headers.secret = endpoint.row.secret;
      headers.user_agent = kUserAgent;
      try {
        lines = core::build_request_headers(headers, m.payload);
      } catch (const std::invalid_argument& e) {
        invalid = e.what();
      }
    }
    if (!invalid.empty()) {
      // Never sendable as it stands: to the DLQ at once, the worker goes on.
      pending_.dead.push_back({m.id, core::DeadReason::InvalidMessage, invalid, 0, {}, m.attempts - 1});
      count(m.endpoint, core::Verdict::Dead);
      claim_member_settled(claim_id);
      continue;
    }
    long timeout = endpoint.row.timeout_ms.value_or(settings.http_timeout_ms);
    client_.submit({static_cast<uint64_t>(m.id), endpoint.row.url, std::move(lines), m.payload, timeout});
    deliveries_[static_cast<uint64_t>(m.id)] = {m.endpoint, m.attempts,     max_attempts_of(endpoint),
                                                claim_id,   m.payload_size, now_s * 1000};
    held_bytes_ += m.payload_size;
  }
}

void Worker::deliver_notify(const std::vector<ClaimedMessage>& claimed) {
  // PostgreSQL refuses NOTIFY payloads of 8000 bytes or more.
  constexpr size_t kNotifyPayloadLimit = 8000;
  std::vector<const ClaimedMessage*> in_order;
  for (const ClaimedMessage& m : claimed) in_order.push_back(&m);
  std::sort(in_order.begin(), in_order.end(), [](auto* a, auto* b) { return a->id < b->id; });
  for (const ClaimedMessage* m : in_order) {
    const Endpoint& endpoint = endpoints_.at(m->endpoint);
    if (m->too_large || m->payload.size() >= kNotifyPayloadLimit) {
      std::string error =
          m->too_large
              ? "payload of " + std::to_string(m->payload_size) + " bytes exceeds pg_outbox.max_payload_size"
              : "NOTIFY envelope of " + std::to_string(m->payload.size()) + " bytes exceeds PostgreSQL's limit of 7999";
      pending_.dead.push_back({m->id, core::DeadReason::PayloadTooLarge, error, 0, {}, m->attempts - 1});
      count(m->endpoint, core::Verdict::Dead);
      continue;
    }
    store_.notify(endpoint.row.channel, m->payload);
    pending_.sent.push_back({m->id, 0, m->attempts});
    count(m->endpoint, core::Verdict::Sent);
  }
}

void Worker::collect_http_results(int wait_ms) {
  if (client_.in_flight() + client_.queued() == 0) return;
  // Each batch is recorded before libcurl runs again: a circuit that the batch opens
  // must take the endpoint's queued requests back before run() starts them.
  size_t gathered = 0;
  for (std::vector<http::Response> responses = client_.run(wait_ms); !responses.empty(); responses = client_.run(0)) {
    for (const http::Response& response : responses) record_outcome(response);
    gathered += responses.size();
    // Gather what else is already finished, so that one transaction settles many.
    if (gathered >= static_cast<size_t>(kSettleBatch) || client_.in_flight() == 0) break;
  }
}

void Worker::record_outcome(const http::Response& response) {
  auto found = deliveries_.find(response.tag);
  if (found == deliveries_.end()) return;
  Delivery delivery = std::move(found->second);
  deliveries_.erase(found);
  held_bytes_ -= delivery.payload_bytes;
  claim_member_settled(delivery.claim_id);
  int64_t id = static_cast<int64_t>(response.tag);
  int64_t now = now_ms();

  if (!response.egress_denied.empty()) {
    // Nothing was sent: the destination is not allowed, and retrying cannot change that
    // (the operator changes the policy or the URL, then requeues). No breaker result:
    // the receiver was never asked.
    pending_.dead.push_back({id, core::DeadReason::EgressDenied, response.error, 0, {}, delivery.attempts});
    count(delivery.endpoint, core::Verdict::Dead);
    return;
  }
  core::Outcome outcome =
      response.transport_error ? core::classify_transport_error() : core::classify_http_status(response.status);
  std::optional<int64_t> retry_after;
  if (!response.transport_error && core::honours_retry_after(response.status) && !response.retry_after.empty())
    retry_after = core::parse_retry_after_ms(response.retry_after, now);
  core::BackoffPolicy backoff(settings.backoff_base_ms, settings.backoff_max_ms);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  core::Settlement settlement =
      core::settle_attempt(outcome, delivery.attempts, delivery.max_attempts, backoff, retry_after, unit(random_));

  auto endpoint = endpoints_.find(delivery.endpoint);
  if (endpoint != endpoints_.end()) {
    core::Transition transition =
        outcome.verdict == core::Verdict::Retry
            ? core::record_retryable_failure(endpoint->second.row.breaker, breaker_config(), now)
            : core::record_success(endpoint->second.row.breaker, breaker_config());
    on_breaker_transition(endpoint->second, transition);
  }

  int32_t status = response.transport_error ? 0 : static_cast<int32_t>(response.status);
  std::string error = response.transport_error ? response.error : "HTTP " + std::to_string(response.status);
  switch (settlement.verdict) {
    case core::Verdict::Sent:
      pending_.sent.push_back({id, status, delivery.attempts});
      break;
    case core::Verdict::Retry:
      pending_.retry.push_back({id, settlement.retry_delay_ms, error, status, delivery.attempts});
      break;
    case core::Verdict::Dead:
      pending_.dead.push_back({id, settlement.reason, error, status,
                               core::sanitize_utf8(response.body_head, kResponseBodyLimit), delivery.attempts});
      break;
  }
  count(delivery.endpoint, settlement.verdict);
}

void Worker::on_breaker_transition(Endpoint& endpoint, core::Transition transition) {
  if (transition == core::Transition::None) {
    endpoint.breaker_dirty = true;  // the failure count changed
    return;
  }
  endpoint.breaker_dirty = true;
  const core::Breaker& b = endpoint.row.breaker;
  const char* what = transition == core::Transition::Closed ? "closed" : "opened";
  pg_call([&] {
    ereport(LOG, (errmsg("pg_outbox: circuit for endpoint \"%s\" %s", endpoint.row.name.c_str(), what),
                  transition == core::Transition::Closed
                      ? 0
                      : errdetail("%d consecutive retryable failures; next probe in %lld ms.", b.consecutive_failures,
                                  static_cast<long long>(b.cooldown_ms))));
  });
  if (transition == core::Transition::Closed) {
    more_due_ = true;  // the endpoint's waiting messages flow again at once
    return;
  }
  // Requests of this endpoint not yet started would only fail: give their attempt back.
  const std::string& name = endpoint.row.name;
  auto cancelled = client_.cancel_queued([&](uint64_t tag) {
    auto d = deliveries_.find(tag);
    return d != deliveries_.end() && d->second.endpoint == name;
  });
  give_back(cancelled);
}

// Requests taken back before they started: the message stays as it is in the queue
// (its attempt was never recorded) and is claimed again when it may go.
void Worker::give_back(const std::vector<uint64_t>& tags) {
  for (uint64_t tag : tags) {
    auto d = deliveries_.find(tag);
    if (d == deliveries_.end()) continue;
    held_bytes_ -= d->second.payload_bytes;
    claim_member_settled(d->second.claim_id);
    deliveries_.erase(d);
  }
  if (!tags.empty()) more_due_ = true;
}

// A claimed message waits in libcurl's queue at most pg_outbox.lease: behind a slow
// endpoint it is better given back and claimed afresh than sent minutes late. A request
// that has started is bounded by its own timeout instead.
void Worker::give_back_stale_requests() {
  int64_t oldest_allowed = now_ms() - 1000LL * settings.lease_s;
  give_back(client_.cancel_queued([&](uint64_t tag) {
    auto d = deliveries_.find(tag);
    return d != deliveries_.end() && d->second.claimed_ms < oldest_allowed;
  }));
}

void Worker::settle_pending() {
  bool dirty_breakers =
      std::any_of(endpoints_.begin(), endpoints_.end(), [](const auto& e) { return e.second.breaker_dirty; });
  if (pending_.empty() && !dirty_breakers) return;
  auto settle = [&] {
    require_same_extension();
    bool keep_history = settings.sent_retention_s > 0;
    if (keep_history && !pending_.sent.empty()) prepare_history_if_due();
    store_.settle(pending_, keep_history);
    for (auto& [name, endpoint] : endpoints_) {
      if (!endpoint.breaker_dirty) continue;
      store_.save_breaker(name, endpoint.row.breaker);
      endpoint.breaker_dirty = false;
    }
  };
  if (IsTransactionState()) {
    settle();  // the caller's in_settling_transaction publishes once it has committed
  } else {
    in_transaction("pg_outbox: settling deliveries", settle);
    publish_counts();
  }
  for (const auto& r : pending_.retry) next_claim_ms_ = std::min(next_claim_ms_, now_ms() + r.delay_ms);
  bool unblocks = !pending_.sent.empty() || !pending_.dead.empty() || !pending_.finished_claims.empty();
  pending_ = Settlements{};
  if (unblocks) more_due_ = true;  // an ordered key's next message, or room for more
}

// A transaction that may settle results (the claim, with NOTIFY's, and housekeeping).
// If it fails, the results and counts go back to what they were before it: results it
// wrote are unwritten again, and NOTIFY results it made were rolled back with their
// notifications, so they must be neither forgotten nor counted. Counts are published
// only once the transaction has committed.
void Worker::in_settling_transaction(const char* activity, const std::function<void()>& body) {
  Settlements saved = pending_;
  auto saved_counts = counted_;
  try {
    in_transaction(activity, body);
  } catch (...) {
    pending_ = std::move(saved);
    counted_ = std::move(saved_counts);
    throw;
  }
  publish_counts();
}

// Adds the counts of committed results to the shared counters of worker_status() and
// metrics().
void Worker::publish_counts() {
  if (counted_.empty()) return;
  SpinLockAcquire(&shared_state->mutex);
  for (const auto& [name, counts] : counted_) {
    int slot = 0;
    while (slot < shared_state->counted_endpoints && strcmp(shared_state->endpoints[slot].name, name.c_str()) != 0)
      ++slot;
    if (slot == shared_state->counted_endpoints && slot < kCountedEndpoints) {
      strlcpy(shared_state->endpoints[slot].name, name.c_str(), sizeof shared_state->endpoints[slot].name);
      shared_state->counted_endpoints++;
    }
    if (slot < kCountedEndpoints) {
      shared_state->endpoints[slot].sent += counts[0];
      shared_state->endpoints[slot].retried += counts[1];
      shared_state->endpoints[slot].dead += counts[2];
    }
    shared_state->sent += counts[0];
    shared_state->retried += counts[1];
    shared_state->dead_lettered += counts[2];
  }
  SpinLockRelease(&shared_state->mutex);
  counted_.clear();
}

void Worker::count(const std::string& endpoint, core::Verdict verdict) {
  auto& counts = counted_[endpoint];
  counts[verdict == core::Verdict::Sent ? 0 : verdict == core::Verdict::Retry ? 1 : 2]++;
}

// The history has partitions for the coming minutes (or hours, for a long retention)
// before a delivery needs one: created when less than two widths remain.
void Worker::prepare_history_if_due() {
  int width_s = core::history_partition_width_s(settings.sent_retention_s);
  if (width_s == history_width_s_ && now_ms() + 2000LL * width_s < history_covered_ms_) return;
  history_covered_ms_ = store_.prepare_history(width_s);
  history_width_s_ = width_s;  // a new retention re-plans the partitions ahead at once
}

void Worker::housekeeping() {
  int64_t now = now_ms();
  next_housekeeping_ms_ = now + kHousekeepingEveryMs;
  bool orphans_due = now >= next_orphan_check_ms_;
  if (orphans_due) next_orphan_check_ms_ = now + kOrphanCheckEveryMs;
  give_back_stale_requests();
  in_settling_transaction("pg_outbox: housekeeping", [&] {
    require_same_extension();
    if (settings.sent_retention_s > 0) {
      prepare_history_if_due();
      store_.retire_history(settings.sent_retention_s, core::history_partition_width_s(settings.sent_retention_s));
    }
    if (settings.dlq_retention_s >= 0) store_.purge_dead_letters(settings.dlq_retention_s, kPurgeBatch);
    if (orphans_due) {
      for (auto [id, attempts] : store_.find_orphans(in_flight_ids(), kOrphanBatch))
        pending_.dead.push_back({id, core::DeadReason::InvalidMessage, "endpoint does not exist", 0, {}, attempts});
      settle_pending();
    }
  });
}

void Worker::publish_status(const char* state) {
  SpinLockAcquire(&shared_state->mutex);
  strlcpy(shared_state->state, state, sizeof shared_state->state);
  shared_state->last_loop_at = GetCurrentTimestamp();
  shared_state->in_flight = static_cast<int>(deliveries_.size());
  SpinLockRelease(&shared_state->mutex);
}

}  // namespace pg_outbox::pg
