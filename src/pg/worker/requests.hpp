// What requests.cpp (one message per request) and batches.cpp (several) share: the
// checks of a claimed message and its record while it is in flight.
#pragma once

#include "core/cloudevents.hpp"
#include "core/delivery_policy.hpp"
#include "http/http_client.hpp"
#include "pg/store/claims.hpp"
#include "pg/worker/state.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pg_outbox::pg::worker {

// Why a claimed message cannot go at all (nullopt: it can).
std::optional<std::pair<core::DeadReason, std::string>> unsendable(const WorkerState& state, const Endpoint& endpoint,
                                                                   const store::ClaimedMessage& m);
// The message's CloudEvent for its endpoint (docs/delivery.md, CloudEvents).
core::CloudEvent cloud_event(const Endpoint& endpoint, const store::ClaimedMessage& m, std::string_view webhook_id);
// The in-flight record of a message handed to the delivery thread.
Delivery delivery_of(const WorkerState& state, const Endpoint& endpoint, const store::ClaimedMessage& m,
                     int64_t claim_id, int64_t now_ms, bool probe);
// A claimed message goes to the DLQ without a request (dead_letter_unsent), its claim
// counts it, and a probe is lost.
void refuse_unsent(WorkerState& state, const store::ClaimedMessage& m, int64_t claim_id, bool probe,
                   std::pair<core::DeadReason, std::string> refused);

// batches.cpp: the sendable claimed messages of one batching endpoint, as requests of up
// to batch_size messages whose body stays within pg_outbox.max_payload_size.
void start_batches(WorkerState& state, Endpoint& endpoint, std::vector<const store::ClaimedMessage*>& members,
                   int64_t claim_id, int64_t now_ms, std::vector<http::Request>& requests);

}  // namespace pg_outbox::pg::worker
