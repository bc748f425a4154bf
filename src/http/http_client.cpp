// libcurl multi-interface client; see http_client.hpp for the contract.
//
// Shape: requests wait in a FIFO queue until a slot is free (in flight < max_concurrency); a
// started request lives in a Transfer (transfer.hpp), which owns an easy handle and the
// Response being filled. Finished Transfers go back to an idle pool and their easy handles
// are reused; connections live in the multi handle's connection cache, so they are kept
// alive and reused across requests no matter which easy handle runs the next transfer.
// Requests to http:// URLs with an IP literal for host go to the plain client instead
// (plain_client.hpp), within the same max_concurrency and the same epoll wait.
//
// Event loop: libcurl is driven with curl_multi_socket_action. It tells us which sockets to
// watch, and a SocketWatch (socket_watch.hpp) keeps them in an epoll instance; it tells us
// when it next needs to run for timeouts (CURLMOPT_TIMERFUNCTION), and we keep that
// deadline. Finished transfers are read with curl_multi_info_read.
#include "http/http_client.hpp"

#include "core/clock.hpp"
#include "core/plain_http_url.hpp"
#include "http/plain_client.hpp"
#include "http/socket_watch.hpp"
#include "http/transfer.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/cpp_only.hpp"

namespace pg_outbox::http {
namespace {

struct MultiDeleter {
  void operator()(CURLM* multi) const noexcept { curl_multi_cleanup(multi); }
};
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

// How long ago the last epoll wait may have ended for its view of idle connections to be
// trusted (see Client::run).
constexpr std::chrono::milliseconds kStaleWait{1};

// The response of a request that starts now, whichever client runs it.
Response response_for(const Request& request) {
  Response r;
  r.tag = request.tag;
  r.group = request.group;
  r.started_ms = core::SystemClock().now_ms();
  return r;
}

Response failed(const Request& request, std::string error) {
  Response r = response_for(request);
  r.transport_error = true;
  r.error = std::move(error);
  return r;
}

}  // namespace

struct Client::Impl {
  using Clock = std::chrono::steady_clock;

  // Declared first, so destroyed last: the multi handle and every Transfer close their
  // sockets through it.
  SocketWatch sockets;
  MultiPtr multi;
  bool timer_armed = false;  // libcurl wants curl_multi_socket_action(TIMEOUT) at timer_due
  Clock::time_point timer_due;
  Clock::time_point last_wait;  // when the last epoll wait ended
  // Every Transfer's egress check points at it; replaced only between run() calls.
  core::EgressPolicy egress;
  // Declared after what it points at, so destroyed before.
  PlainClient plain{sockets, &egress};
  // The last URL looked at and whether the plain client serves it: consecutive requests
  // usually go to the same endpoint.
  std::string last_url;
  std::optional<core::PlainHttpTarget> last_target;

  size_t max_concurrency = 1;
  std::deque<Request> waiting;                    // submitted, not started
  std::vector<std::unique_ptr<Transfer>> active;  // added to the multi handle; see Transfer::slot
  std::vector<std::unique_ptr<Transfer>> idle;    // finished, handle reusable
  std::vector<Response> ready;                    // finished, not returned yet (run() threw after collecting)

  ~Impl() {
    remove_all_active();  // unregisters their sockets: the watch's epoll must still be open
    idle.clear();
    multi.reset();  // closes the cached connections
  }

  void init_multi() {
    multi.reset(curl_multi_init());
    if (!multi) throw std::runtime_error("curl_multi_init failed");
    CURLM* m = multi.get();
    if (curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, &SocketWatch::on_socket) != CURLM_OK ||
        curl_multi_setopt(m, CURLMOPT_SOCKETDATA, static_cast<void*>(&sockets)) != CURLM_OK ||
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
    sockets.size_for(max_concurrency);
    plain.set_max_connections(max_concurrency);
  }

  size_t in_flight() const { return active.size() + plain.in_flight(); }

