#include "http/event_fd.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/cpp_only.hpp"

namespace pg_outbox::http {

EventFd::EventFd() {
  fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error(std::string("eventfd failed: ") + std::strerror(errno));
}

EventFd::~EventFd() { close(fd_); }

void EventFd::signal() const {
  const uint64_t one = 1;
  // EAGAIN: the counter is full, the fd is readable anyway.
  while (write(fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void EventFd::drain() const {
  uint64_t count = 0;
  while (read(fd_, &count, sizeof count) < 0 && errno == EINTR) {
  }
}

void EventFd::wait(int timeout_ms) const {
  pollfd fd{fd_, POLLIN, 0};
  (void)poll(&fd, 1, timeout_ms);  // a signal ends the wait early, which the caller takes as a timeout
}

}  // namespace pg_outbox::http
