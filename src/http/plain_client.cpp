// The plain HTTP/1.1 client; see plain_client.hpp for what it serves and why.
//
// A request lives in an Exchange, carried by one Connection at a time (busy_); a connection
// whose response ended cleanly and may carry another goes to idle_ and stays in epoll, so
// that a server closing it is noticed and the connection dropped before anyone reuses it.
// Every socket is read and written without blocking; the Client's epoll wait calls on_ready.
#include "http/plain_client.hpp"

#include "core/http_request_head.hpp"
#include "core/http_response_parser.hpp"
#include "http/egress_check.hpp"
#include "http/response_capture.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "core/cpp_only.hpp"

namespace pg_outbox::http {
namespace {

using Clock = PlainClient::Clock;

// One read takes in at most this much; a response is usually far smaller.
constexpr std::size_t kReadBufferSize = 64 * 1024;
// TCP keep-alive probes on connections idle this long, then this often (libcurl's
// CURLOPT_TCP_KEEPALIVE defaults).
constexpr int kKeepAliveIdleS = 60;
constexpr int kKeepAliveIntervalS = 60;

long long elapsed_ms(Clock::time_point since, Clock::time_point now) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - since).count();
}

socklen_t socket_address(const core::PlainHttpTarget& t, sockaddr_storage& out) {
  std::memset(&out, 0, sizeof out);
  if (t.family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&out);
    a->sin_family = AF_INET;
    a->sin_port = htons(t.port);
    std::memcpy(&a->sin_addr, t.address, 4);
    return sizeof(sockaddr_in);
  }
  auto* a = reinterpret_cast<sockaddr_in6*>(&out);
  a->sin6_family = AF_INET6;
  a->sin6_port = htons(t.port);
  std::memcpy(&a->sin6_addr, t.address, 16);
  return sizeof(sockaddr_in6);
}

}  // namespace

struct PlainClient::Exchange {
  Request request;
  Response response;
  core::PlainHttpTarget target;
  std::string head;
  std::size_t sent = 0;      // bytes of head and body written
  std::size_t received = 0;  // bytes of response read
  Clock::time_point started;
  Clock::time_point deadline;
  Clock::time_point connect_deadline;
  bool retried = false;  // once on a fresh connection (see retry_on_fresh_connection)

  std::size_t size() const { return head.size() + request.body.size(); }
  bool all_sent() const { return sent == size(); }
  std::string connect_error(const std::string& why, Clock::time_point now) const {
    return "Failed to connect to " + target.address_text + " port " + std::to_string(target.port) + " after " +
           std::to_string(elapsed_ms(started, now)) + " ms: " + why;
  }
};

struct PlainClient::Connection {
  int fd = -1;
  int family = 0;
  unsigned char address[16] = {};
  uint16_t port = 0;
  bool connecting = false;
  bool reused = false;    // carried a request before the one it carries now
  uint32_t watching = 0;  // the events it is watched for
  std::size_t slot = 0;   // its index in busy_ while it carries a request
  core::HttpResponseParser parser{kBodyHeadLimit, kRetryAfterLimit};
  std::unique_ptr<Exchange> exchange;  // null while idle

  bool leads_to(const core::PlainHttpTarget& t) const {
    return family == t.family && port == t.port && std::memcmp(address, t.address, sizeof address) == 0;
  }
};

PlainClient::PlainClient(SocketWatch& watch, const core::EgressPolicy* egress)
    : watch_(watch), egress_(egress), buffer_(kReadBufferSize) {}

PlainClient::~PlainClient() {
  abandon_all();
  trim_idle(0);
}

void PlainClient::set_max_connections(std::size_t n) {
  max_connections_ = std::max<std::size_t>(1, n);
  trim_idle(max_connections_ > busy_.size() ? max_connections_ - busy_.size() : 0);
}

void PlainClient::start(Request request, Response response, const core::PlainHttpTarget& target) {
  auto x = std::make_unique<Exchange>();
  x->request = std::move(request);
  x->response = std::move(response);
  x->target = target;
  x->started = Clock::now();
  const long timeout_ms = std::max(1L, x->request.timeout_ms);
  x->deadline = x->started + std::chrono::milliseconds(timeout_ms);
  x->connect_deadline = x->started + std::chrono::milliseconds(std::min(timeout_ms, kMaxConnectTimeoutMs));

  // The address is the URL's own, so one check covers a new connection and a reused one
  // (which may predate a stricter policy).
  EgressCheck egress;
  egress.set_policy(egress_);
  if (!egress.allows_all()) {
    sockaddr_storage address;
    socket_address(target, address);
    if (!egress.allows(x->request.url, reinterpret_cast<const sockaddr*>(&address))) {
      egress.report_refusal(x->response);
      if (!x->response.transport_error) {  // the check itself could not be made
        x->response.transport_error = true;
        x->response.error = "the egress policy could not be checked";
      }
      finish(std::move(x));
      return;
    }
  }
  x->head = core::http_post_head(target.target, target.host_header, x->request.headers, x->request.body.size());

  Connection* c = nullptr;
  for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {
    if ((*it)->leads_to(target)) {
      c = *it;
      idle_.erase(std::next(it).base());
      break;
    }
  }
  if (c == nullptr) {
    c = open_connection(*x);
    if (c == nullptr) {
      finish(std::move(x));
      return;
    }
  }
  attach(*c, std::move(x));
}

