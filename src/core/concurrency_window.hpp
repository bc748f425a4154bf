// An endpoint's adaptive limit on requests in flight, the way TCP sizes its congestion
// window: additive increase while the receiver answers promptly, multiplicative
// decrease on a sign of overload. A small receiver (a few threads, a listen backlog of
// 5) is never hit with max_concurrency connections at once; a fast one grows to its cap
// within a few round trips; a slow one stays where it is and leaves the other
// endpoints their connections.
#pragma once

namespace pg_outbox::core {

// What one response says about the receiver's load.
enum class LoadSignal {
  kPrompt,      // a 2xx within kPromptMs: room to grow
  kSlow,        // a 2xx that took longer: stay
  kOverloaded,  // a timeout, a connection error, 429 or 503: shrink
  kNeutral,     // any other answer (4xx, 500...): says nothing about load
};

constexpr double kPromptMs = 1000;
constexpr int kInitialWindow = 4;  // "a few connections" to begin with

// transport_error: no complete answer (connect refused, timeout, reset); refused_locally:
// the request never left (an egress rule), which says nothing about the receiver.
LoadSignal classify_load(bool transport_error, bool refused_locally, long status, double total_ms);

class ConcurrencyWindow {
 public:
  explicit ConcurrencyWindow(int cap);

  // The endpoint's configured cap (its concurrency option or the GUC); the window
  // follows a lower cap at once and may grow to a higher one.
  void set_cap(int cap);
  int cap() const { return cap_; }

  // Requests this endpoint may have in flight now: at least 1, at most the cap.
  int limit() const;

  // One response of this endpoint; window_full: the window was what limited the endpoint
  // when it came (as many in flight as allowed, or requests waiting). A prompt answer
  // grows the window only then: a trickle of one request at a time proves nothing
  // about a burst of 32. A
  // burst of failures of requests that were all in flight together halves the window
  // once, not once per request: after a decrease, the next decrease waits until as many
  // results as the window held have come back.
  void on_result(LoadSignal signal, bool window_full = true);

 private:
  int cap_;
  double window_;
  int results_before_next_decrease_ = 0;
};

}  // namespace pg_outbox::core