  const std::optional<core::PlainHttpTarget>& plain_target(const std::string& url) {
    if (url != last_url) {
      last_target = core::plain_http_target(url);
      last_url = url;
    }
    return last_target;
  }

  // CURLMOPT_TIMERFUNCTION: -1 removes the timer, 0 means "as soon as possible".
  static int on_timer(CURLM*, long timeout_ms, void* user) {
    auto* self = static_cast<Impl*>(user);
    self->timer_armed = timeout_ms >= 0;
    if (self->timer_armed) self->timer_due = Clock::now() + std::chrono::milliseconds(timeout_ms);
    return 0;
  }

  // Runs libcurl's timeouts if they are due (this also starts newly added transfers, which
  // libcurl schedules with a zero timeout). The timer is re-armed by the callback; running it
  // early is harmless (libcurl then calls the callback again with what is left).
  void run_timer_if_due(Clock::time_point now) {
    if (!timer_armed || timer_due > now) return;
    timer_armed = false;
    socket_action(multi.get(), CURL_SOCKET_TIMEOUT, 0);
  }

  std::unique_ptr<Transfer> take_transfer() {
    if (!idle.empty()) {
      auto t = std::move(idle.back());
      idle.pop_back();
      return t;
    }
    return Transfer::create(&sockets, &egress);
  }

  void recycle(std::unique_ptr<Transfer> t) {
    t->clear();
    if (idle.size() < max_concurrency) idle.push_back(std::move(t));
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
    while (!waiting.empty() && in_flight() < max_concurrency) {
      Request request = std::move(waiting.front());
      waiting.pop_front();
      if (const auto& target = plain_target(request.url)) {
        Response response = response_for(request);
        plain.start(std::move(request), std::move(response), *target);
        ++started;
        continue;
      }
      auto t = take_transfer();
      if (!t) {
        out.push_back(failed(request, "cannot create a curl handle"));
        continue;
      }
      t->response = response_for(request);
      t->request = std::move(request);
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
    plain.take_finished(out);
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
    const auto list = sockets.take_unwatchable();
    if (list.empty()) return;
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
    sockets.forget_unwatchable();  // what removing those handles may have added
  }

  void remove_all_active() {
    plain.abandon_all();
    for (auto& t : active) curl_multi_remove_handle(multi.get(), t->easy.get());
    active.clear();  // frees the easy handles, closing their connections
    sockets.forget_unwatchable();
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

void Client::set_wake_fd(int fd) { impl_->sockets.set_wake_fd(fd); }

void Client::submit(Request request) { impl_->waiting.push_back(std::move(request)); }

size_t Client::in_flight() const { return impl_->in_flight(); }

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

  try {
    // With nothing in flight the caller waits elsewhere, so an idle connection that the
    // receiver closed meanwhile has not been seen yet: one look now, before a request
    // would go out on it (under load the last wait was a moment ago).
    if (im.plain.idle() > 0 && Clock::now() - im.last_wait > kStaleWait) {
      im.sockets.wait_and_dispatch(im.multi.get(), 0);
      im.last_wait = Clock::now();
    }
    im.start_waiting(out);
    bool waited = false;  // timeout_ms <= 0 still takes one look at the ready sockets
    for (;;) {
      auto now = Clock::now();
      im.run_timer_if_due(now);
      im.plain.expire(now);
      im.collect(out);
      // Freed slots are refilled at the start of the next call, not here: the caller
      // must see these results first (a circuit they open takes the endpoint's queued
      // requests back before they are started).
      if (!out.empty()) break;
      if (im.in_flight() == 0) break;  // nothing that could complete
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
      if (const auto due = im.plain.next_deadline()) {
        const long long due_us = duration_cast<microseconds>(*due - now).count();
        wait_ms = std::min(wait_ms, std::max(0LL, (due_us + 999) / 1000));
      }
      waited = true;
      const bool waited_out =
          im.sockets.wait_and_dispatch(im.multi.get(), static_cast<int>(std::min<long long>(wait_ms, INT_MAX)));
      im.last_wait = Clock::now();
      if (!waited_out) {
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
