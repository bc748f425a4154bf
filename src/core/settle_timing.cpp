#include "core/settle_timing.hpp"

#include <limits>

#include "core/cpp_only.hpp"

namespace pg_outbox::core {

int64_t settle_at_ms(size_t waiting, bool urgent, const LastSettle& last, int64_t now_ms) {
  if (urgent || waiting >= kSettleAtOnce) return 0;  // long past: at once
  if (waiting == 0) return std::numeric_limits<int64_t>::max();
  if (last.results < kSettleLight || now_ms < last.at_ms) return 0;  // a light flow, or the clock set back
  return last.at_ms + kSettleEveryMs;
}

}  // namespace pg_outbox::core
