// The background worker: claims due messages, delivers them over HTTP (libcurl multi)
// or NOTIFY, and settles the results in short batched transactions.
#pragma once

#include "core/circuit_breaker.hpp"
#include "core/delivery_policy.hpp"
#include "core/string_object.hpp"
#include "http/delivery_thread.hpp"
#include "pg/store/outbox_store.hpp"

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace pg_outbox::pg {

struct DatabaseSlot;

// Thrown out of run() when pg_outbox is not installed in the worker's database (never
// was, or DROP EXTENSION committed): the worker exits and the launcher starts one
// again when CREATE EXTENSION commits there.
struct ExtensionAbsent {};

class Worker {
 public:
  explicit Worker(DatabaseSlot& slot);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  // The loop; ends by process exit (SIGTERM, postmaster death) or by ExtensionAbsent.
  void run();

 private:
  struct Endpoint {
    EndpointRow row;
    std::optional<core::StringPairs> headers;  // nullopt: the stored headers are unusable
    std::string headers_error;
    bool breaker_dirty = false;
  };
  struct Delivery {  // a message handed to the HTTP client
    std::string endpoint;
    int attempts = 0;
    int max_attempts = 0;
    int64_t claim_id = 0;       // its row in outbox.claims
    int64_t payload_bytes = 0;  // counted in held_bytes_
    int64_t claimed_ms = 0;
    bool probe = false;                    // sent as its endpoint's half-open probe
    std::optional<int32_t> ordering_lock;  // ClaimedMessage::ordering_lock
  };

  bool wait_for_work();
  void iterate(bool woken);
  void recover_from_error(int sqlstate, std::string message);
  void on_extension_changed();
  void committed();
  bool prepare_database();
  void require_same_extension();
  void forget_deliveries();
  void refresh_endpoints();
  size_t claim_and_deliver();  // returns how many messages it claimed
  void start_http(const std::vector<ClaimedMessage>& claimed, int64_t claim_id);
  void dead_letter_unsent(const ClaimedMessage& m, core::DeadReason reason, std::string error);
  void claim_member_settled(int64_t claim_id);
  std::vector<int64_t> in_flight_ids() const;
  void prepare_history_if_due();
  void give_back(const std::vector<uint64_t>& tags);
  void give_back_stale_requests();
  void give_back_unstarted(const std::function<bool(const Delivery&)>& select);
  void probe_lost(const std::string& endpoint);
  static bool changes_requests(const EndpointRow& before, const EndpointRow& after);
  void give_back_requests_of_changed_endpoints();
  void deliver_notify(const std::vector<ClaimedMessage>& claimed);
  void collect_http_results();
  void record_outcome(const http::Response& response);
  void on_breaker_transition(Endpoint& endpoint, core::Transition transition);
  void settle_pending();
  // Bounded waits (worker_parking.cpp).
  struct Parked {          // an endpoint held up by someone else's lock or its own error
    int64_t until_ms = 0;  // left out of claims until then; its results tried again then
    int64_t backoff_ms = 0;
    Settlements results;  // its results not yet written
  };
  void settle_apart(const std::string& error);
  bool settle_alone(Settlements& results, std::string& error);
  void park(const std::string& endpoint, Settlements results, const std::string& error);
  void unpark(const std::string& endpoint);
  bool is_parked(const std::string& endpoint, int64_t now) const;
  void set_aside_results_of_parked();
  void retry_parked();
  size_t notify_round(const std::vector<std::string>& endpoints);
  bool holds_parked_results() const;
  void hold_back_claims();
  void in_settling_transaction(const char* activity, const std::function<void()>& body);
  void publish_counts();
  void written(const Settlements& results);
  void recount_queued();
  void housekeeping();
  void count(const std::string& endpoint, core::Verdict verdict);
  void publish_status(const char* state);
  int wait_timeout_ms() const;
  int max_attempts_of(const Endpoint& endpoint) const;
  int concurrency_of(const Endpoint& endpoint) const;
  size_t share_of(const Endpoint& endpoint) const;
  bool holds_its_share(const std::string& endpoint) const;
  size_t claimable_outstanding() const;
  void track_delivery(uint64_t tag, Delivery delivery);
  Delivery untrack_delivery(std::unordered_map<uint64_t, Delivery>::iterator found);
  size_t claim_target() const;

  DatabaseSlot& slot_;                       // this database's shared state (latch, status, counters)
  http::DeliveryThread delivery_;            // libcurl, on its own thread
  struct WaitEventSet* wait_set_ = nullptr;  // latch, postmaster death, delivery_.results_fd()
  OutboxStore store_;
  std::mt19937_64 random_;
  std::unordered_map<std::string, Endpoint> endpoints_;
  std::unordered_map<uint64_t, Delivery> deliveries_;    // through track_/untrack_delivery only
  std::unordered_map<std::string, size_t> outstanding_;  // deliveries_ per endpoint
  std::vector<std::string> endpoints_changed_;           // altered or paused since their requests were queued
  Settlements pending_;                                  // results not yet written back (kept across a failed settle)
  std::unordered_map<std::string, Parked> parked_;       // endpoints held up, by name
  std::vector<int64_t> deferred_claims_;                 // finished claims kept while results are parked
  std::unordered_map<int64_t, size_t> claims_;           // outbox.claims id -> its messages not yet settled
  int64_t held_bytes_ = 0;                               // payload bytes of deliveries_
  int64_t history_covered_ms_ = 0;                       // history partitions exist until then
  int history_width_s_ = 0;                              // ... of this width
  int64_t history_retry_ms_ = 0;                         // after a failed attempt to create them
  std::vector<std::string> breakers_written_;            // by the transaction not yet committed
  std::unordered_map<std::string, std::array<uint64_t, 3>> counted_;  // to publish: sent, retried, dead

  bool ready_ = false;                 // the extension exists at our version and claims were recovered
  bool announced_ = false;             // "worker started" is logged once, when first ready
  core::WebhookIdSource webhook_ids_;  // this database's instance id (read when ready)
  std::string waiting_for_version_;    // the version we last logged waiting on
  uint32_t extension_oid_ = 0;         // of the extension whose tables the deliveries belong to
  bool more_due_ = true;               // the last claim was full: claim again as soon as there is room
  int64_t next_claim_ms_ = 0;          // otherwise: when something becomes due (or the poll interval)
  int64_t last_claim_ms_ = 0;
  int wake_gap_ms_ = 2;  // see kWakeCoalesceMinMs
  int64_t next_housekeeping_ms_ = 0;
  uint64_t endpoints_version_ = UINT64_MAX;  // of the endpoints_ loaded
  int64_t endpoints_loaded_ms_ = 0;
  int64_t next_orphan_check_ms_ = 0;
  int error_streak_ = 0;
  size_t claim_round_ = 0;
  int64_t error_backoff_until_ms_ = 0;
  int64_t housekeeping_quiet_until_ms_ = 0;         // its failures are logged once a minute
  bool recount_queued_ = true;                      // max_pending's counts must be made (again)
  std::vector<std::string> max_pending_endpoints_;  // the endpoints they are kept for
};

}  // namespace pg_outbox::pg
