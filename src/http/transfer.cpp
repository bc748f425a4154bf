#include "http/transfer.hpp"

#include "core/ascii.hpp"
#include "http/response_capture.hpp"
#include "http/socket_watch.hpp"

#include <algorithm>
#include <string>
#include <string_view>

#include "core/cpp_only.hpp"

namespace pg_outbox::http {
namespace {

constexpr const char* kAllowedProtocols = "http,https";
// Added when the caller's headers have no Expect line (see Transfer::configure). libcurl only
// reads header lists, never writes to them.
char kNoExpect[] = "Expect:";

bool has_header(const core::HeaderLines& headers, std::string_view name) {
  for (std::string_view line : headers) {
    const auto colon = line.find(':');
    if (colon != std::string_view::npos &&
        core::iequals(core::ascii_trim(line.substr(0, colon), core::kHeaderSpace), name))
      return true;
  }
  return false;
}

// CURLOPT_OPENSOCKETFUNCTION: the egress check on the address about to be connected to
// (a refused one is never contacted), then the socket, opened through the client's watch.
curl_socket_t on_open_socket(void* user, curlsocktype, curl_sockaddr* address) {
  auto* self = static_cast<Transfer*>(user);
  if (!self->egress.allows(self->request.url, &address->addr)) return CURL_SOCKET_BAD;
  return self->sockets->open(*address);
}

// CURLOPT_PREREQFUNCTION: the connection is there (new, or reused from the cache) and
// the request is about to go out on it. A new connection's address was already
// checked when its socket was opened; a reused one may predate a stricter policy.
int on_prereq(void* user, char* primary_ip, char*, int, int) noexcept {
  auto* self = static_cast<Transfer*>(user);
  return self->egress.allows_ip(self->request.url, primary_ip) ? CURL_PREREQFUNC_OK : CURL_PREREQFUNC_ABORT;
}

// The options that are the same for every request, set once on a new handle.
CURLcode set_fixed_options(Transfer& t) {
  CURL* e = t.easy.get();
  void* self = static_cast<void*>(&t);
  void* response = static_cast<void*>(&t.response);
  CURLcode rc = CURLE_OK;
  auto check = [&rc](CURLcode c) {
    if (rc == CURLE_OK) rc = c;
  };
  check(curl_easy_setopt(e, CURLOPT_PRIVATE, self));
  check(curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t.error_buffer));
  check(curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L));
  // Abandoning a transfer must not wait for its name lookup to finish.
  check(curl_easy_setopt(e, CURLOPT_QUICK_EXIT, 1L));
  check(curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, kAllowedProtocols));
  check(curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, kAllowedProtocols));
  check(curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L));
  check(curl_easy_setopt(e, CURLOPT_MAXREDIRS, 0L));
  // An empty proxy and a "*" no-proxy list: http_proxy & co. in the server's environment
  // must not reroute webhooks.
  check(curl_easy_setopt(e, CURLOPT_PROXY, ""));
  check(curl_easy_setopt(e, CURLOPT_NOPROXY, "*"));
  check(curl_easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1)));
  check(curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L));
  check(curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L));
  check(curl_easy_setopt(e, CURLOPT_POST, 1L));
  check(curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &capture_body));
  check(curl_easy_setopt(e, CURLOPT_WRITEDATA, response));
  check(curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &capture_header));
  check(curl_easy_setopt(e, CURLOPT_HEADERDATA, response));
  check(curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, &on_open_socket));
  check(curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, self));
  check(curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, &on_prereq));
  check(curl_easy_setopt(e, CURLOPT_PREREQDATA, self));
  check(curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, &SocketWatch::on_close_socket));
  check(curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, static_cast<void*>(t.sockets)));
  return rc;
}

}  // namespace

std::unique_ptr<Transfer> Transfer::create(SocketWatch* sockets, const core::EgressPolicy* egress_policy) {
  auto t = std::make_unique<Transfer>();
  t->easy.reset(curl_easy_init());
  if (!t->easy) return nullptr;
  t->sockets = sockets;
  t->egress.set_policy(egress_policy);
  if (set_fixed_options(*t) != CURLE_OK) return nullptr;
  return t;
}

CURLcode Transfer::configure() {
  CURL* e = easy.get();
  error_buffer[0] = '\0';
  egress.reset();

  // Our own header lines, plus "Expect:" so that libcurl does not wait for a
  // "100 Continue" before sending bodies over 1 KiB (a round trip, or a 1 s stall against
  // receivers that ignore Expect).
  header_nodes.clear();
  // Each line is NUL-terminated where it lies (core::HeaderLines).
  for (std::string_view line : request.headers) header_nodes.push_back({const_cast<char*>(line.data()), nullptr});
  if (!has_header(request.headers, "Expect")) header_nodes.push_back({kNoExpect, nullptr});
  for (std::size_t i = 1; i < header_nodes.size(); ++i) header_nodes[i - 1].next = &header_nodes[i];

  const long timeout_ms = std::max(1L, request.timeout_ms);
  CURLcode rc = CURLE_OK;
  auto check = [&rc](CURLcode c) {
    if (rc == CURLE_OK) rc = c;
  };
  check(curl_easy_setopt(e, CURLOPT_URL, request.url.c_str()));
  check(curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size())));
  check(curl_easy_setopt(e, CURLOPT_POSTFIELDS, request.body.data()));
  check(curl_easy_setopt(e, CURLOPT_HTTPHEADER, header_nodes.empty() ? nullptr : header_nodes.data()));
  check(curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms));
  check(curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, std::min(timeout_ms, kMaxConnectTimeoutMs)));
  return rc;
}

void Transfer::finish(CURLcode result) {
  long status = 0;
  if (curl_easy_getinfo(easy.get(), CURLINFO_RESPONSE_CODE, &status) == CURLE_OK) response.status = status;
  curl_off_t total_us = 0;
  if (curl_easy_getinfo(easy.get(), CURLINFO_TOTAL_TIME_T, &total_us) == CURLE_OK)
    response.total_ms = static_cast<double>(total_us) / 1000.0;
  if (result != CURLE_OK) fail(result);
  egress.report_refusal(response);
}

void Transfer::fail(CURLcode result) {
  response.transport_error = true;
  response.error = error_buffer[0] != '\0' ? std::string(error_buffer) : curl_easy_strerror(result);
}

void Transfer::clear() {
  request = Request{};
  response = Response{};
  header_nodes.clear();
  egress.reset();
}

}  // namespace pg_outbox::http