void PlainClient::attach(Connection& c, std::unique_ptr<Exchange> x) {
  c.exchange = std::move(x);
  c.parser.reset();
  c.slot = busy_.size();
  busy_.push_back(&c);
  if (!c.connecting) send(c);
}

PlainClient::Connection* PlainClient::open_connection(Exchange& x) {
  // Room for it: the oldest idle connection goes first (e.g. to an endpoint no longer used).
  if (busy_.size() + idle_.size() >= max_connections_ && !idle_.empty()) close(*idle_.front());

  const core::PlainHttpTarget& t = x.target;
  const int fd = socket(t.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    x.response.transport_error = true;
    x.response.error = x.connect_error(std::string("cannot open a socket: ") + std::strerror(errno), Clock::now());
    return nullptr;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &kKeepAliveIdleS, sizeof kKeepAliveIdleS);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &kKeepAliveIntervalS, sizeof kKeepAliveIntervalS);

  sockaddr_storage address;
  const socklen_t size = socket_address(t, address);
  int err = 0;
  bool connecting = false;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), size) != 0) {
    connecting = errno == EINPROGRESS;
    if (!connecting) err = errno;
  }
  const uint32_t events = EPOLLIN | (connecting ? EPOLLOUT : 0u);
  std::string error;
  if (err != 0)
    error = x.connect_error(std::strerror(err), Clock::now());
  else if (const int werr = watch_.watch_other(fd, events, this))
    error = std::string("cannot watch the socket: ") + std::strerror(werr);
  if (!error.empty()) {
    watch_.unwatch_other(fd);
    ::close(fd);
    x.response.transport_error = true;
    x.response.error = std::move(error);
    return nullptr;
  }

  auto c = std::make_unique<Connection>();
  c->fd = fd;
  c->family = t.family;
  std::memcpy(c->address, t.address, sizeof c->address);
  c->port = t.port;
  c->connecting = connecting;
  c->watching = events;
  const auto i = static_cast<std::size_t>(fd);
  if (i >= by_fd_.size()) by_fd_.resize(std::max<std::size_t>(i + 1, 2 * by_fd_.size()));
  by_fd_[i] = std::move(c);
  return by_fd_[i].get();
}

void PlainClient::on_ready(int fd, uint32_t events) {
  Connection* c = static_cast<std::size_t>(fd) < by_fd_.size() ? by_fd_[static_cast<std::size_t>(fd)].get() : nullptr;
  if (c == nullptr) return;
  if (!c->exchange) {
    close(*c);  // idle: the server closed it, or sent what nobody asked for
    return;
  }
  if (c->connecting) {
    if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) connected(*c);
    return;
  }
  if ((events & EPOLLOUT) && !c->exchange->all_sent() && !send(*c)) return;
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) receive(*c);
}

