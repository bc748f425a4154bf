// The keys' next messages that the worker claims itself (docs/delivery.md, Ordering).
//
// When the worker's settle takes a key's head out of the queue, the key's next message
// (the lowest ordering_seq) is its head from then on. Written into the table, that is an
// UPDATE of the whole message (a new row version and three index entries, about 20 µs),
// which made an ordered drain cost 40 % more than an unordered one. The worker delivers
// it itself, so it keeps it instead: the settle finds each key's first message under the
// key's lock and, once that transaction commits, the claim takes those messages where
// their rows are (by ctid; store::claim's next_in_line) beside the claim index's heads.
// In the table such a message still waits behind a head that is gone; what keeps the
// order is that:
// - a producer's commit makes its message follow whenever its key has any message at all
//   (ordering.cpp, key_has_messages), not only a head;
// - what the worker holds in memory is written into the table whenever the worker may
//   not claim it at once: a message not due yet becomes a head here, a retried or given
//   back one in the settle (store/settlements.cpp), and a worker that starts makes the
//   first message of every key without a head one (heal: a worker that stopped held
//   some);
// - anyone else who takes a head out of the queue (a pull reader's ack, an operator's
//   DELETE) promotes by UPDATE, as before (ordering.cpp); such an UPDATE of a message the
//   worker holds only makes it a head in the table too, and the claim takes it once
//   (next_in_line asks for ordering_seq NOT NULL, the claim index for NULL);
// - what was found before a change of the endpoints (alter_endpoint(ordered => ...)
//   numbers the queue again) or for an endpoint the worker no longer serves is written
//   into the table if it is still its key's first message, and forgotten.
//
// A lookup costs about 12 µs a key, as much as the rest of a message's settle: one
// lookup reads a key's next kLookAhead messages, and the ones after the first wait in the
// key's line, each taken without a lookup when the one before it is settled; the next
// lookup starts after the last of them (Line::last_seq). A line holds
// only while no one but the worker changed the order of the endpoint's keyed messages (a
// trigger or a pull reader's settle bumps the version of the endpoint's group,
// successions_versions; an endpoint change bumps endpoints_version): after that, the key
// is looked up again. One version per group of endpoints, not one for the database: a
// pull endpoint's readers acknowledge keyed messages all the time, and each ack dropped
// every line of every endpoint (all looked up again, one lookup per message).
#include "pg/ordering/successors.hpp"

#include "core/ordering_lock.hpp"
#include "pg/boundary/spi.hpp"
#include "pg/ordering/ordering.hpp"
#include "pg/runtime/shared_state.hpp"
#include "pg/runtime/transaction_events.hpp"

