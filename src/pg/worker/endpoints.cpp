#include "pg/worker/endpoints.hpp"

#include "pg/runtime/settings.hpp"

#include <algorithm>
#include <stdexcept>

namespace pg_outbox::pg::worker {

namespace {

// Parsed once per read of the endpoints, not per request. A secret written past the
// checks (a superuser's INSERT) leaves the endpoint without keys and with the reason,
// and its messages are dead-lettered as INVALID_MESSAGE (requests.cpp).
void parse_keys(Endpoint& endpoint, const std::vector<store::EndpointSecret>& secrets) {
  try {
    for (const store::EndpointSecret& s : secrets)
      endpoint.keys.push_back({core::SigningKey::parse(s.secret), s.expires_at_ms});
  } catch (const std::invalid_argument& e) {
    endpoint.keys.clear();
    endpoint.keys_error = e.what();
  }
}

// Whether a and b sign alike at now_ms: the same secrets, in the same order, once the
// expired ones are left out.
bool same_secrets_in_force(const std::vector<store::EndpointSecret>& a, const std::vector<store::EndpointSecret>& b,
                           int64_t now_ms) {
  auto signs = [now_ms](const store::EndpointSecret& s) { return s.expires_at_ms == 0 || now_ms < s.expires_at_ms; };
  auto i = a.begin();
  auto j = b.begin();
  while (true) {
    while (i != a.end() && !signs(*i)) ++i;
    while (j != b.end() && !signs(*j)) ++j;
    if (i == a.end() || j == b.end()) return i == a.end() && j == b.end();
    if (*i != *j) return false;
    ++i;
    ++j;
  }
}

}  // namespace

void Endpoints::refresh(uint64_t version, int64_t now_ms, bool& max_pending_changed) {
  max_pending_changed = false;
  if (version == version_ && now_ms - loaded_ms_ < settings.poll_interval_ms) return;
  version_ = version;
  loaded_ms_ = now_ms;
  std::unordered_map<std::string, Endpoint> fresh;
  std::vector<std::string> max_pending;
  for (store::EndpointRow& row : store::load_endpoints()) {
    // A pull endpoint is never delivered (consumer/README.md): the worker only counts its
    // queue for max_pending, which its readers' acknowledgements shrink.
    if (row.pull) {
      if (row.has_max_pending) max_pending.push_back(row.name);
      continue;
    }
    Endpoint endpoint;
    auto known = endpoints_.find(row.name);
    if (known != endpoints_.end()) {
      if (changes_requests(known->second.row, row, now_ms)) changed_.push_back(row.name);
      // The worker's breaker and streak are the live ones; the table is their copy for
      // restarts.
      row.breaker = known->second.row.breaker;
      row.failing = known->second.row.failing;
      endpoint.breaker_dirty = known->second.breaker_dirty;
      endpoint.retiring = known->second.retiring;
      if (endpoint.retiring) row.paused = true;  // until its pause is written
    } else {
      core::restore_after_restart(row.breaker, now_ms);
    }
    // An operator's resume forgets the failures before it (the table's copy too, which a
    // save of the worker may have written back meanwhile).
    if (core::forget_failures_before(row.failing, row.resumed_at_ms)) endpoint.breaker_dirty = true;
    auto parsed = core::parse_string_object(row.headers_json.empty() ? "{}" : row.headers_json);
    endpoint.headers = std::move(parsed.pairs);
    endpoint.headers_error = std::move(parsed.error);
    if (known != endpoints_.end() && known->second.row.secrets == row.secrets) {
      endpoint.keys = known->second.keys;  // an ed25519 key costs a derivation to parse
      endpoint.keys_error = known->second.keys_error;
    } else {
      parse_keys(endpoint, row.secrets);
    }
    endpoint.row = std::move(row);
    std::string name = endpoint.row.name;
    fresh.emplace(std::move(name), std::move(endpoint));
  }
  endpoints_ = std::move(fresh);
  for (const auto& [name, endpoint] : endpoints_)
    if (endpoint.row.has_max_pending) max_pending.push_back(name);
  std::sort(max_pending.begin(), max_pending.end());
  if (max_pending != max_pending_) {
    max_pending_ = std::move(max_pending);
    max_pending_changed = true;
  }
}

std::vector<std::string> Endpoints::take_changed() {
  std::vector<std::string> changed;
  changed.swap(changed_);
  return changed;
}

void Endpoints::forget() {
  endpoints_.clear();
  version_ = UINT64_MAX;
  changed_.clear();
  breakers_not_written();
  retired_committed_.clear();
}

void Endpoints::save_breakers() {
  for (auto& [name, endpoint] : endpoints_)
    if (endpoint.breaker_dirty && store::save_breaker(name, endpoint.row.breaker, endpoint.row.failing))
      breakers_written_.push_back(name);
  // After the streaks: a pause for failures records the streak's start if the table has none.
  for (auto& [name, endpoint] : endpoints_) {
    if (!endpoint.retiring) continue;
    switch (store::retire_endpoint(name, endpoint.retiring->reason, endpoint.retiring->since_ms)) {
      case store::RetireResult::Retired:
        retired_.push_back({name, *endpoint.retiring});
        retires_settled_.push_back(name);
        break;
      case store::RetireResult::NotRetired:
        retires_settled_.push_back(name);
        break;
      case store::RetireResult::RowBusy:
        break;  // still retiring: the next settle tries again
    }
  }
}

void Endpoints::breakers_committed() {
  for (const std::string& name : breakers_written_)
    if (Endpoint* endpoint = find(name)) endpoint->breaker_dirty = false;
  breakers_written_.clear();
  // A pause written, or found moot (resumed since, or paused already): the next refresh
  // reads the rows again, so that row.paused is the table's (a moot pause left it true).
  for (const std::string& name : retires_settled_)
    if (Endpoint* endpoint = find(name)) endpoint->retiring.reset();
  if (!retires_settled_.empty()) version_ = UINT64_MAX;
  retires_settled_.clear();
  for (Retired& r : retired_) retired_committed_.push_back(std::move(r));
  retired_.clear();
}

void Endpoints::breakers_not_written() {
  breakers_written_.clear();
  retires_settled_.clear();
  retired_.clear();
}

std::vector<Retired> Endpoints::take_retired() {
  std::vector<Retired> retired;
  retired.swap(retired_committed_);
  return retired;
}

Endpoint* Endpoints::find(const std::string& name) {
  auto found = endpoints_.find(name);
  return found == endpoints_.end() ? nullptr : &found->second;
}

const Endpoint* Endpoints::find(const std::string& name) const {
  auto found = endpoints_.find(name);
  return found == endpoints_.end() ? nullptr : &found->second;
}

bool Endpoints::any_breaker_dirty() const {
  return std::any_of(endpoints_.begin(), endpoints_.end(),
                     [](const auto& e) { return e.second.breaker_dirty || e.second.retiring.has_value(); });
}

bool Endpoints::any_secret_expired(int64_t now_ms) const {
  for (const auto& [name, endpoint] : endpoints_)
    for (const core::RotatingKey& key : endpoint.keys)
      if (key.expires_at_ms != 0 && key.expires_at_ms <= now_ms) return true;
  return false;
}

int Endpoints::max_attempts_of(const Endpoint& endpoint) const {
  return endpoint.row.max_attempts.value_or(settings.max_attempts);
}

// The endpoint's own cap. Not lowered to max_concurrency: the thread's connection slots
// bound it anyway, and a window cut to a lowered max_concurrency would stay cut after a
// reload raised it again.
int Endpoints::concurrency_of(const Endpoint& endpoint) const {
  return endpoint.row.concurrency.value_or(settings.endpoint_concurrency);
}

core::EndpointView Endpoints::view(const Endpoint& endpoint, size_t held) const {
  core::EndpointView view;
  view.name = endpoint.row.name;
  view.notify = !endpoint.row.channel.empty();
  view.paused = endpoint.row.paused;
  view.breaker = endpoint.row.breaker;
  view.concurrency = concurrency_of(endpoint);
  view.rate_limit = endpoint.row.rate_limit;
  view.outstanding = held;
  view.batch_size = endpoint.row.batch_size;
  return view;
}

std::vector<core::EndpointView> Endpoints::views(const std::unordered_map<std::string, size_t>& held,
                                                 const std::function<bool(const std::string&)>& parked) const {
  std::vector<core::EndpointView> views;
  views.reserve(endpoints_.size());
  for (const auto& [name, endpoint] : endpoints_) {
    auto h = held.find(name);
    views.push_back(view(endpoint, h == held.end() ? 0 : h->second));
    views.back().parked = parked(name);
  }
  return views;
}

bool changes_requests(const store::EndpointRow& before, const store::EndpointRow& after, int64_t now_ms) {
  return before.url != after.url || before.headers_json != after.headers_json ||
         !same_secrets_in_force(before.secrets, after.secrets, now_ms) || before.timeout_ms != after.timeout_ms ||
         before.format != after.format || before.source != after.source || before.batch_size != after.batch_size ||
         (!before.paused && after.paused);
}

core::ClaimSettings claim_settings() {
  return {settings.batch_size, settings.max_concurrency, settings.max_inflight_bytes};
}

}  // namespace pg_outbox::pg::worker
