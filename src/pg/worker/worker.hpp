// The delivery worker's loop and its life: waiting for work, the steps of a round
// (steps.hpp), waiting for the extension at this library's version, recovering from
// errors. README.md in this folder tells a message's life in it.
#pragma once

#include "core/clock.hpp"
#include "http/delivery_thread.hpp"
#include "pg/worker/state.hpp"

#include <cstdint>
#include <string>

struct WaitEventSet;  // PostgreSQL's (storage/latch.h)

namespace pg_outbox::pg::worker {

class Worker {
 public:
  explicit Worker(DatabaseSlot& slot);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  // The loop; ends by process exit (SIGTERM, after stop_gracefully; postmaster death)
  // or by ExtensionAbsent.
  void run();

 private:
  uint32_t wait_for_work();  // WakeFor flags
  void round(uint32_t woken);
  bool prepare_database();
  void recover_from_error(int sqlstate, const std::string& message);
  void on_extension_changed();
  int wait_timeout_ms() const;
  [[noreturn]] void stop_gracefully();

  core::SystemClock clock_;
  http::DeliveryThread delivery_;       // libcurl, on its own thread
  ::WaitEventSet* wait_set_ = nullptr;  // latch, postmaster death, delivery_.results_fd()
  WorkerState state_;
  bool ready_ = false;               // the extension exists at our version and claims were recovered
  bool announced_ = false;           // "worker started" is logged once, when first ready
  std::string waiting_for_version_;  // the version we last logged waiting on
  int error_streak_ = 0;
  int64_t error_pause_until_ms_ = 0;
};

}  // namespace pg_outbox::pg::worker