extern "C" {
#include "catalog/pg_type.h"
}

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace pg_outbox::pg {

namespace {

// Each key's lookup descends the ordering index twice (its head in the table, then its
// next messages) and reads a heap page per message it returns: with 8 at a time the
// lookups of an ordered drain of 1,000 keys cost 7.2-9.8 µs a message, with 32 5.0-6.9
// (pg_stat_statements, alternating builds); starting after the line's last message
// instead of at the key's first entry, 3.44 -> 3.13 µs (medians of six drains each,
// alternating builds; 4.23 -> 3.31 buffers a row): the heap pages are most of what is left. A
// line holds at most 31 messages of 32 bytes, and one lookup returns at most 32 rows for
// each key of a settle (kSettleBatch keys at most): the worker's private memory peaked
// at 14.1 MB draining 1,000 keys of 100 messages (9.7 with 8 at a time), 11.5 for
// 20,000 keys of 20 (9.9), 8.9 for 100,000 keys of 3 (RssAnon, as
// bench/worker_memory.sh reads it).
constexpr int kLookAhead = 32;

// The versions a key's messages were found under: the endpoints', and its endpoint's
// group's (of successions_versions).
struct Versions {
  uint64_t endpoints = 0;
  uint64_t successions = 0;
  bool operator==(const Versions& o) const { return endpoints == o.endpoints && successions == o.successions; }
};

// The group of an endpoint in successions_versions: the same in every process.
int group_of(const std::string& endpoint) {
  return static_cast<int>(core::ordering_hash(endpoint, "") % kSuccessionGroups);
}

// A waiting message as the lookup found it: its number (ordering_seq) tells whether it is
// still where it was found (a move gives it a new one, or none).
struct Waiting {
  int64_t id;
  int64_t seq;
  TimestampTz due;  // PostgreSQL microseconds
  int64_t tid;      // where its row version is (tid_number)
};

struct Held {
  int64_t id;
  int64_t seq;
  int64_t tid;  // where the claim reads it
  Versions found;
};

// A key's messages after the one the worker claims next, in order: those of one lookup
// from `next` on. Shared, not copied, by the committed line and this transaction's
// (taking a message copied the whole line: about 2 % of the main thread's samples in an
// ordered drain, perf --call-graph dwarf).
// A line whose messages are all taken stays until the last one leaves: the key's next
// lookup starts after `last_seq`, the number of the last message it found, instead of at
// the key's first index entry. The entries before it are those of messages that left
// since, dead until a lookup walks them (or VACUUM removes them): a walk visits each
// one's heap page (EXPLAIN (ANALYZE, BUFFERS) of the generic lookup of 50 keys × 32
// behind 32 dead entries each: 8,387 buffers and 6.2 ms, then 1,769 and 1.9 ms once the
// walk had marked them dead; in a drain autovacuum removes many first). Every message
// of the key still waiting that is not a head in the table has a larger number: numbers
// are drawn under the key's lock, which the lookup holds, in commit order, and a move
// renumbers only with a new version, which drops the line. A head in the table is looked
// for apart, as the lookup from the first entry found it (NULLS FIRST); that part walks
// the first versions of the key's numbered messages, dead (each was inserted without a
// number and numbered by its commit's UPDATE), at the heap once each: marked dead then.
struct Line {
  std::shared_ptr<const std::vector<Waiting>> messages;
  size_t next = 0;
  Versions found;
  int group;         // of its endpoint
  int64_t last_seq;  // of the last message the lookup found
  bool empty() const { return messages == nullptr || next >= messages->size(); }
};

using KeyId = std::pair<std::string, std::string>;  // endpoint, ordering key
// Hashed, not ordered: a settle looks up and replaces the line of every key it moved,
// and ordered maps of 1,000 keys compared both strings about ten times for each. In an
// ordered drain's main thread (perf), memcmp and this file's own code took 4.8 % of the
// samples with ordered maps, 3.7 % hashed (memcmp 2.5 % -> 0.9 %; 0.5 % unordered).
struct KeyIdHash {
  size_t operator()(const KeyId& key) const {
    const size_t endpoint = std::hash<std::string>{}(key.first);
    return endpoint ^
           (std::hash<std::string>{}(key.second) + 0x9e3779b97f4a7c15ULL + (endpoint << 6) + (endpoint >> 2));
  }
};

// Committed: what the claim takes, and the keys' lines.
std::unordered_map<std::string, std::vector<Held>> ready_by_endpoint;
std::unordered_map<KeyId, Line, KeyIdHash> lines;
// This transaction's: found ready (by endpoint), lines replaced (nullopt: dropped, and
// the find() call that replaced each), ids forgotten. Per endpoint, not per message: each
// held message copied its endpoint's name, and the commit looked the endpoint up again.
struct LineChange {
  std::optional<Line> line;
  uint64_t call = 0;  // of find(): a key that reaches one call twice moves on once
};
std::unordered_map<std::string, std::vector<Held>> found_now;
std::unordered_map<KeyId, LineChange, KeyIdHash> lines_now;
uint64_t find_calls = 0;
std::unordered_set<int64_t> leaving_now;
// The groups of the endpoints whose keyed messages this transaction (not the worker's)
// reordered, one bit each.
uint64_t reordered_now = 0;
static_assert(kSuccessionGroups <= 64, "one bit per group in reordered_now");
// The versions the lines were last pruned under, and the endpoints' version the held
// messages were last judged by (committed, and this transaction's): settle_stale looks
// through them only when these change, and through the lines of the groups that changed.
uint64_t lines_pruned_at_endpoints = 0;
std::array<uint64_t, kSuccessionGroups> lines_pruned_at_groups{};
uint64_t held_judged_at = 0, held_judged_now = 0;
// What a commit found could not be kept (out of memory in the commit callback, which
// must not raise): everything is forgotten, and the next settle_stale makes the first
// message of every key without a head one (heal), as a worker that starts does.
bool lost_track = false, healed_now = false;

uint64_t endpoints_version_now() {
  DatabaseSlot* slot = slot_of_database(MyDatabaseId);
  return slot == nullptr ? 0 : pg_atomic_read_u64(&slot->endpoints_version);
}

// The versions the keys of this endpoint are found under now.
Versions versions_of(const std::string& endpoint) {
  DatabaseSlot* slot = slot_of_database(MyDatabaseId);
  if (slot == nullptr) return {};
  return {pg_atomic_read_u64(&slot->endpoints_version),
          pg_atomic_read_u64(&slot->successions_versions[group_of(endpoint)])};
}

// Every group's version now.
std::array<uint64_t, kSuccessionGroups> group_versions() {
  std::array<uint64_t, kSuccessionGroups> versions{};
  DatabaseSlot* slot = slot_of_database(MyDatabaseId);
  if (slot == nullptr) return versions;
  for (int g = 0; g < kSuccessionGroups; ++g) versions[g] = pg_atomic_read_u64(&slot->successions_versions[g]);
  return versions;
}

// Before the transaction's changes are visible (and before its keys' locks go): a
// settle that reads the version under those locks, or after a statement whose snapshot
// may have seen the changes, sees it bumped. A transaction that fails after this only
// makes the worker look its keys up again.
void bump_if_reordered() {
  const uint64_t groups = reordered_now;
  reordered_now = 0;
  DatabaseSlot* slot = slot_of_database(MyDatabaseId);
  if (slot == nullptr) return;
  for (int g = 0; g < kSuccessionGroups; ++g)
    if ((groups >> g) & 1u) pg_atomic_fetch_add_u64(&slot->successions_versions[g], 1);
}

void commit() {
  if (!leaving_now.empty()) {
    for (auto it = ready_by_endpoint.begin(); it != ready_by_endpoint.end();) {
      std::vector<Held>& held = it->second;
      held.erase(std::remove_if(held.begin(), held.end(), [](const Held& h) { return leaving_now.count(h.id) != 0; }),
                 held.end());
      it = held.empty() ? ready_by_endpoint.erase(it) : std::next(it);
    }
  }
  for (auto& [endpoint, held] : found_now) {
    if (held.empty()) continue;  // an endpoint with nothing ready has no entry (settle_stale looks only when some do)
    std::vector<Held>& ready = ready_by_endpoint[endpoint];
    ready.insert(ready.end(), held.begin(), held.end());
  }
  held_judged_at = std::max(held_judged_at, held_judged_now);
  for (auto& [key, change] : lines_now) {
    if (change.line) {
      lines.insert_or_assign(key, std::move(*change.line));
    } else {
      lines.erase(key);
    }
  }
}

// Makes these messages heads in the table where each is still its key's first message.
void write_heads(const std::vector<int64_t>& ids, bool only_if_first) {
  static Statement first(R"sql(
    UPDATE outbox.messages m SET ordering_seq = NULL
     WHERE m.id = ANY ($1) AND m.ordering_seq IS NOT NULL
       AND m.id = (SELECT f.id FROM outbox.messages f
                    WHERE f.endpoint = m.endpoint AND f.ordering_key = m.ordering_key
                    ORDER BY f.ordering_seq NULLS FIRST LIMIT 1)
  )sql",
                         {INT8ARRAYOID});
  static Statement any("UPDATE outbox.messages m SET ordering_seq = NULL WHERE m.id = ANY ($1)", {INT8ARRAYOID});
  (only_if_first ? first : any).run({int8_array(ids)});
}

}  // namespace

