// The endpoints as the worker knows them: the rows of outbox.endpoints, their headers
// parsed once, their live circuit breakers and failing streaks (the table holds a copy
// for restarts), and the pauses the worker decided and has not written yet.
#pragma once

#include "core/claim_plan.hpp"
#include "core/endpoint_retirement.hpp"
#include "core/signing_key.hpp"
#include "core/string_object.hpp"
#include "pg/store/endpoints.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace pg_outbox::pg::worker {

// A pause the worker decided (retirement.cpp), written by the next settle.
struct Retiring {
  core::PauseReason reason;
  int64_t since_ms;  // the streak's start (Failing) or the 410's arrival (Gone)
};

struct Endpoint {
  store::EndpointRow row;
  std::optional<core::StringPairs> headers;  // nullopt: the stored headers are unusable
  std::string headers_error;
  std::vector<core::RotatingKey> keys;  // the secrets parsed once, current first
  std::string keys_error;               // not empty: a stored secret is unusable
  bool breaker_dirty = false;           // the breaker or the failing streak changed since last saved
  // Until written, row.paused is kept true: nothing more is claimed for it meanwhile.
  std::optional<Retiring> retiring;
};

// An endpoint the worker paused, once the transaction that paused it has committed.
struct Retired {
  std::string name;
  Retiring why;
};

class Endpoints {
 public:
  // Re-reads outbox.endpoints when an endpoint function committed a change (`version`
  // moved), and at least once per poll interval for direct edits of the table; not on
  // every commit's wake. Breakers stay the worker's own. Sets `max_pending_changed` when
  // the set of endpoints with a max_pending changed.
  void refresh(uint64_t version, int64_t now_ms, bool& max_pending_changed);
  // Whether the endpoints loaded are those of this version.
  bool loaded_at(uint64_t version) const { return version == version_; }
  // The endpoints altered or paused since their requests were queued (those requests not
  // yet started are taken back), once.
  std::vector<std::string> take_changed();
  // After the extension came back or the worker started: read everything again.
  void forget();

  Endpoint* find(const std::string& name);
  const Endpoint* find(const std::string& name) const;
  Endpoint& at(const std::string& name) { return endpoints_.at(name); }
  void for_each(const std::function<void(Endpoint&)>& visit) {
    for (auto& [name, endpoint] : endpoints_) visit(endpoint);
  }
  // Whether a breaker, a failing streak or a pause waits to be written.
  bool any_breaker_dirty() const;
  // Whether a secret the worker read has expired by now_ms: housekeeping then deletes
  // the expired rows (the worker stopped signing with them at their expiry already).
  bool any_secret_expired(int64_t now_ms) const;
  // Saves the breakers (and failing streaks) changed since they were last saved, then the
  // pauses decided, in the caller's transaction; they are clean once it commits
  // (breakers_committed), dirty still if it fails.
  void save_breakers();
  void breakers_committed();
  void breakers_not_written();
  // The endpoints paused by committed transactions since the last call, to log once.
  std::vector<Retired> take_retired();
  const std::vector<std::string>& with_max_pending() const { return max_pending_; }

  int max_attempts_of(const Endpoint& endpoint) const;
  int concurrency_of(const Endpoint& endpoint) const;
  // The claim's view of every endpoint (core/claim_plan.hpp), in a stable order.
  std::vector<core::EndpointView> views(const std::unordered_map<std::string, size_t>& held,
                                        const std::function<bool(const std::string&)>& parked) const;
  core::EndpointView view(const Endpoint& endpoint, size_t held) const;

 private:
  std::unordered_map<std::string, Endpoint> endpoints_;
  uint64_t version_ = UINT64_MAX;  // of the endpoints loaded
  int64_t loaded_ms_ = 0;
  std::vector<std::string> max_pending_;       // sorted names of the endpoints with a max_pending
  std::vector<std::string> changed_;           // altered or paused since their requests were queued
  std::vector<std::string> breakers_written_;  // by the transaction not yet committed
  std::vector<std::string> retires_settled_;   // pauses written (or found moot) by it
  std::vector<Retired> retired_;               // paused by it
  std::vector<Retired> retired_committed_;     // paused, committed, not yet logged
};

// What a request of this endpoint carries from the row: a change to any of it (or a
// pause) must reach the requests not yet started.
// Secrets are compared as they sign at now_ms: the expiry of a rotation's old secret, or
// the deletion of its row, changes nothing for requests already signed.
bool changes_requests(const store::EndpointRow& before, const store::EndpointRow& after, int64_t now_ms);

core::ClaimSettings claim_settings();

}  // namespace pg_outbox::pg::worker
