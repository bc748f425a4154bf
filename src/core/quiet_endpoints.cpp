#include "core/quiet_endpoints.hpp"

#include <algorithm>
#include <limits>

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

void QuietEndpoints::note(const std::vector<std::string>& names, int64_t now_ms, int64_t until_ms, uint64_t version) {
  if (names.empty()) return;
  // Endpoints noted under another version, or whose quiet ended, are not quiet any more.
  if (version != version_ || now_ms >= until_ms_ || now_ms < noted_ms_) names_.clear();
  const bool fresh = names_.empty();
  names_.insert(names.begin(), names.end());
  // One end for all: the earliest (ending one endpoint's quiet early costs one claim).
  until_ms_ = fresh ? until_ms : std::min(until_ms_, until_ms);
  if (fresh) noted_ms_ = now_ms;
  version_ = version;
}

bool QuietEndpoints::is_quiet(const std::string& name, int64_t now_ms, uint64_t version) const {
  return version == version_ && now_ms >= noted_ms_ && now_ms < until_ms_ && names_.count(name) != 0;
}

int64_t QuietEndpoints::until_ms(int64_t now_ms) const {
  const bool over = names_.empty() || now_ms >= until_ms_ || now_ms < noted_ms_;
  return over ? std::numeric_limits<int64_t>::max() : until_ms_;
}

bool claim_saw_everything(size_t claimed, int limit, int64_t claimed_bytes, int64_t byte_budget) {
  return claimed < static_cast<size_t>(std::max(0, limit)) && claimed_bytes < byte_budget;
}

}  // namespace pg_outbox::core
