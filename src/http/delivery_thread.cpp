// The delivery thread; see delivery_thread.hpp for the contract.
//
// The thread's loop: exchange (under the mutex: hand over finished responses, take new
// requests for the free slots, apply settings), then drive libcurl until a response is
// ready or the worker wakes the thread, or, with nothing in flight, wait for the wake.
// The wake is read before the exchange, so a wake that comes after it is never lost: it
// cuts the next wait short instead.
#include "http/delivery_thread.hpp"

#include "core/request_headers.hpp"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/cpp_only.hpp"

namespace pg_outbox::http {
namespace {

// Longest the idle thread sleeps without a wake (every wake is also written to the fd,
// so this bounds nothing that matters; it only keeps the thread from sleeping for ever).
constexpr int kIdleWaitMs = 1000;
// Longest one libcurl slice runs without a response or a wake.
constexpr int kRunSliceMs = 100;

// A request that waited into a later second is stamped for now (see Request::stamp).
void restamp_if_stale(Request& request) {
  if (!request.stamp) return;
  const int64_t now_s =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (now_s == request.stamp->stamped_s) return;
  core::restamp_request_headers(request.headers, now_s, request.stamp->webhook_id, request.stamp->keys, request.body);
  request.stamp->stamped_s = now_s;
}

int64_t steady_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

DeliveryThread::DeliveryThread(int max_concurrency) : client_(max_concurrency) {
  settings_.max_concurrency = std::max(1, max_concurrency);
  try {
    client_.set_wake_fd(wake_.fd());
    // Every signal blocked while the thread is created: it inherits the mask. The
    // creator's mask is put back at once.
    sigset_t all;
    sigset_t previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    try {
      thread_ = std::thread([this] { loop(); });
    } catch (...) {
      pthread_sigmask(SIG_SETMASK, &previous, nullptr);
      throw;
    }
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  } catch (...) {
    client_.set_wake_fd(-1);
    throw;
  }
}

DeliveryThread::~DeliveryThread() {
  stop();
  client_.set_wake_fd(-1);
}

void DeliveryThread::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.signal();
  if (thread_.joinable()) thread_.join();
}

void DeliveryThread::set_max_concurrency(int max_concurrency) {
  std::lock_guard<std::mutex> lock(mutex_);
  settings_.max_concurrency = std::max(1, max_concurrency);
  settings_.changed = true;
}

void DeliveryThread::set_egress_policy(core::EgressPolicy policy) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    settings_.egress = std::move(policy);
    settings_.changed = true;
  }
  wake_.signal();
}

void DeliveryThread::submit(std::vector<Request> requests) {
  if (requests.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Request& request : requests) queue_.push(std::move(request));
  }
  wake_.signal();
}

void DeliveryThread::resume() {
  bool unpaused = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const std::string& group : taken_failures_) queue_.resume(group);
    unpaused = !taken_failures_.empty();
    taken_failures_.clear();
  }
  if (unpaused) wake_.signal();
}

std::vector<uint64_t> DeliveryThread::cancel_queued(const std::function<bool(uint64_t tag)>& select) {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.remove_if(select);
}

std::vector<Response> DeliveryThread::take_responses(size_t max) {
  results_.drain();  // before looking, so that a later announcement is kept
  std::vector<Response> taken;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.empty()) {
    results_.signal();  // stays readable: the failure is not consumed
    throw Failed("the delivery thread stopped: " + failure_);
  }
  if (done_.size() <= max) {
    taken.swap(done_);
  } else {
    taken.assign(std::make_move_iterator(done_.begin()), std::make_move_iterator(done_.begin() + max));
    done_.erase(done_.begin(), done_.begin() + max);
    results_.signal();  // the rest is still waiting
  }
  for (const Response& response : taken)
    if (!pauses_nothing(response)) taken_failures_.push_back(response.group);
  return taken;
}

void DeliveryThread::abandon_all() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.clear();
    done_.clear();
    taken_failures_.clear();
    abandon_ = true;
    // No announcement of what was just dropped may stay readable: the worker would be
    // woken for nothing, again and again. A failure stays announced.
    if (failure_.empty()) results_.drain();
  }
  wake_.signal();
}

bool DeliveryThread::exchange(std::vector<Response>& finished, int& wait_ms) {
  wake_.drain();
  bool abandon = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::swap(abandon, abandon_);
  }
  if (abandon) {
    // Everything the client holds was submitted before abandon_all: none of it may
    // come back. Done without the mutex: removing a transfer may wait for its name
    // lookup, and the worker must never wait for that.
    finished.clear();
    client_.abandon_all();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (abandon_) {
    // abandon_all again meanwhile: what finished belongs to before it, and nothing
    // new may join the client until it has been abandoned (next round, at once).
    finished.clear();
    wake_.signal();
    return !stop_;
  }
  if (!finished.empty()) {
    for (const Response& response : finished) queue_.finished(response);
    const bool announce = done_.empty();  // otherwise announced already, not yet taken
    if (done_.empty())
      done_.swap(finished);
    else
      for (Response& response : finished) done_.push_back(std::move(response));
    if (announce) results_.signal();
  }
  finished.clear();
  if (stop_) return false;
  if (settings_.changed) {
    settings_.changed = false;
    client_.set_max_concurrency(settings_.max_concurrency);
    client_.set_egress_policy(settings_.egress);
  }
  // Only what can start now leaves the queue, so what is left in it can be cancelled.
  const auto slots = static_cast<size_t>(settings_.max_concurrency);
  const int64_t now_us = steady_now_us();
  while (queue_.waiting() > 0 && client_.in_flight() + client_.queued() < slots) {
    std::optional<Request> request = queue_.next(now_us);
    if (!request) break;  // every waiting group is paused, at its window or its rate
    restamp_if_stale(*request);
    client_.submit(std::move(*request));
  }
  const int64_t next_start = queue_.next_start_us();
  wait_ms = kIdleWaitMs;
  if (next_start >= 0)
    wait_ms = static_cast<int>(std::clamp<int64_t>((next_start - now_us + 999) / 1000, 0, kIdleWaitMs));
  return true;
}

void DeliveryThread::loop() noexcept {
  std::vector<Response> finished;
  try {
    int wait_ms = kIdleWaitMs;
    while (exchange(finished, wait_ms)) {
      if (client_.in_flight() + client_.queued() == 0)
        wake_.wait(wait_ms);  // signals are blocked here: only a wake or the timeout ends it
      else
        finished = client_.run(std::min(kRunSliceMs, wait_ms));
    }
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      failure_ = e.what();
    } catch (...) {
      failure_.clear();
    }
    if (failure_.empty()) failure_ = "out of memory";
    results_.signal();
  }
  // Close the connections on the thread that used them.
  client_.abandon_all();
}

}  // namespace pg_outbox::http
