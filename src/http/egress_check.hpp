// The egress policy applied at connect time, for one transfer: libcurl asks before it
// opens a connection's socket (on the address about to be connected to, so a refused one
// is never contacted) and before a request goes out on a connection, reused ones included
// (a reused connection may predate a stricter policy).
#pragma once

#include "core/egress_policy.hpp"
#include "http/http_client.hpp"

#include <string>
#include <string_view>

struct sockaddr;

namespace pg_outbox::http {

class EgressCheck {
 public:
  // The client's policy; it outlives the check and is replaced only between transfers.
  void set_policy(const core::EgressPolicy* policy) { policy_ = policy; }

  // Nothing to check: no policy, or an empty one (which allows everything).
  bool allows_all() const { return policy_ == nullptr || policy_->empty(); }

  // The decision for the host of url and one address (nullptr: none known); records the
  // rule that refused it. Called from libcurl's callbacks (C): nothing may throw out of
  // it, and a check that cannot be made refuses (fails closed).
  bool allows(std::string_view url, const struct sockaddr* address) noexcept;

  // The same for an address in text form (libcurl's primary IP of a connection).
  bool allows_ip(std::string_view url, const char* ip) noexcept;

  // A new request: what the previous one found is forgotten.
  void reset() {
    host_.clear();
    denied_.clear();
  }

  // When a check refused: the response becomes a transport error naming the rule.
  void report_refusal(Response& response) const;

  const std::string& host() const { return host_; }      // as written in the URL, once needed
  const std::string& denied() const { return denied_; }  // the rule that refused, empty if none

 private:
  const core::EgressPolicy* policy_ = nullptr;
  std::string host_;
  std::string denied_;
};

}  // namespace pg_outbox::http