void successors_at_transaction_end(XactEvent event) {
  switch (event) {
    case XACT_EVENT_PRE_COMMIT:
    case XACT_EVENT_PARALLEL_PRE_COMMIT:
    case XACT_EVENT_PRE_PREPARE:  // COMMIT PREPARED runs no callback of ours
      bump_if_reordered();
      break;
    case XACT_EVENT_COMMIT:
    case XACT_EVENT_PARALLEL_COMMIT:
      // A PostgreSQL callback after the commit: nothing may escape it, and it cannot
      // fail the transaction any more.
      try {
        commit();
        if (healed_now) lost_track = false;
      } catch (...) {
        ready_by_endpoint.clear();
        lines.clear();
        lost_track = true;
      }
      [[fallthrough]];
    case XACT_EVENT_ABORT:
    case XACT_EVENT_PREPARE:
    case XACT_EVENT_PARALLEL_ABORT:
      found_now.clear();
      lines_now.clear();
      leaving_now.clear();
      reordered_now = 0;
      held_judged_now = 0;
      healed_now = false;
      break;
    default:
      break;
  }
}

namespace successors {

void find(const std::vector<std::string>& endpoints, const std::vector<std::string>& keys) {
  // Each key's head in the table, if it has one, and its next kLookAhead messages after
  // the number $4 (Line: after the last one its line held, or from the first); the
  // lookups only (the few writes come after): interleaved with writes, they would not
  // mark the index entries of the messages that left as dead (ordering/README.md).
  // The rows come back unsorted and are put in order here: an ORDER BY over the whole
  // result sorted thousands of rows the index had already read in order, and extract()
  // is numeric arithmetic; date_part is float8, exact to the microsecond for any delay.
  // Below the provisional number ($5): the first versions of the key's followers lie
  // there, dead since their commits, and a lookup that found fewer than $3 messages went on
  // to walk them all.
  // The head probe is answered by messages_ordering_idx; the claim index qualifies too
  // (no number), and after an ANALYZE that counted no committed row the generic plan
  // probed each key through it, walking every head of the endpoint (index condition the
  // endpoint, the key a filter) at three times the lookup's cost: it is hidden from
  // these plans (t/058).
  static Statement lookup(R"sql(
    SELECT k.i, f.id, f.ordering_seq, (date_part('epoch', f.next_attempt_at - now()) * 1000000)::bigint, f.ctid
      FROM unnest($1::text[], $2::text[], $4::bigint[]) WITH ORDINALITY AS k(endpoint, ordering_key, after, i)
     CROSS JOIN LATERAL (
        (SELECT h.id, h.ordering_seq, h.next_attempt_at, h.ctid FROM outbox.messages h
          WHERE h.endpoint = k.endpoint AND h.ordering_key = k.ordering_key AND h.ordering_seq IS NULL LIMIT 1)
        UNION ALL
        (SELECT f.id, f.ordering_seq, f.next_attempt_at, f.ctid FROM outbox.messages f
          WHERE f.endpoint = k.endpoint AND f.ordering_key = k.ordering_key AND f.ordering_seq > k.after
            AND f.ordering_seq < $5
          ORDER BY f.ordering_seq NULLS FIRST LIMIT $3)) f
  )sql",
                          {TEXTARRAYOID, TEXTARRAYOID, INT4OID, INT8ARRAYOID, INT8OID}, Statement::Plan::kGeneric,
                          PlanLimits{IndexName{"outbox", "messages_claim_idx"}});
  // Read after the keys' locks were taken (by the settle, before it moved the heads) and
  // before the lookup: a change that reordered these keys committed before, or counts as
  // after. Once for each endpoint of the settle (a few), with its group and where what is
  // found for it goes.
  struct Endpoint {
    Versions versions;
    int group;
    std::vector<Held>* found;
  };
  std::unordered_map<std::string, Endpoint> by_endpoint;
  auto endpoint_of = [&](const std::string& name) -> const Endpoint& {
    auto [it, fresh] = by_endpoint.try_emplace(name);
    if (fresh) it->second = {versions_of(name), group_of(name), &found_now[name]};
    return it->second;
  };
  const TimestampTz now = pg_call([] { return GetCurrentTransactionStartTimestamp(); });
  std::vector<int64_t> not_due;
  auto take = [&](const Endpoint& endpoint, const Waiting& next) {
    if (next.due <= now) {
      endpoint.found->push_back({next.id, next.seq, next.tid, endpoint.versions});
    } else {
      not_due.push_back(next.id);  // a head in the table: the claim index knows when it comes due
    }
  };
  // The keys to look up: each one's change (in lines_now) and endpoint.
  std::vector<std::string> look_endpoints, look_keys;
  std::vector<int64_t> look_after;
  std::vector<std::pair<LineChange*, const Endpoint*>> looked;
  const uint64_t call = ++find_calls;
  for (size_t i = 0; i < keys.size(); ++i) {
    const Endpoint& endpoint = endpoint_of(endpoints[i]);
    // The key's change in this transaction, if any, else its committed line: one hash
    // of the key for both.
    auto [change, fresh] = lines_now.try_emplace(KeyId{endpoints[i], keys[i]});
    if (!fresh && change->second.call == call) continue;  // its head left twice (sent and dead): moves on once
    change->second.call = call;
    const Line* line = nullptr;
    if (!fresh) {
      line = change->second.line ? &*change->second.line : nullptr;
    } else if (auto it = lines.find(change->first); it != lines.end()) {
      line = &it->second;
    }
    const bool current = line != nullptr && line->found == endpoint.versions;
    if (!current || line->empty()) {
      look_endpoints.push_back(endpoints[i]);
      look_keys.push_back(keys[i]);
      look_after.push_back(current ? line->last_seq : std::numeric_limits<int64_t>::min());
      change->second.line = std::nullopt;  // unless the lookup finds its next messages
      looked.emplace_back(&change->second, &endpoint);
      continue;
    }
    Line next = *line;
    const Waiting first = (*next.messages)[next.next++];
    take(endpoint, first);
    change->second.line = first.due <= now ? std::optional<Line>(std::move(next)) : std::nullopt;
  }
  if (!look_keys.empty()) {
    Rows rows = lookup.run({text_array(look_endpoints), text_array(look_keys), Int32GetDatum(kLookAhead),
                            int8_array(look_after), Int64GetDatum(kProvisionalSeq)});
    // Each key's messages together, its head in the table (no number) first.
    struct Found {
      size_t key;
      bool head;
      Waiting message;
    };
    std::vector<Found> found(rows.size());
    for (size_t r = 0; r < rows.size(); ++r)
      found[r] = {static_cast<size_t>(rows.int64(r, 0)) - 1,
                  rows.is_null(r, 2),
                  {rows.int64(r, 1), rows.int64(r, 2), now + rows.int64(r, 3), rows.int64(r, 4)}};
    std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
      if (a.key != b.key) return a.key < b.key;
      if (a.head != b.head) return a.head;
      return a.message.seq < b.message.seq;
    });
    for (size_t r = 0; r < found.size();) {
      const auto [change, endpoint] = looked[found[r].key];
      // A head in the table first: the claim index has it, and this key needs no line.
      const bool head = found[r].head;
      const bool due = found[r].message.due <= now;
      if (!head) take(*endpoint, found[r].message);
      int64_t last_seq = found[r].message.seq;
      auto rest = std::make_shared<std::vector<Waiting>>();
      const size_t k = found[r].key;
      for (++r; r < found.size() && found[r].key == k; ++r) {
        rest->push_back(found[r].message);
        last_seq = found[r].message.seq;
      }
      if (!head && due) change->line = Line{std::move(rest), 0, endpoint->versions, endpoint->group, last_seq};
    }
  }
  if (!not_due.empty()) write_heads(not_due, false);
}

