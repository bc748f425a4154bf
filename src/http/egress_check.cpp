#include "http/egress_check.hpp"

#include "core/validation.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <utility>

#include "core/cpp_only.hpp"

namespace pg_outbox::http {

bool EgressCheck::allows(std::string_view url, const struct sockaddr* address) noexcept {
  if (allows_all()) return true;
  try {
    // Worked out on first need, so that requests under an empty policy (the
    // default) never parse their URL again.
    if (host_.empty()) host_ = core::url_host(url);
    core::EgressDecision decision = core::check_egress(*policy_, host_, address);
    if (!decision.allowed && denied_.empty()) denied_ = std::move(decision.rule);
    return decision.allowed;
  } catch (...) {
    return false;  // out of memory: denied() stays empty, the transfer fails
  }
}

bool EgressCheck::allows_ip(std::string_view url, const char* ip) noexcept {
  if (allows_all()) return true;
  sockaddr_in6 v6{};
  sockaddr_in v4{};
  const struct sockaddr* address = nullptr;
  if (inet_pton(AF_INET, ip, &v4.sin_addr) == 1) {
    v4.sin_family = AF_INET;
    address = reinterpret_cast<const struct sockaddr*>(&v4);
  } else if (inet_pton(AF_INET6, ip, &v6.sin6_addr) == 1) {
    v6.sin6_family = AF_INET6;
    address = reinterpret_cast<const struct sockaddr*>(&v6);
  }
  return allows(url, address);
}

void EgressCheck::report_refusal(Response& response) const {
  if (denied_.empty()) return;
  response.transport_error = true;
  response.egress_denied = denied_;
  response.error = "the egress policy refused host \"" + host_ + "\" (rule \"" + denied_ + "\")";
}

}  // namespace pg_outbox::http
