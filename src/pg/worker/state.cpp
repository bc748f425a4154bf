#include "pg/worker/state.hpp"

#include "pg/ordering/successors.hpp"
#include "pg/runtime/shared_state.hpp"
#include "pg/store/extension.hpp"
#include "pg/worker/steps.hpp"
#include "pg/worker/constants.hpp"

namespace pg_outbox::pg::worker {

std::vector<int64_t> WorkerState::in_flight_ids() const {
  std::vector<int64_t> ids = in_flight.ids();
  parking.append_ids(ids);
  // Answered, their results not written yet (core/settle_timing.hpp): their rows are
  // still in the queue, due.
  const store::Settlements& waiting = results.pending();
  for (const auto& s : waiting.sent) ids.push_back(s.id);
  for (const auto& r : waiting.retry) ids.push_back(r.id);
  for (const auto& d : waiting.dead) ids.push_back(d.id);
  return ids;
}

void WorkerState::forget_deliveries() {
  delivery.abandon_all();
  in_flight.clear();
  endpoints.take_changed();
  schedule.history.covered_ms = 0;
  results.clear();
  parking.clear();
  successors::forget();  // made heads again by heal() when the worker serves the extension anew
}

void refresh_endpoints(WorkerState& state) {
  bool max_pending_changed = false;
  state.endpoints.refresh(pg_atomic_read_u64(&state.slot.endpoints_version), state.now_ms(), max_pending_changed);
  if (max_pending_changed) state.schedule.recount_queued = true;
}

void require_same_extension(const WorkerState& state) {
  if (!store::extension_still(state.extension_oid)) throw ExtensionChanged();
}

}  // namespace pg_outbox::pg::worker