Ready ready(const std::vector<std::string>& endpoints) {
  Ready out;
  for (const std::string& endpoint : endpoints) {
    auto it = ready_by_endpoint.find(endpoint);
    if (it == ready_by_endpoint.end()) continue;
    for (const Held& h : it->second) {
      if (leaving_now.count(h.id) != 0) continue;  // written into the table by settle_stale just now
      out.ids.push_back(h.id);
      out.seqs.push_back(h.seq);
      out.tids.push_back(h.tid);
      out.endpoints.push_back(endpoint);
    }
  }
  return out;
}

void after_claim(const std::vector<int64_t>& passed, const std::vector<int64_t>& taken) {
  leaving_now.insert(taken.begin(), taken.end());
  std::vector<int64_t> left;
  for (int64_t id : passed)
    if (leaving_now.count(id) == 0) left.push_back(id);
  if (left.empty()) return;
  // Not taken: over the claim's limit or budget, locked by someone, or moved by an UPDATE
  // (an operator's, of its headers or payload: the claim reads a held message where the
  // lookup saw its row) are kept, each at the place it is now (read at the old one, it
  // would be passed at every claim and its key would wait forever: t/055 f; the place is
  // committed, so it holds even if this transaction fails). No longer waiting in the
  // queue: forgotten (whoever took it out or made it a head in the table bumped its
  // endpoint's group's version, so its key's line is not used again). Those still
  // waiting are found by the primary key's index condition: an anti-join of the ids to
  // the queue could scan the whole primary key for each of them when the statistics said
  // the queue held no follower (409 s for 99,000 ids, helper-28).
  static Statement waiting(
      "SELECT m.id, m.ctid FROM outbox.messages m WHERE m.id = ANY ($1) AND m.ordering_seq IS NOT NULL",
      {INT8ARRAYOID});
  Rows rows = waiting.run({int8_array(left)});
  std::unordered_map<int64_t, int64_t> still;  // id -> where it is now
  for (size_t r = 0; r < rows.size(); ++r) still.emplace(rows.int64(r, 0), rows.int64(r, 1));
  for (int64_t id : left)
    if (still.count(id) == 0) leaving_now.insert(id);
  for (auto& [endpoint, held] : ready_by_endpoint)
    for (Held& h : held)
      if (auto now = still.find(h.id); now != still.end()) h.tid = now->second;
}

