// The time the worker's decisions are made at. Every decision of core/ takes the time
// as an argument (a plain int64_t of unix milliseconds) and never reads a clock itself;
// the worker reads its Clock once per step and passes the value on. Production uses
// SystemClock; tests drive a ManualClock, so that a test of "after 10 s" takes no time
// and is never flaky.
//
// Wall-clock time (unix milliseconds), not a monotonic clock: the deadlines it is
// compared with are partly stored in the database as timestamps (a breaker's
// open_until, a message's next attempt) and must survive a restart of the worker.
#pragma once

#include <chrono>
#include <cstdint>

namespace pg_outbox::core {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since the unix epoch.
  virtual int64_t now_ms() const = 0;
};

// std::chrono::system_clock, in unix milliseconds.
class SystemClock final : public Clock {
 public:
  int64_t now_ms() const override {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
  }
};

// A clock that moves only when told to. Not thread-safe: for single-threaded tests.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_ms = 0) : now_ms_(start_ms) {}
  int64_t now_ms() const override { return now_ms_; }
  void set(int64_t now_ms) { now_ms_ = now_ms; }
  // delta_ms may be negative: the wall clock can be set back.
  void advance(int64_t delta_ms) { now_ms_ += delta_ms; }

 private:
  int64_t now_ms_;
};

}  // namespace pg_outbox::core
