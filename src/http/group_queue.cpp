#include "http/group_queue.hpp"

#include <algorithm>
#include <climits>

#include "core/cpp_only.hpp"

namespace pg_outbox::http {

bool pauses_nothing(const Response& response) {
  return !response.transport_error && response.status >= 200 && response.status < 300;
}

void GroupQueue::push(Request request) {
  Group& group = groups_[request.group];
  // 0: no cap of its own; the thread's max_concurrency bounds it anyway.
  const int cap = request.concurrency > 0 ? request.concurrency : INT_MAX / 2;
  if (!group.window)
    group.window.emplace(cap);
  else if (group.window->cap() != cap)
    group.window->set_cap(cap);  // the endpoint's concurrency was altered
  group.rate_limit = std::max(0, request.rate_limit);
  if (!group.in_rotation) {
    rotation_.push_back(request.group);
    group.in_rotation = true;
  }
  group.waiting.push_back(std::move(request));
  ++waiting_;
}

std::vector<uint64_t> GroupQueue::remove_if(const std::function<bool(uint64_t tag)>& select) {
  std::vector<uint64_t> removed;
  for (auto& [name, group] : groups_) {
    auto keep = std::remove_if(group.waiting.begin(), group.waiting.end(), [&](const Request& request) {
      if (!select(request.tag)) return false;
      removed.push_back(request.tag);
      return true;
    });
    group.waiting.erase(keep, group.waiting.end());
  }
  waiting_ -= removed.size();
  return removed;  // emptied groups leave the rotation when next() meets them
}

std::optional<Request> GroupQueue::next(int64_t now_us) {
  // One pass over the groups in turn at most: each is either served, found blocked
  // (and keeps its place at the back), or found empty (and leaves the rotation).
  for (size_t looked = 0, groups = rotation_.size(); looked < groups; ++looked) {
    std::string name = std::move(rotation_.front());
    rotation_.pop_front();
    Group& group = groups_[name];
    if (group.waiting.empty()) {
      group.in_rotation = false;
      continue;
    }
    if (group.paused > 0 || group.in_flight >= group.window->limit() || now_us < group.not_before_us) {
      rotation_.push_back(std::move(name));
      continue;
    }
    Request request = std::move(group.waiting.front());
    group.waiting.pop_front();
    --waiting_;
    ++group.in_flight;
    // 1/r s apart, 2% more: r per second even when arrivals bunch up a little. On a
    // schedule, not from the actual start: a start a little late (the thread woke a
    // millisecond after its time) does not push every later one back; after a pause
    // longer than one interval the schedule starts again from now.
    if (group.rate_limit > 0) {
      const int64_t interval = 1020000 / group.rate_limit;
      const bool on_schedule = group.not_before_us > 0 && now_us - group.not_before_us < interval;
      group.not_before_us = (on_schedule ? group.not_before_us : now_us) + interval;
    }
    if (group.waiting.empty())
      group.in_rotation = false;
    else
      rotation_.push_back(std::move(name));
    return request;
  }
  return std::nullopt;
}

int64_t GroupQueue::next_start_us() const {
  int64_t earliest = -1;
  for (const auto& [name, group] : groups_) {
    if (group.waiting.empty() || group.paused > 0 || group.in_flight >= group.window->limit()) continue;
    if (group.not_before_us > 0 && (earliest < 0 || group.not_before_us < earliest)) earliest = group.not_before_us;
  }
  return earliest;
}

void GroupQueue::finished(const Response& response) {
  auto found = groups_.find(response.group);
  if (found == groups_.end()) return;
  Group& group = found->second;
  // The window limited this group if it was full, or if requests of it were waiting.
  const bool window_full = group.window && (group.in_flight >= group.window->limit() || !group.waiting.empty());
  if (group.in_flight > 0) --group.in_flight;
  if (group.window)
    group.window->on_result(core::classify_load(response.transport_error, !response.egress_denied.empty(),
                                                response.status, response.total_ms),
                            window_full);
  if (!pauses_nothing(response)) ++group.paused;
}

void GroupQueue::resume(const std::string& name) {
  auto found = groups_.find(name);
  if (found != groups_.end() && found->second.paused > 0) --found->second.paused;
}

void GroupQueue::clear() {
  for (auto& [name, group] : groups_) {
    group.waiting.clear();
    group.in_flight = 0;
    group.paused = 0;
    group.in_rotation = false;
  }
  rotation_.clear();
  waiting_ = 0;
}

int GroupQueue::limit_of(const std::string& name) const {
  auto found = groups_.find(name);
  return found == groups_.end() || !found->second.window ? 0 : found->second.window->limit();
}

int GroupQueue::in_flight_of(const std::string& name) const {
  auto found = groups_.find(name);
  return found == groups_.end() ? 0 : found->second.in_flight;
}

}  // namespace pg_outbox::http