uint64_t settle_stale(const std::function<bool(const std::string&)>& served) {
  const uint64_t endpoints_version = endpoints_version_now();
  const std::array<uint64_t, kSuccessionGroups> groups = group_versions();
  if (lost_track) {
    heal();
    healed_now = true;
  }
  // Lines found under other versions would only be looked up again: they go now (a line
  // is a cache of lookups, dropped at any time without harm). Only the lines of the
  // groups that changed are looked at, unless the endpoints changed.
  const bool endpoints_changed = endpoints_version != lines_pruned_at_endpoints;
  uint64_t changed_groups = 0;
  for (int g = 0; g < kSuccessionGroups; ++g)
    if (groups[g] != lines_pruned_at_groups[g]) changed_groups |= uint64_t{1} << g;
  if (endpoints_changed || changed_groups != 0) {
    for (auto it = lines.begin(); it != lines.end();) {
      const Line& line = it->second;
      const bool look = endpoints_changed || ((changed_groups >> line.group) & 1u) != 0;
      const bool current = line.found == Versions{endpoints_version, groups[line.group]};
      it = !look || current ? std::next(it) : lines.erase(it);
    }
    lines_pruned_at_endpoints = endpoints_version;
    lines_pruned_at_groups = groups;
  }
  if (ready_by_endpoint.empty()) return endpoints_version;
  // Each held message when the endpoints changed since the last look (the versions only
  // grow); else only whether each endpoint is still served.
  const bool changed = endpoints_version != held_judged_at;
  std::vector<int64_t> stale;
  for (const auto& [endpoint, held] : ready_by_endpoint) {
    const bool is_served = served(endpoint);
    if (is_served && !changed) continue;
    for (const Held& h : held)
      if (!is_served || h.found.endpoints != endpoints_version) stale.push_back(h.id);
  }
  held_judged_now = endpoints_version;  // counts once this transaction commits what it wrote
  if (!stale.empty()) {
    write_heads(stale, true);
    leaving_now.insert(stale.begin(), stale.end());
  }
  return endpoints_version;
}

