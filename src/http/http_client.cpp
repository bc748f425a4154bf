// libcurl multi-interface client; see http_client.hpp for the contract.
//
// Shape: requests wait in a FIFO queue until a slot is free (in flight < max_concurrency); a
// started request lives in a Transfer, which owns an easy handle, its header list, its error
// buffer and the Response being filled. Finished Transfers go back to an idle pool and their
// easy handles are reused (options that never change are set once, when the handle is
// created); connections live in the multi handle's connection cache, so they are kept alive and
// reused across requests no matter which easy handle runs the next transfer.
//
// Event loop: libcurl is driven with curl_multi_socket_action. It tells us which sockets to
// watch (CURLMOPT_SOCKETFUNCTION), and we keep them in an epoll instance owned by the client;
// it tells us when it next needs to run for timeouts (CURLMOPT_TIMERFUNCTION), and we keep that
// deadline. A wait is then one epoll_wait that returns only the ready sockets, instead of a
// poll() over every socket in flight; finished transfers are read with curl_multi_info_read.
//
// libcurl removes a connection's socket from the watch list when its transfer ends and adds it
// back when the next transfer reuses the connection, usually within the same pass. The sockets
// of connections are opened and closed by our own callbacks (CURLOPT_OPENSOCKETFUNCTION,
// CURLOPT_CLOSESOCKETFUNCTION), so for those the client knows when a socket number stops
// naming the same socket and can leave them in epoll while unwatched: no epoll_ctl per
// request. Any other socket libcurl may hand us (e.g. the threaded resolver's) is added and
// removed exactly as asked.
#include "http/http_client.hpp"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "core/validation.hpp"
#include "core/cpp_only.hpp"

