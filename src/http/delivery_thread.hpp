// The delivery thread: libcurl runs here, on its own thread, so that the worker's SQL (the
// next claim, the settle of the last results) overlaps the HTTP of the current deliveries
// and the two use both cores.
//
// Pure C++: no PostgreSQL header here or in the .cpp, and the thread never calls PostgreSQL
// (docs/architecture.md, Threads). The worker (the main thread) and the delivery thread
// meet only in this class:
// - inbound, the requests not yet started (a GroupQueue: FIFO per endpoint, round robin
//   between endpoints, each endpoint within its adaptive window), guarded by a mutex. The
//   thread takes a request only when it may start at once, so a request still queued has
//   not started, and the worker can take it back synchronously (cancel_queued);
// - outbound, the finished responses, guarded by the same mutex, announced on an eventfd
//   (results_fd) that the worker waits on next to its latch.
// Both are bounded by what the worker submits: it submits only while fewer than its claim
// target are outstanding, and every submitted request comes back exactly once, as a
// response or as a tag cancel_queued returned, unless abandon_all dropped it.
//
// Neither side holds the mutex while it waits or runs a transfer: the thread holds it to move
// requests and responses, the worker to submit, cancel and take results.
//
// A failed response pauses its group (Request::group, the endpoint): the thread starts no
// more requests of that group until the worker has seen the response and called resume().
// The worker's circuit breaker decides on what it has seen; without the pause, a refused
// connection would free its slot at once and the thread would start the endpoint's next
// queued request, and the next, spending attempts faster than the worker can open the
// circuit. Successful responses pause nothing: a healthy endpoint's slots refill at once.
#pragma once

#include "core/egress_policy.hpp"
#include "http/event_fd.hpp"
#include "http/group_queue.hpp"
#include "http/http_client.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace pg_outbox::http {

class DeliveryThread {
 public:
  // Creates the client and starts the thread with every signal blocked (its own and the
  // threads libcurl starts for name lookups inherit that mask), so that the process's
  // signal handlers only ever run on the thread that created it. Throws
  // std::runtime_error if libcurl, the eventfds or the thread cannot be set up.
  explicit DeliveryThread(int max_concurrency);
  // Stops and joins the thread (see stop()).
  ~DeliveryThread();
  DeliveryThread(const DeliveryThread&) = delete;
  DeliveryThread& operator=(const DeliveryThread&) = delete;

  // Ends the thread and waits for it: transfers in flight are abandoned (their connections
  // closed), nothing more is sent. Idempotent; called at process exit (before_shmem_exit)
  // so that the thread never outlives the process's shared memory. Takes at most a few
  // milliseconds: the thread is woken and never blocks with the mutex held.
  void stop();

  // Readable while responses (or a failure) wait to be taken: register it in the waiting
  // loop next to the latch. Only take_responses reads it.
  int results_fd() const { return results_.fd(); }

  // Applied by the thread before it starts its next request.
  void set_max_concurrency(int max_concurrency);
  void set_egress_policy(core::EgressPolicy policy);

  void submit(std::vector<Request> requests);

  // The worker has recorded every response it took (and taken back the requests of the
  // circuits those opened): a group paused only by failures it has taken may start
  // requests again. A failure still waiting in the results keeps its group paused.
  void resume();

  // Takes back the requests not yet started whose tag the predicate selects and returns
  // their tags; a started one is never taken back (its response comes). The predicate runs
  // on the calling thread, under the mutex.
  std::vector<uint64_t> cancel_queued(const std::function<bool(uint64_t tag)>& select);

  // The responses finished so far, at most max of them, oldest first; never waits. Throws
  // Failed if the thread has failed (libcurl's multi handle broke, out of
  // memory): the requests it held are lost to this process, so the caller must not go on
  // as if they were still in flight.
  struct Failed : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  std::vector<Response> take_responses(size_t max);

  // Forgets every request and response: queued ones are dropped, transfers in flight are
  // abandoned by the thread before it starts anything submitted after this call, and no
  // response of a request submitted before it is ever returned.
  void abandon_all();

 private:
  void loop() noexcept;
  // Returns false once stopped; wait_ms: how long the thread may wait before the next
  // exchange (shorter when a rate-limited endpoint may start its next request sooner).
  bool exchange(std::vector<Response>& finished, int& wait_ms);

  // The settings the worker set, applied by the thread before it starts its next request.
  struct Settings {
    int max_concurrency = 1;
    core::EgressPolicy egress;
    bool changed = false;  // not yet applied
  };

  // Owned by the thread between start and join (configured by the creator before).
  Client client_;
  EventFd wake_;     // the worker wakes the thread (requests, settings, stop)
  EventFd results_;  // the thread wakes the worker (responses, failure)

  std::mutex mutex_;  // guards everything below
  GroupQueue queue_;  // requests not yet started; in-flight counts, windows and pauses per group
  std::vector<Response> done_;
  std::vector<std::string> taken_failures_;  // groups of failures taken since the last resume()
  bool stop_ = false;
  bool abandon_ = false;
  Settings settings_;
  std::string failure_;  // why the thread ended early, empty while it runs

  std::thread thread_;  // last: started once everything above exists
};

}  // namespace pg_outbox::http