void PlainClient::connected(Connection& c) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err != 0) {
    fail(c, c.exchange->connect_error(std::strerror(err), Clock::now()));
    return;
  }
  // SO_ERROR is 0 while the attempt is still under way too: an event left over from an
  // earlier socket of the same number must not count as the connection being up.
  sockaddr_storage peer;
  socklen_t peer_len = sizeof peer;
  if (getpeername(c.fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return;
  c.connecting = false;
  send(c);
}

bool PlainClient::send(Connection& c) {
  Exchange& x = *c.exchange;
  while (!x.all_sent()) {
    iovec parts[2];
    int n_parts = 0;
    if (x.sent < x.head.size()) parts[n_parts++] = {x.head.data() + x.sent, x.head.size() - x.sent};
    const std::size_t body_sent = x.sent > x.head.size() ? x.sent - x.head.size() : 0;
    if (body_sent < x.request.body.size())
      parts[n_parts++] = {x.request.body.data() + body_sent, x.request.body.size() - body_sent};
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = static_cast<std::size_t>(n_parts);
    const ssize_t n = sendmsg(c.fd, &message, MSG_NOSIGNAL);
    if (n >= 0) {
      x.sent += static_cast<std::size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return watch(c, EPOLLIN | EPOLLOUT);
    const int err = errno;
    if (!retry_on_fresh_connection(c)) fail(c, std::string("Send failure: ") + std::strerror(err));
    return false;
  }
  return watch(c, EPOLLIN);
}

bool PlainClient::watch(Connection& c, uint32_t events) {
  if (c.watching == events) return true;
  if (const int err = watch_.watch_other(c.fd, events, this)) {
    fail(c, std::string("cannot watch the socket: ") + std::strerror(err));
    return false;
  }
  c.watching = events;
  return true;
}

void PlainClient::receive(Connection& c) {
  for (;;) {
    const ssize_t n = recv(c.fd, buffer_.data(), buffer_.size(), 0);
    if (n > 0) {
      c.exchange->received += static_cast<std::size_t>(n);
      const std::size_t used = c.parser.feed(std::string_view(buffer_.data(), static_cast<std::size_t>(n)));
      if (c.parser.done()) {
        complete(c, used == static_cast<std::size_t>(n));  // bytes past the response: not reusable
        return;
      }
      if (c.parser.failed()) {
        fail(c, c.parser.error());
        return;
      }
      // A short read took in everything there was: epoll says when more comes.
      if (static_cast<std::size_t>(n) < buffer_.size()) return;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    const int err = n < 0 ? errno : 0;
    if (err == 0) {
      c.parser.eof();
      if (c.parser.done()) {
        complete(c, false);
        return;
      }
    }
    if (retry_on_fresh_connection(c)) return;
    fail(c, err == 0 ? c.parser.error() : std::string("Recv failure: ") + std::strerror(err));
    return;
  }
}

bool PlainClient::retry_on_fresh_connection(Connection& c) {
  Exchange& x = *c.exchange;
  if (!c.reused || x.retried || c.parser.started()) return false;
  std::unique_ptr<Exchange> again = std::move(c.exchange);
  unbusy(c);
  close(c);
  again->retried = true;
  again->sent = 0;
  again->received = 0;
  Connection* fresh = open_connection(*again);
  if (fresh == nullptr) {
    finish(std::move(again));
    return true;
  }
  attach(*fresh, std::move(again));
  return true;
}

void PlainClient::complete(Connection& c, bool reusable) {
  Response& r = c.exchange->response;
  r.body_head = c.parser.body_head();
  r.retry_after = c.parser.retry_after();
  r.delivery_abort = c.parser.delivery_abort();
  // An answer that came before the whole request went out ends the connection too. (Once
  // all of it went out, send() left the connection watched for reading only.)
  end(c, reusable && c.parser.keep_alive() && c.exchange->all_sent());
}

void PlainClient::fail(Connection& c, std::string error) {
  c.exchange->response.transport_error = true;
  c.exchange->response.error = std::move(error);
  end(c, false);
}

void PlainClient::end(Connection& c, bool keep_connection) {
  std::unique_ptr<Exchange> x = std::move(c.exchange);
  x->response.status = c.parser.status();
  x->response.total_ms = std::chrono::duration<double, std::milli>(Clock::now() - x->started).count();
  unbusy(c);
  if (keep_connection) {
    c.reused = true;
    idle_.push_back(&c);
  } else {
    close(c);
  }
  finish(std::move(x));
}

void PlainClient::expire(Clock::time_point now) {
  for (std::size_t i = 0; i < busy_.size();) {
    Connection& c = *busy_[i];
    const Exchange& x = *c.exchange;
    if (c.connecting && now >= x.connect_deadline) {
      fail(c, "Connection timed out after " + std::to_string(elapsed_ms(x.started, now)) + " milliseconds");
    } else if (now >= x.deadline) {
      fail(c, "Operation timed out after " + std::to_string(elapsed_ms(x.started, now)) + " milliseconds with " +
                  std::to_string(x.received) + " bytes received");
    } else {
      ++i;  // fail() moved the last one into slot i: look at it next
    }
  }
}

std::optional<Clock::time_point> PlainClient::next_deadline() const {
  std::optional<Clock::time_point> next;
  for (const Connection* c : busy_) {
    const Exchange& x = *c->exchange;
    const auto due = c->connecting ? std::min(x.connect_deadline, x.deadline) : x.deadline;
    if (!next || due < *next) next = due;
  }
  return next;
}

void PlainClient::take_finished(std::vector<Response>& out) {
  for (Response& r : finished_) out.push_back(std::move(r));
  finished_.clear();
}

void PlainClient::abandon_all() {
  while (!busy_.empty()) {
    Connection& c = *busy_.back();
    c.exchange.reset();
    unbusy(c);
    close(c);
  }
  finished_.clear();
}

void PlainClient::finish(std::unique_ptr<Exchange> x) { finished_.push_back(std::move(x->response)); }

void PlainClient::unbusy(Connection& c) {
  const std::size_t slot = c.slot;
  if (slot >= busy_.size() || busy_[slot] != &c) return;
  busy_[slot] = busy_.back();
  busy_[slot]->slot = slot;
  busy_.pop_back();
}

void PlainClient::close(Connection& c) {
  const int fd = c.fd;
  const auto at = std::find(idle_.begin(), idle_.end(), &c);
  if (at != idle_.end()) idle_.erase(at);
  watch_.unwatch_other(fd);
  ::close(fd);
  by_fd_[static_cast<std::size_t>(fd)].reset();  // c is gone
}

void PlainClient::trim_idle(std::size_t keep) {
  while (idle_.size() > keep) close(*idle_.front());
}

}  // namespace pg_outbox::http
