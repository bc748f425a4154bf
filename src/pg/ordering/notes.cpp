// A transaction's notes of order (notes.hpp). Savepoints: a subtransaction that aborts
// takes back the changes made in it, and PostgreSQL, at the same time, discards the
// commit-time trigger events queued in it and fires again at commit those it fired
// (SET CONSTRAINTS ALL IMMEDIATE). The notes follow: notes of inserts and moves made
// in it go; a placement made in it is undone (the numbers it wrote are rolled back): its
// rows count as not placed and their notes come back, to be placed at commit; a move
// made in it gives back the place its row had. Changes made inside subtransactions are
// logged for that; those of the top transaction need no log.
#include "pg/ordering/notes.hpp"

#include <algorithm>
#include <iterator>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace pg_outbox::pg::ordering_notes {

namespace {

std::vector<Note> recorded;                   // inserted or moved, not placed yet
std::unordered_map<int64_t, int> note_count;  // how many notes of each row `recorded` holds
std::unordered_set<int64_t> placed;           // placed already

// A change to `placed` made inside a subtransaction, undone if it aborts.
struct Undo {
  SubTransactionId sub;
  bool was_placing;  // place: the note's row was placed (else a move took its place away)
  Note note;
};
// In the order they were made. While a subtransaction runs, every change logged since it
// started was made in it or in its children, numbered from it up: its abort undoes a
// suffix of the log.
std::vector<Undo> undo_log;

// Inserted rows whose commit-time trigger fired before they were noted (leave_to_noting),
// and whether one of them was noted since the last take_asked.
std::unordered_set<int64_t> awaited;
bool asked = false;

void record(Note note) {
  const int64_t id = note.id;
  recorded.push_back(std::move(note));
  ++note_count[id];
}

// `recorded` lost these notes: their counts go (no allocation).
template <typename It>
void uncount(It first, It last) {
  for (It n = first; n != last; ++n) {
    auto count = note_count.find(n->id);
    if (count != note_count.end() && --count->second == 0) note_count.erase(count);
  }
}

void log_change(bool placing, const Note& note) {
  const SubTransactionId sub = GetCurrentSubTransactionId();
  if (sub != TopSubTransactionId) undo_log.push_back({sub, placing, note});
}

void mark_placed(const std::vector<Note>& notes) {
  for (const Note& n : notes) {
    placed.insert(n.id);
    log_change(true, n);
  }
}

bool made_in(const Note& note, SubTransactionId sub) {
  return note.noted_in != InvalidSubTransactionId && note.noted_in >= sub;
}

}  // namespace

void inserted(int64_t id, const std::string& endpoint, const std::string& key, std::optional<int64_t> preset) {
  if (placed.count(id) != 0) return;  // left to its noting, and placed with another statement's rows
  record({id, endpoint, key, preset, false, GetCurrentSubTransactionId()});
  if (awaited.erase(id) != 0) asked = true;
}

void moved(int64_t id, const std::string& endpoint, const std::string& key, std::optional<int64_t> seq) {
  Note note{id, endpoint, key, seq, true, GetCurrentSubTransactionId()};
  if (placed.erase(id) != 0) log_change(false, note);  // placed already: placed again
  record(std::move(note));
}

bool is_placed(int64_t id) { return placed.count(id) != 0; }

bool is_noted(int64_t id) { return note_count.count(id) != 0; }

void leave_to_noting(int64_t id) { awaited.insert(id); }

bool take_asked() {
  const bool was = asked;
  asked = false;
  return was;
}

std::vector<Note> take_for_placing(std::optional<Note> also) {
  std::vector<Note> notes;
  notes.swap(recorded);
  note_count.clear();
  if (also && std::none_of(notes.begin(), notes.end(), [&](const Note& n) { return n.id == also->id; }))
    notes.push_back(std::move(*also));
  // Where their rows were inserted is not known: a savepoint rolled back that took their
  // placement back gives them back to their noting (at_subtransaction_abort).
  for (int64_t id : awaited) notes.push_back({id, {}, {}, std::nullopt, false, InvalidSubTransactionId, true});
  awaited.clear();
  mark_placed(notes);
  return notes;
}

std::vector<Note> take_for_placing_in(const std::vector<std::string>& endpoints, const std::vector<std::string>& keys) {
  if (recorded.empty()) return {};
  std::set<std::pair<std::string, std::string>> wanted;
  for (size_t i = 0; i < keys.size(); ++i) wanted.emplace(endpoints[i], keys[i]);
  // The rows noted in those keys, and then the keys their other notes name, and so on: a
  // row of one key moved into another is placed in it, and the transaction's rows there
  // not placed yet must go with it, or it would take them for messages the key had.
  std::unordered_set<int64_t> ids;
  for (bool grew = true; grew;) {
    grew = false;
    for (const Note& n : recorded)
      if (ids.count(n.id) == 0 && wanted.count({n.endpoint, n.key}) != 0) {
        ids.insert(n.id);
        grew = true;
      }
    for (const Note& n : recorded)
      if (ids.count(n.id) != 0 && wanted.emplace(n.endpoint, n.key).second) grew = true;
  }
  if (ids.empty()) return {};
  auto taken =
      std::stable_partition(recorded.begin(), recorded.end(), [&](const Note& n) { return ids.count(n.id) == 0; });
  std::vector<Note> notes(std::make_move_iterator(taken), std::make_move_iterator(recorded.end()));
  recorded.erase(taken, recorded.end());
  for (int64_t id : ids) note_count.erase(id);
  mark_placed(notes);
  return notes;
}

void at_transaction_end() {
  recorded.clear();
  placed.clear();
  undo_log.clear();
  note_count.clear();
  awaited.clear();
  asked = false;
}

void at_subtransaction_abort(SubTransactionId sub) {
  asked = false;  // taken by the noter right after it noted: an abort in between ends it
  // Erases and moves of elements in place: no allocation.
  for (auto n = recorded.begin(); n != recorded.end(); ++n)
    if (made_in(*n, sub)) uncount(n, std::next(n));
  recorded.erase(std::remove_if(recorded.begin(), recorded.end(), [&](const Note& n) { return made_in(n, sub); }),
                 recorded.end());
  auto first = undo_log.end();
  while (first != undo_log.begin() && std::prev(first)->sub >= sub) --first;
  if (first == undo_log.end()) return;
  try {
    std::vector<Note> back;                         // notes of the placements undone, in the order they were noted
    for (auto it = undo_log.end(); it != first;) {  // the newest first
      --it;
      if (it->was_placing) {
        placed.erase(it->note.id);
        if (it->note.unread)
          awaited.insert(it->note.id);  // its noting, still to come, places it
        else if (!made_in(it->note, sub))
          back.push_back(it->note);
      } else {
        placed.insert(it->note.id);
      }
    }
    std::reverse(back.begin(), back.end());
    for (const Note& n : back) ++note_count[n.id];
    recorded.insert(recorded.begin(), std::make_move_iterator(back.begin()), std::make_move_iterator(back.end()));
  } catch (...) {
    // Out of memory part of the way (PostgreSQL calls this: nothing may escape): the rest
    // is not undone. Rows of placements made in the aborted subtransaction may count as
    // placed, or lose their notes; their keys may be left without a head.
  }
  undo_log.erase(first, undo_log.end());
}

}  // namespace pg_outbox::pg::ordering_notes
