#include "http/socket_watch.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/cpp_only.hpp"

namespace pg_outbox::http {

void socket_action(CURLM* multi, curl_socket_t s, int ev_bitmask) {
  int running = 0;
  const CURLMcode mrc = curl_multi_socket_action(multi, s, ev_bitmask, &running);
  if (mrc != CURLM_OK)
    throw std::runtime_error(std::string("curl_multi_socket_action failed: ") + curl_multi_strerror(mrc));
}

SocketWatch::SocketWatch() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) throw std::runtime_error(std::string("epoll_create1 failed: ") + std::strerror(errno));
}

SocketWatch::~SocketWatch() {
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

void SocketWatch::set_wake_fd(int fd) {
  if (wake_fd_ >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, wake_fd_, nullptr);
  wake_fd_ = -1;
  if (fd < 0) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0)
    throw std::runtime_error(std::string("epoll_ctl(wake fd) failed: ") + std::strerror(errno));
  wake_fd_ = fd;
}

void SocketWatch::size_for(std::size_t max_concurrency) {
  // One socket per transfer, two while a connection attempt races IPv6 against IPv4;
  // more would simply be returned by the next wait.
  events_.resize(std::min<std::size_t>(2 * max_concurrency + 8, 4096));
}

SocketWatch::SocketState& SocketWatch::state_of(curl_socket_t s) {
  const auto i = static_cast<std::size_t>(s);
  if (i >= sockets_.size()) sockets_.resize(std::max<std::size_t>(i + 1, 2 * sockets_.size()));
  return sockets_[i];
}

int SocketWatch::watch(curl_socket_t s, SocketState& st, uint32_t wanted_events) {
  epoll_event ev{};
  ev.events = wanted_events;
  ev.data.fd = s;
  int op = st.registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
  int rc = epoll_ctl(epoll_fd_, op, s, &ev);
  if (rc != 0 && (errno == ENOENT || errno == EEXIST)) {
    // Our bookkeeping and the kernel's disagree (a socket we did not see closed, its
    // number reused): trust the kernel.
    op = op == EPOLL_CTL_ADD ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    rc = epoll_ctl(epoll_fd_, op, s, &ev);
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

void SocketWatch::unwatch(curl_socket_t s, SocketState& st) {
  // May fail harmlessly (already closed, hence already out of the interest list).
  if (st.registered) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s, nullptr);
  st.registered = false;
}

int SocketWatch::on_socket(CURL* easy, curl_socket_t s, int what, void* user, void*) {
  auto* self = static_cast<SocketWatch*>(user);
  if (s < 0) return 0;
  SocketState& st = self->state_of(s);
  if (what == CURL_POLL_REMOVE) {
    st.wanted = false;
    // Ours stay in epoll until closed or reported ready while unwanted (see wait_and_dispatch).
    if (!st.ours) self->unwatch(s, st);
    return 0;
  }
  st.wanted = true;
  const uint32_t wanted_events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u);
  // Only for our sockets is "registered" known to still be true (see on_close_socket).
  if (st.ours && st.registered && st.events == wanted_events) return 0;
  if (const int err = self->watch(s, st, wanted_events)) self->unwatchable_.emplace_back(easy, err);
  return 0;
}

int SocketWatch::watch_other(int fd, uint32_t events, Listener* listener) {
  SocketState& st = state_of(fd);
  if (st.other != nullptr && st.registered && st.events == events) return 0;
  st.ours = false;
  st.wanted = false;
  st.other = listener;
  return watch(fd, st, events);
}

void SocketWatch::unwatch_other(int fd) {
  if (fd < 0 || static_cast<std::size_t>(fd) >= sockets_.size()) return;
  SocketState& st = sockets_[static_cast<std::size_t>(fd)];
  unwatch(fd, st);
  st = SocketState{};
}

curl_socket_t SocketWatch::open(const curl_sockaddr& address) {
  const int s = socket(address.family, address.socktype | SOCK_CLOEXEC, address.protocol);
  if (s < 0) return CURL_SOCKET_BAD;
  SocketState& st = state_of(s);
  st = SocketState{};  // a new socket: nothing registered under this number
  st.ours = true;
  return s;
}

int SocketWatch::on_close_socket(void* user, curl_socket_t s) {
  auto* self = static_cast<SocketWatch*>(user);
  if (s >= 0 && static_cast<std::size_t>(s) < self->sockets_.size()) {
    SocketState& st = self->sockets_[static_cast<std::size_t>(s)];
    self->unwatch(s, st);
    st = SocketState{};
  }
  return close(s);
}

bool SocketWatch::wait_and_dispatch(CURLM* multi, int wait_ms) {
  const int n = epoll_wait(epoll_fd_, events_.data(), static_cast<int>(events_.size()), wait_ms);
  if (n < 0) {
    if (errno == EINTR) return false;
    throw std::runtime_error(std::string("epoll_wait failed: ") + std::strerror(errno));
  }
  bool woken = false;
  for (int i = 0; i < n; ++i) {
    const curl_socket_t s = events_[i].data.fd;
    const uint32_t e = events_[i].events;
    if (s == wake_fd_) {
      woken = true;  // read by the owner, not here: it knows what the wake was for
      continue;
    }
    SocketState& st = state_of(s);
    if (st.other != nullptr) {
      st.other->on_ready(s, e);
      continue;
    }
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
    socket_action(multi, s, mask);
  }
  return !woken;
}

}  // namespace pg_outbox::http