namespace pg_outbox::http {
namespace {

// Retry-After values are short (seconds or an HTTP date); anything longer is junk, and keeping
// a bounded prefix is enough for the caller to reject it.
constexpr std::size_t kRetryAfterLimit = 128;
// Connecting never gets more than this, even when the whole-transfer timeout is longer.
constexpr long kMaxConnectTimeoutMs = 10'000;
constexpr const char* kAllowedProtocols = "http,https";
// Added when the caller's headers have no Expect line (see Transfer::configure). libcurl only
// reads header lists, never writes to them.
char kNoExpect[] = "Expect:";

struct EasyDeleter {
  void operator()(CURL* easy) const noexcept { curl_easy_cleanup(easy); }
};
struct MultiDeleter {
  void operator()(CURLM* multi) const noexcept { curl_multi_cleanup(multi); }
};
using EasyPtr = std::unique_ptr<CURL, EasyDeleter>;
using MultiPtr = std::unique_ptr<CURLM, MultiDeleter>;

// curl_global_init is not thread-safe and must run once per process before any other call.
// It is never undone: the worker process owns libcurl until it exits.
void init_curl_once() {
  static std::once_flag once;
  static CURLcode result = CURLE_OK;
  std::call_once(once, [] { result = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (result != CURLE_OK)
    throw std::runtime_error(std::string("curl_global_init failed: ") + curl_easy_strerror(result));
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n";
  const auto first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(kSpace);
  return s.substr(first, last - first + 1);
}

bool has_header(const std::vector<std::string>& headers, std::string_view name) {
  for (const auto& line : headers) {
    const auto colon = line.find(':');
    if (colon != std::string::npos && iequals(trim(std::string_view(line).substr(0, colon)), name)) return true;
  }
  return false;
}

}  // namespace

// What the client knows about a socket number (Client::Impl::sockets is indexed by it).
struct SocketState {
  bool ours = false;        // opened by on_open_socket, so on_close_socket sees it closed
  bool wanted = false;      // libcurl currently waits on it
  bool registered = false;  // in epoll's interest list, with the events below
  uint32_t events = 0;
};

// One request from start to finish. Heap-allocated and never moved while in flight: libcurl
// holds pointers to error_buffer, to request.body (POSTFIELDS), to the header lines (the
// header list points into request.headers) and to the Transfer itself (callback user data).
struct Transfer {
  Request request;
  Response response;
  // CURLOPT_HTTPHEADER list, built in place: each node points at a line of request.headers,
  // so starting a request allocates nothing for its headers (curl_slist_append would copy
  // every line). Capacity is kept across requests.
  std::vector<curl_slist> header_nodes;
  char error_buffer[CURL_ERROR_SIZE] = {};
  size_t slot = 0;  // index in Client::Impl::active while in flight
  // The egress check (see on_open_socket and on_prereq): the client's policy, this
  // request's host as written in its URL (once needed), and the rule that refused it.
  const core::EgressPolicy* egress = nullptr;
  void* socket_owner = nullptr;  // the Client::Impl whose socket bookkeeping this uses
  std::string host;
  std::string egress_denied;
  EasyPtr easy;  // declared last: destroyed first, while what it points at still exists

  // CURLOPT_WRITEFUNCTION: keep the first kBodyHeadLimit bytes, accept (and drop) the rest.
  static size_t on_body(char* data, size_t size, size_t nmemb, void* user) {
    auto* self = static_cast<Transfer*>(user);
    const size_t n = size * nmemb;
    std::string& head = self->response.body_head;
    if (head.size() < kBodyHeadLimit) head.append(data, std::min(n, kBodyHeadLimit - head.size()));
    return n;
  }

  // CURLOPT_HEADERFUNCTION: called once per header line, status lines included. A status line
  // starts a new response (after a 1xx interim one), so only the final response's Retry-After
  // is kept.
  static size_t on_header(char* data, size_t size, size_t nitems, void* user) {
    auto* self = static_cast<Transfer*>(user);
    const size_t n = size * nitems;
    const std::string_view line(data, n);
    if (line.substr(0, 5) == "HTTP/") {
      self->response.retry_after.clear();
      return n;
    }
    const auto colon = line.find(':');
    if (colon != std::string_view::npos && iequals(line.substr(0, colon), "Retry-After")) {
      const auto value = trim(line.substr(colon + 1));
      self->response.retry_after.assign(value.substr(0, kRetryAfterLimit));
    }
    return n;
  }

  // The options that are the same for every request, set once on a new handle. The handle is
  // never curl_easy_reset: configure() sets every per-request option each time, so nothing
  // of a previous request is left over.
  CURLcode setup(curl_opensocket_callback open_socket, curl_closesocket_callback close_socket, void* sockets_user,
                 const core::EgressPolicy* egress_policy) {
    egress = egress_policy;
    socket_owner = sockets_user;
    CURL* e = easy.get();
    CURLcode rc = CURLE_OK;
    auto check = [&rc](CURLcode c) {
      if (rc == CURLE_OK) rc = c;
    };
    check(curl_easy_setopt(e, CURLOPT_PRIVATE, static_cast<void*>(this)));
    check(curl_easy_setopt(e, CURLOPT_ERRORBUFFER, error_buffer));
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
    check(curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Transfer::on_body));
    check(curl_easy_setopt(e, CURLOPT_WRITEDATA, static_cast<void*>(this)));
    check(curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Transfer::on_header));
    check(curl_easy_setopt(e, CURLOPT_HEADERDATA, static_cast<void*>(this)));
    check(curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_socket));
    check(curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, static_cast<void*>(this)));
    check(curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, &Transfer::on_prereq));
    check(curl_easy_setopt(e, CURLOPT_PREREQDATA, static_cast<void*>(this)));
    check(curl_easy_setopt(e, CURLOPT_CLOSESOCKETFUNCTION, close_socket));
    check(curl_easy_setopt(e, CURLOPT_CLOSESOCKETDATA, sockets_user));
    return rc;
  }

  // The egress decision for this request's host and one address; records the rule
  // that refused it. Called by libcurl (C): nothing may throw out of it, and a check
  // that cannot be made refuses (fails closed).
  bool egress_allows(const struct sockaddr* address) noexcept {
    if (egress == nullptr || egress->empty()) return true;
    try {
      // Worked out on first need, so that requests under an empty policy (the
      // default) never parse their URL again.
      if (host.empty()) host = core::url_host(request.url);
      core::EgressDecision decision = core::check_egress(*egress, host, address);
      if (!decision.allowed && egress_denied.empty()) egress_denied = std::move(decision.rule);
      return decision.allowed;
    } catch (...) {
      return false;  // out of memory: egress_denied stays empty, the transfer fails
    }
  }

  // CURLOPT_PREREQFUNCTION: the connection is there (new, or reused from the cache) and
  // the request is about to go out on it. A new connection's address was already
  // checked when its socket was opened; a reused one may predate a stricter policy.
  static int on_prereq(void* user, char* primary_ip, char*, int, int) noexcept {
    auto* self = static_cast<Transfer*>(user);
    if (self->egress == nullptr || self->egress->empty()) return CURL_PREREQFUNC_OK;
    sockaddr_in6 v6{};
    sockaddr_in v4{};
    const struct sockaddr* address = nullptr;
    if (inet_pton(AF_INET, primary_ip, &v4.sin_addr) == 1) {
      v4.sin_family = AF_INET;
      address = reinterpret_cast<const struct sockaddr*>(&v4);
    } else if (inet_pton(AF_INET6, primary_ip, &v6.sin6_addr) == 1) {
      v6.sin6_family = AF_INET6;
      address = reinterpret_cast<const struct sockaddr*>(&v6);
    }
    return self->egress_allows(address) ? CURL_PREREQFUNC_OK : CURL_PREREQFUNC_ABORT;
  }

  // The options of this request (all of them: the handle may have run another one before).
  CURLcode configure() {
    CURL* e = easy.get();
    error_buffer[0] = '\0';
    host.clear();
    egress_denied.clear();

    // Our own header lines, plus "Expect:" so that libcurl does not wait for a
    // "100 Continue" before sending bodies over 1 KiB (a round trip, or a 1 s stall against
    // receivers that ignore Expect).
    header_nodes.clear();
    for (auto& line : request.headers) header_nodes.push_back({line.data(), nullptr});
    if (!has_header(request.headers, "Expect")) header_nodes.push_back({kNoExpect, nullptr});
    for (size_t i = 1; i < header_nodes.size(); ++i) header_nodes[i - 1].next = &header_nodes[i];

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

  // Fills in what libcurl knows once the transfer is over.
  void finish(CURLcode result) {
    long status = 0;
    if (curl_easy_getinfo(easy.get(), CURLINFO_RESPONSE_CODE, &status) == CURLE_OK) response.status = status;
    curl_off_t total_us = 0;
    if (curl_easy_getinfo(easy.get(), CURLINFO_TOTAL_TIME_T, &total_us) == CURLE_OK)
      response.total_ms = static_cast<double>(total_us) / 1000.0;
    if (result != CURLE_OK) fail(result);
    if (!egress_denied.empty()) {
      response.transport_error = true;
      response.egress_denied = egress_denied;
      response.error = "the egress policy refused host \"" + host + "\" (rule \"" + egress_denied + "\")";
    }
  }

  void fail(CURLcode result) {
    response.transport_error = true;
    response.error = error_buffer[0] != '\0' ? std::string(error_buffer) : curl_easy_strerror(result);
  }

  // Back to the idle pool: release what belonged to the request, keep the easy handle (and
  // the header nodes' capacity). libcurl keeps pointers into the old request (URL excepted,
  // it copies that) until configure() replaces them, but never uses them outside a transfer.
  void clear() {
    request = Request{};
    response = Response{};
    header_nodes.clear();
    egress_denied.clear();
  }
};

