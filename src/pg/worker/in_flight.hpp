// The messages the worker holds between their claim and their settle, while they are
// queued in the delivery thread, and the claims they came in. One owner for what the
// old worker kept in five containers: each change of a message's state is one method.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace pg_outbox::pg::worker {

// A message handed to the delivery thread.
struct Delivery {
  std::string endpoint;
  int attempts = 0;
  int max_attempts = 0;
  int64_t claim_id = 0;       // its row in outbox.claims
  int64_t payload_bytes = 0;  // counted in held_bytes()
  int64_t claimed_ms = 0;
  bool probe = false;                       // sent as its endpoint's half-open probe
  std::optional<std::string> ordering_key;  // store::ClaimedMessage::ordering_key
  int64_t tid = 0;                          // store::ClaimedMessage::tid
};

class InFlight {
 public:
  // A claim's record (outbox.claims) with this many messages, each to be settled or
  // given back before the record may go.
  void claim_recorded(int64_t claim_id, size_t messages);
  // claimed -> queued in the delivery thread.
  void queue(int64_t id, Delivery delivery);
  // The messages queued (each with queue()) as one request, a batch: its tag is the
  // first id (docs/delivery.md, Batches).
  void batch(std::vector<int64_t> ids);
  // The messages of the request tagged `tag`, which leaves the batches: the batch's,
  // or the one message of that id.
  std::vector<int64_t> take_request(uint64_t tag);
  // queued -> answered or given back: the message leaves the thread's hands. nullopt if
  // the id is not held (an answer for a message already forgotten). `held_before`: how
  // many its endpoint held before it left.
  std::optional<Delivery> leave(int64_t id, size_t& held_before);
  // One message of the claim is settled (answered, given back, or dead-lettered without
  // a request); the claim is finished with its last one.
  void member_settled(int64_t claim_id);
  // The claims whose every message is settled, to delete with the next write of results.
  std::vector<int64_t> take_finished_claims();
  // Finished claims kept back (their messages' results wait with a parked endpoint).
  void keep_finished_claims(std::vector<int64_t>& claims);

  const Delivery* find(int64_t id) const;  // nullptr when not queued
  std::vector<int64_t> ids() const;
  size_t size() const { return deliveries_.size(); }
  bool empty() const { return deliveries_.empty(); }
  int64_t held_bytes() const { return held_bytes_; }
  const std::unordered_map<std::string, size_t>& held_by_endpoint() const { return outstanding_; }
  // Everything forgotten: the tables it belonged to are gone.
  void clear();

 private:
  std::unordered_map<int64_t, Delivery> deliveries_;           // by message id
  std::unordered_map<std::string, size_t> outstanding_;        // deliveries_ per endpoint
  std::unordered_map<int64_t, size_t> claims_;                 // outbox.claims id -> its messages not yet settled
  std::unordered_map<int64_t, std::vector<int64_t>> batches_;  // a batch's tag (first id) -> its messages
  std::vector<int64_t> finished_claims_;                       // claims whose messages are all settled
  int64_t held_bytes_ = 0;                                     // payload bytes of deliveries_
};

}  // namespace pg_outbox::pg::worker
