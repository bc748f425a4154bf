// An eventfd as a wake-up between two threads: one signals it, the other waits on it (or
// has it watched with its other descriptors) and drains it. Non-blocking and close-on-exec;
// closed with the object.
#pragma once

namespace pg_outbox::http {

class EventFd {
 public:
  // Throws std::runtime_error if the eventfd cannot be created.
  EventFd();
  ~EventFd();
  EventFd(const EventFd&) = delete;
  EventFd& operator=(const EventFd&) = delete;

  int fd() const { return fd_; }

  // Makes it readable until the next drain().
  void signal() const;
  // Consumes every signal so far; one that comes later makes it readable again.
  void drain() const;
  // Returns once it is readable, or after timeout_ms; consumes nothing.
  void wait(int timeout_ms) const;

 private:
  int fd_ = -1;
};

}  // namespace pg_outbox::http