bool endpoints_unchanged_since(uint64_t endpoints_version) { return endpoints_version_now() == endpoints_version; }

void heal() {
  // Every key with a waiting message, once; its first message, if it waits too.
  static Statement statement(R"sql(
    UPDATE outbox.messages m SET ordering_seq = NULL
      FROM (SELECT DISTINCT x.endpoint, x.ordering_key FROM outbox.messages x
             WHERE x.ordering_key IS NOT NULL AND x.ordering_seq IS NOT NULL) k
           CROSS JOIN LATERAL (
             SELECT f.id, f.ordering_seq FROM outbox.messages f
              WHERE f.endpoint = k.endpoint AND f.ordering_key = k.ordering_key
              ORDER BY f.ordering_seq NULLS FIRST LIMIT 1) f
     WHERE m.id = f.id AND f.ordering_seq IS NOT NULL
  )sql",
                             {});
  statement.run({});
}

void reordered_at_commit(const std::string& endpoint) { reordered_now |= uint64_t{1} << group_of(endpoint); }

void reordered_everything_at_commit() { reordered_now = ~uint64_t{0}; }

void forget() {
  ready_by_endpoint.clear();
  lines.clear();
  lines_pruned_at_endpoints = 0;
  lines_pruned_at_groups = {};
  held_judged_at = held_judged_now = 0;
  lost_track = healed_now = false;  // the caller heals (the worker, when it starts serving)
  found_now.clear();
  lines_now.clear();
  leaving_now.clear();
}

}  // namespace successors

}  // namespace pg_outbox::pg
