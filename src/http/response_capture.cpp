#include "http/response_capture.hpp"

#include "core/ascii.hpp"
#include "http/http_client.hpp"

#include <algorithm>
#include <string>
#include <string_view>

#include "core/cpp_only.hpp"

namespace pg_outbox::http {

std::size_t capture_body(char* data, std::size_t size, std::size_t nmemb, void* response) {
  const std::size_t n = size * nmemb;
  std::string& head = static_cast<Response*>(response)->body_head;
  if (head.size() < kBodyHeadLimit) head.append(data, std::min(n, kBodyHeadLimit - head.size()));
  return n;
}

std::size_t capture_header(char* data, std::size_t size, std::size_t nitems, void* response) {
  auto* r = static_cast<Response*>(response);
  const std::size_t n = size * nitems;
  const std::string_view line(data, n);
  if (line.substr(0, 5) == "HTTP/") {
    r->retry_after.clear();
    r->delivery_abort = false;
    return n;
  }
  const auto colon = line.find(':');
  if (colon == std::string_view::npos) return n;
  const auto name = line.substr(0, colon);
  const auto value = core::ascii_trim(line.substr(colon + 1), core::kHeaderSpace);
  if (core::iequals(name, "Retry-After")) {
    r->retry_after.assign(value.substr(0, kRetryAfterLimit));
  } else if (core::iequals(name, "webhook-delivery") && core::iequals(value, "abort")) {
    r->delivery_abort = true;
  }
  return n;
}

}  // namespace pg_outbox::http