struct Client::Impl {
  using Clock = std::chrono::steady_clock;

  MultiPtr multi;
  int epoll_fd = -1;  // the sockets libcurl asked us to watch (and idle ones of ours)
  int wake_fd = -1;   // the owner's wake-up (see Client::set_wake_fd), or -1
  std::vector<epoll_event> events;
  std::vector<SocketState> sockets;  // indexed by socket number
  bool timer_armed = false;          // libcurl wants curl_multi_socket_action(TIMEOUT) at timer_due
  Clock::time_point timer_due;
  // Transfers whose socket could not be added to epoll (ENOMEM, ENOSPC): they are failed
  // rather than left to hang until their timeout.
  std::vector<std::pair<CURL*, int>> unwatchable;
  // Every Transfer points at it (Transfer::egress); replaced only between run() calls.
  core::EgressPolicy egress;

  size_t max_concurrency = 1;
  std::deque<Request> waiting;                    // submitted, not started
  std::vector<std::unique_ptr<Transfer>> active;  // added to the multi handle; see Transfer::slot
  std::vector<std::unique_ptr<Transfer>> idle;    // finished, handle reusable
  std::vector<Response> ready;                    // finished, not returned yet (run() threw after collecting)

  Impl() {
    epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd < 0) throw std::runtime_error(std::string("epoll_create1 failed: ") + std::strerror(errno));
  }

  ~Impl() {
    remove_all_active();  // unregisters their sockets: epoll_fd must still be open
    idle.clear();
    multi.reset();  // closes the cached connections
    if (epoll_fd >= 0) close(epoll_fd);
  }

  void init_multi() {
    multi.reset(curl_multi_init());
    if (!multi) throw std::runtime_error("curl_multi_init failed");
    CURLM* m = multi.get();
    if (curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, &Impl::on_socket) != CURLM_OK ||
        curl_multi_setopt(m, CURLMOPT_SOCKETDATA, static_cast<void*>(this)) != CURLM_OK ||
        curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, &Impl::on_timer) != CURLM_OK ||
        curl_multi_setopt(m, CURLMOPT_TIMERDATA, static_cast<void*>(this)) != CURLM_OK)
      throw std::runtime_error("curl_multi_setopt failed");
  }

  void apply_limits() {
    const long n = static_cast<long>(max_concurrency);
    CURLM* m = multi.get();
    // HTTP/1.1 only: one request per connection at a time, so at most n connections are
    // busy; the cache keeps up to n idle ones for reuse, and opening a connection beyond the
    // total closes the oldest idle one (e.g. to an endpoint that is no longer used).
    if (curl_multi_setopt(m, CURLMOPT_PIPELINING, static_cast<long>(CURLPIPE_NOTHING)) != CURLM_OK ||
        curl_multi_setopt(m, CURLMOPT_MAX_TOTAL_CONNECTIONS, n) != CURLM_OK ||
        curl_multi_setopt(m, CURLMOPT_MAX_HOST_CONNECTIONS, n) != CURLM_OK ||
        curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, n) != CURLM_OK)
      throw std::runtime_error("curl_multi_setopt failed");
    // Room for every socket of a full wait (one per transfer, two while a connection
    // attempt races IPv6 against IPv4); more would simply be returned by the next wait.
    events.resize(std::min<size_t>(2 * max_concurrency + 8, 4096));
  }

  SocketState& socket_state(curl_socket_t s) {
    const auto i = static_cast<size_t>(s);
    if (i >= sockets.size()) sockets.resize(std::max<size_t>(i + 1, 2 * sockets.size()));
    return sockets[i];
  }

  // Adds the socket to epoll, or changes its events. Returns 0 or an errno.
  int watch(curl_socket_t s, SocketState& st, uint32_t wanted_events) {
    epoll_event ev{};
    ev.events = wanted_events;
    ev.data.fd = s;
    int op = st.registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    int rc = epoll_ctl(epoll_fd, op, s, &ev);
    if (rc != 0 && (errno == ENOENT || errno == EEXIST)) {
      // Our bookkeeping and the kernel's disagree (a socket we did not see closed, its
      // number reused): trust the kernel.
      op = op == EPOLL_CTL_ADD ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
      rc = epoll_ctl(epoll_fd, op, s, &ev);
    }
    if (rc != 0) {
      const int err = errno;
      st.registered = false;
      return err;
    }
    st.registered = true;
    st.events = wanted_events;
    return 0;
  }

  void unwatch(curl_socket_t s, SocketState& st) {
    // May fail harmlessly (already closed, hence already out of the interest list).
    if (st.registered) epoll_ctl(epoll_fd, EPOLL_CTL_DEL, s, nullptr);
    st.registered = false;
  }

  // CURLMOPT_SOCKETFUNCTION: what libcurl waits for on a socket.
  static int on_socket(CURL* easy, curl_socket_t s, int what, void* user, void*) {
    auto* self = static_cast<Impl*>(user);
    if (s < 0) return 0;
    SocketState& st = self->socket_state(s);
    if (what == CURL_POLL_REMOVE) {
      st.wanted = false;
      // Ours stay in epoll until closed or reported ready while unwanted (see dispatch).
      if (!st.ours) self->unwatch(s, st);
      return 0;
    }
    st.wanted = true;
    const uint32_t wanted_events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u);
    // Only for our sockets is "registered" known to still be true (see on_close_socket).
    if (st.ours && st.registered && st.events == wanted_events) return 0;
    if (const int err = self->watch(s, st, wanted_events)) self->unwatchable.emplace_back(easy, err);
    return 0;
  }

  // CURLOPT_OPENSOCKETFUNCTION: the egress check on the address about to be connected to
  // (a refused one is never contacted), then what libcurl would do itself, plus
  // close-on-exec, and a note that the socket is ours.
  static curl_socket_t on_open_socket(void* user, curlsocktype, curl_sockaddr* address) {
    auto* transfer = static_cast<Transfer*>(user);
    if (!transfer->egress_allows(&address->addr)) return CURL_SOCKET_BAD;
    auto* self = static_cast<Impl*>(transfer->socket_owner);
    const int s = socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
    if (s < 0) return CURL_SOCKET_BAD;
    SocketState& st = self->socket_state(s);
    st = SocketState{};  // a new socket: nothing registered under this number
    st.ours = true;
    return s;
  }

  // CURLOPT_CLOSESOCKETFUNCTION: libcurl closes a connection's socket.
  static int on_close_socket(void* user, curl_socket_t s) {
    auto* self = static_cast<Impl*>(user);
    if (s >= 0 && static_cast<size_t>(s) < self->sockets.size()) {
      SocketState& st = self->sockets[static_cast<size_t>(s)];
      self->unwatch(s, st);
      st = SocketState{};
    }
    return close(s);
  }

  // CURLMOPT_TIMERFUNCTION: -1 removes the timer, 0 means "as soon as possible".
  static int on_timer(CURLM*, long timeout_ms, void* user) {
    auto* self = static_cast<Impl*>(user);
    self->timer_armed = timeout_ms >= 0;
    if (self->timer_armed) self->timer_due = Clock::now() + std::chrono::milliseconds(timeout_ms);
    return 0;
  }

  void socket_action(curl_socket_t s, int ev_bitmask) {
    int running = 0;
    const CURLMcode mrc = curl_multi_socket_action(multi.get(), s, ev_bitmask, &running);
    if (mrc != CURLM_OK)
      throw std::runtime_error(std::string("curl_multi_socket_action failed: ") + curl_multi_strerror(mrc));
  }

  // Runs libcurl's timeouts if they are due (this also starts newly added transfers, which
  // libcurl schedules with a zero timeout). The timer is re-armed by the callback; running it
  // early is harmless (libcurl then calls the callback again with what is left).
  void run_timer_if_due(Clock::time_point now) {
    if (!timer_armed || timer_due > now) return;
    timer_armed = false;
    socket_action(CURL_SOCKET_TIMEOUT, 0);
  }

  // One epoll_wait of at most wait_ms, then libcurl runs the transfers of the ready sockets.
  // Returns false if the wait was interrupted by a signal or by the wake fd.
  bool wait_and_dispatch(int wait_ms) {
    const int n = epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), wait_ms);
    if (n < 0) {
      if (errno == EINTR) return false;
      throw std::runtime_error(std::string("epoll_wait failed: ") + std::strerror(errno));
    }
    bool woken = false;
    for (int i = 0; i < n; ++i) {
      const curl_socket_t s = events[i].data.fd;
      const uint32_t e = events[i].events;
      if (s == wake_fd) {
        woken = true;  // read by the owner, not here: it knows what the wake was for
        continue;
      }
      SocketState& st = socket_state(s);
      if (!st.wanted) {
        // An idle connection of ours (e.g. the server closed it): stop watching it.
        // libcurl finds out when it next tries to reuse it, or prunes it.
        unwatch(s, st);
        continue;
      }
      int mask = 0;
      // Hang-up and error: let libcurl read (and write) to find out what happened;
      // a zero mask would make it poll the socket itself.
      if (e & (EPOLLIN | EPOLLHUP | EPOLLERR)) mask |= CURL_CSELECT_IN;
      if (e & (EPOLLOUT | EPOLLHUP | EPOLLERR)) mask |= CURL_CSELECT_OUT;
      if (e & EPOLLERR) mask |= CURL_CSELECT_ERR;
      socket_action(s, mask);
    }
    return !woken;
  }

  std::unique_ptr<Transfer> take_transfer() {
    if (!idle.empty()) {
      auto t = std::move(idle.back());
      idle.pop_back();
      return t;
    }
    auto t = std::make_unique<Transfer>();
    t->easy.reset(curl_easy_init());
    if (!t->easy ||
        t->setup(&Impl::on_open_socket, &Impl::on_close_socket, static_cast<void*>(this), &egress) != CURLE_OK)
      return nullptr;
    return t;
  }

  void recycle(std::unique_ptr<Transfer> t) {
    t->clear();
    if (idle.size() < max_concurrency) idle.push_back(std::move(t));
  }

  static Response failed(const Request& request, std::string error) {
    Response r;
    r.tag = request.tag;
    r.group = request.group;
    r.transport_error = true;
    r.error = std::move(error);
    return r;
  }

  // Takes a transfer out of the multi handle and out of active.
  std::unique_ptr<Transfer> detach(Transfer* raw) {
    const size_t slot = raw->slot;
    std::unique_ptr<Transfer> t = std::move(active[slot]);
    if (slot + 1 != active.size()) {
      active[slot] = std::move(active.back());
      active[slot]->slot = slot;
    }
    active.pop_back();
    curl_multi_remove_handle(multi.get(), t->easy.get());
    return t;
  }

  // Starts queued requests while slots are free. A request that cannot even be started
  // (out of memory) completes at once as a transport error. Returns how many were started.
  size_t start_waiting(std::vector<Response>& out) {
    size_t started = 0;
    while (!waiting.empty() && active.size() < max_concurrency) {
      Request request = std::move(waiting.front());
      waiting.pop_front();
      auto t = take_transfer();
      if (!t) {
        out.push_back(failed(request, "cannot create a curl handle"));
        continue;
      }
      t->request = std::move(request);
      t->response.tag = t->request.tag;
      t->response.group = t->request.group;
      const CURLcode rc = t->configure();
      if (rc != CURLE_OK) {
        t->fail(rc);
        out.push_back(std::move(t->response));
        recycle(std::move(t));
        continue;
      }
      const CURLMcode mrc = curl_multi_add_handle(multi.get(), t->easy.get());
      if (mrc != CURLM_OK) {
        out.push_back(failed(t->request, curl_multi_strerror(mrc)));
        recycle(std::move(t));
        continue;
      }
      t->slot = active.size();
      active.push_back(std::move(t));
      ++started;
    }
    return started;
  }

  // Moves every finished transfer's Response to out and its Transfer to the idle pool.
  void collect(std::vector<Response>& out) {
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi.get(), &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      // One allocation for the whole pass rather than a regrowth every few responses.
      if (out.capacity() == 0) out.reserve(static_cast<size_t>(left) + 1 + active.size() / 2);
      CURL* easy = msg->easy_handle;
      const CURLcode result = msg->data.result;  // msg is invalid after remove_handle
      Transfer* raw = nullptr;
      if (curl_easy_getinfo(easy, CURLINFO_PRIVATE, &raw) != CURLE_OK || !raw || raw->slot >= active.size() ||
          active[raw->slot].get() != raw)
        continue;  // not ours; cannot happen
      std::unique_ptr<Transfer> t = detach(raw);
      t->finish(result);
      out.push_back(std::move(t->response));
      recycle(std::move(t));
    }
    fail_unwatchable(out);
  }

  void fail_unwatchable(std::vector<Response>& out) {
    if (unwatchable.empty()) return;
    auto list = std::move(unwatchable);
    unwatchable.clear();
    for (const auto& [easy, err] : list) {
      Transfer* raw = nullptr;
      if (!easy || curl_easy_getinfo(easy, CURLINFO_PRIVATE, &raw) != CURLE_OK || !raw || raw->slot >= active.size() ||
          active[raw->slot].get() != raw)
        continue;  // already finished, or not a transfer of ours
      std::unique_ptr<Transfer> t = detach(raw);
      t->response.transport_error = true;
      t->response.error = std::string("cannot watch the socket: ") + std::strerror(err);
      out.push_back(std::move(t->response));
      recycle(std::move(t));
    }
    unwatchable.clear();  // what removing those handles may have added
  }

  void remove_all_active() {
    for (auto& t : active) curl_multi_remove_handle(multi.get(), t->easy.get());
    active.clear();  // frees the easy handles, closing their connections
    unwatchable.clear();
  }
};

