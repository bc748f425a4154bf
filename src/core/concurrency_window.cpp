#include "core/concurrency_window.hpp"
#include "core/cpp_only.hpp"

#include <algorithm>

namespace pg_outbox::core {

LoadSignal classify_load(bool transport_error, bool refused_locally, long status, double total_ms) {
  if (refused_locally) return LoadSignal::kNeutral;
  if (transport_error || status == 429 || status == 503) return LoadSignal::kOverloaded;
  if (status >= 200 && status < 300) return total_ms <= kPromptMs ? LoadSignal::kPrompt : LoadSignal::kSlow;
  return LoadSignal::kNeutral;
}

ConcurrencyWindow::ConcurrencyWindow(int cap) : cap_(std::max(1, cap)), window_(std::min(kInitialWindow, cap_)) {}

void ConcurrencyWindow::set_cap(int cap) {
  cap_ = std::max(1, cap);
  window_ = std::min(window_, static_cast<double>(cap_));
}

int ConcurrencyWindow::limit() const { return std::clamp(static_cast<int>(window_), 1, cap_); }

void ConcurrencyWindow::on_result(LoadSignal signal, bool window_full) {
  if (results_before_next_decrease_ > 0) --results_before_next_decrease_;
  switch (signal) {
    case LoadSignal::kPrompt:
      // +1 per window's worth of prompt answers: one more connection per round trip.
      if (window_full) window_ = std::min(static_cast<double>(cap_), window_ + 1.0 / window_);
      break;
    case LoadSignal::kOverloaded:
      if (results_before_next_decrease_ > 0) break;  // the same burst already halved it
      results_before_next_decrease_ = limit();
      window_ = std::max(1.0, window_ / 2);
      break;
    case LoadSignal::kSlow:
    case LoadSignal::kNeutral:
      break;
  }
}

}  // namespace pg_outbox::core
