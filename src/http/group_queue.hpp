// The requests waiting to start, per group (the endpoint), and what each group may have
// in flight: the delivery thread's scheduling, apart from its threading so that it can
// be tested alone. Not thread-safe: the delivery thread guards it with its mutex.
//
// - Within a group, requests start in the order they were pushed.
// - Between groups, round robin: a group with a thousand requests waiting takes one
//   free connection in turn with a group that has one, never all of them.
// - A group starts no more than its window allows (core::ConcurrencyWindow: a few at
//   first, more while its receiver answers promptly, fewer on overload, never above the
//   request's `concurrency`).
// - A group with a failure the worker has not yet seen is paused (see
//   delivery_thread.hpp): its breaker decides before the next request starts.
// - A group with a rate limit of r per second starts one request at most every 1/r s,
//   2% slower, evenly spaced: never a burst, and never more than r in any second at
//   the receiver, whatever the network's jitter (up to 1/(50 r) s) does to arrival times.
#pragma once

#include "core/concurrency_window.hpp"
#include "http/http_client.hpp"

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace pg_outbox::http {

// What does not pause its group: a 2xx answer. Anything else may be what opens the
// circuit, which is the worker's to decide first.
bool pauses_nothing(const Response& response);

class GroupQueue {
 public:
  void push(Request request);

  // Removes the waiting requests whose tag the predicate selects; returns their tags.
  std::vector<uint64_t> remove_if(const std::function<bool(uint64_t tag)>& select);

  // The next request that may start at now_us (a steady clock, microseconds), counted in
  // flight; nullopt when every waiting request's group is paused, at its window, or
  // waiting for its rate limit.
  std::optional<Request> next(int64_t now_us);

  // When a group held back only by its rate limit may start its next request, or -1
  // when none is: the thread's wait ends then.
  int64_t next_start_us() const;

  // A request of this group has finished: one fewer in flight, the window adapts, and a
  // failure (anything but a 2xx) pauses the group until resume().
  void finished(const Response& response);

  // The worker has seen one failure of this group.
  void resume(const std::string& group);

  // Everything waiting dropped, nothing in flight any more, no pause; the windows stay
  // (what a receiver can take does not change when the worker abandons its requests).
  void clear();

  size_t waiting() const { return waiting_; }
  int limit_of(const std::string& group) const;      // the group's window now (tests)
  int in_flight_of(const std::string& group) const;  // (tests)

 private:
  struct Group {
    std::deque<Request> waiting;
    std::optional<core::ConcurrencyWindow> window;  // set by the group's first request
    int in_flight = 0;
    int paused = 0;  // failures the worker has not seen yet
    bool in_rotation = false;
    int rate_limit = 0;         // starts per second; 0: none
    int64_t not_before_us = 0;  // the rate limit's next start
  };
  std::unordered_map<std::string, Group> groups_;
  std::deque<std::string> rotation_;  // groups with requests waiting, in turn
  size_t waiting_ = 0;
};

}  // namespace pg_outbox::http