Client::Client(int max_concurrency) {
  init_curl_once();
  impl_ = std::make_unique<Impl>();
  impl_->init_multi();
  impl_->max_concurrency = static_cast<size_t>(std::max(1, max_concurrency));
  impl_->apply_limits();
}

Client::~Client() = default;

void Client::set_max_concurrency(int max_concurrency) {
  impl_->max_concurrency = static_cast<size_t>(std::max(1, max_concurrency));
  impl_->apply_limits();
  if (impl_->idle.size() > impl_->max_concurrency) impl_->idle.resize(impl_->max_concurrency);
}

void Client::set_egress_policy(core::EgressPolicy policy) { impl_->egress = std::move(policy); }

void Client::set_wake_fd(int fd) {
  Impl& im = *impl_;
  if (im.wake_fd >= 0) epoll_ctl(im.epoll_fd, EPOLL_CTL_DEL, im.wake_fd, nullptr);
  im.wake_fd = -1;
  if (fd < 0) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (epoll_ctl(im.epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0)
    throw std::runtime_error(std::string("epoll_ctl(wake fd) failed: ") + std::strerror(errno));
  im.wake_fd = fd;
}

void Client::submit(Request request) { impl_->waiting.push_back(std::move(request)); }

size_t Client::in_flight() const { return impl_->active.size(); }

size_t Client::queued() const { return impl_->waiting.size(); }

std::vector<Response> Client::run(int timeout_ms) {
  using Clock = Impl::Clock;
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  using std::chrono::milliseconds;
  Impl& im = *impl_;
  const auto deadline = Clock::now() + milliseconds(std::max(0, timeout_ms));

  std::vector<Response> out = std::move(im.ready);
  im.ready.clear();
  im.start_waiting(out);

  try {
    bool waited = false;  // timeout_ms <= 0 still takes one look at the ready sockets
    for (;;) {
      auto now = Clock::now();
      im.run_timer_if_due(now);
      im.collect(out);
      // Freed slots are refilled at the start of the next call, not here: the caller
      // must see these results first (a circuit they open takes the endpoint's queued
      // requests back before they are started).
      if (!out.empty()) break;
      if (im.active.empty()) break;  // nothing that could complete
      now = Clock::now();
      const long long remaining = duration_cast<milliseconds>(deadline - now).count();
      if (remaining <= 0 && waited) break;
      long long wait_ms = std::max(0LL, remaining);
      if (im.timer_armed) {
        // Rounded up, so that the timer is due when the wait ends.
        const long long timer_us = duration_cast<microseconds>(im.timer_due - now).count();
        const long long timer_ms = (timer_us + 999) / 1000;
        wait_ms = std::min(wait_ms, std::max(0LL, timer_ms));
      }
      waited = true;
      if (!im.wait_and_dispatch(static_cast<int>(std::min<long long>(wait_ms, INT_MAX)))) {
        im.collect(out);  // interrupted by a signal or the wake fd: the caller has work to do
        break;
      }
    }
  } catch (...) {
    // Responses already taken out of libcurl are returned by the next call, not lost.
    im.ready = std::move(out);
    throw;
  }
  return out;
}

void Client::abandon_all() {
  impl_->remove_all_active();
  impl_->waiting.clear();
  impl_->ready.clear();
}

}  // namespace pg_outbox::http
