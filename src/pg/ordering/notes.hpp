// What the current transaction has done to the order of ordered keys (ordering.cpp places,
// this file remembers): the keyed messages it inserted or moved and has not placed yet,
// those it has placed, and what a savepoint rolled back takes back of all that.
// Backend-local; forgotten at the end of the transaction.
#pragma once

#include "pg/boundary/postgres.hpp"

extern "C" {
#include "access/xact.h"
}

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pg_outbox::pg::ordering_notes {

struct Note {
  int64_t id;
  std::string endpoint;
  std::string key;
  std::optional<int64_t> preset;                        // an ordering_seq the row was inserted with (a restored dump)
  bool moved = false;                                   // committed before this transaction, moved into its key by it
  SubTransactionId noted_in = InvalidSubTransactionId;  // where it was inserted or moved
  bool unread = false;  // left to its noting and placed before it: only the id is known (the
                        // rest, the number it came with too, is read from the table)
};

// A row inserted under a key. If its commit-time trigger has fired already (it left the
// row to be noted: leave_to_noting), the noter is asked to place the notes now.
void inserted(int64_t id, const std::string& endpoint, const std::string& key, std::optional<int64_t> preset);

// A row moved into a key: placed (again) at commit.
void moved(int64_t id, const std::string& endpoint, const std::string& key, std::optional<int64_t> seq);

bool is_placed(int64_t id);
// Whether the row has a note not placed yet.
bool is_noted(int64_t id);

// The commit-time trigger of this inserted row fired before the row was noted: the
// constraints are immediate and it fired at the end of the INSERT, ahead of the statement
// trigger (or the enqueue, or the publish) that notes the statement's rows. The row is
// placed when it is noted (inserted asks the noter to place the notes).
void leave_to_noting(int64_t id);
// Whether a row noted since the last call had been left to its noting (see above).
bool take_asked();

// The notes not placed yet, and the rows left to their noting (unread notes: a statement
// a trigger ran before the noting placed its rows, and a row it did not note may share
// their key), taken to be placed now; they and `also` count as placed.
std::vector<Note> take_for_placing(std::optional<Note> also = std::nullopt);

// The notes not placed yet of rows noted in these keys (endpoints[i], keys[i]), with every
// other note of the same rows and the notes of the keys those lead to, taken to be placed
// now; they count as placed.
std::vector<Note> take_for_placing_in(const std::vector<std::string>& endpoints, const std::vector<std::string>& keys);

void at_transaction_end();
// Called by PostgreSQL during the abort: does not throw.
void at_subtransaction_abort(SubTransactionId sub);

}  // namespace pg_outbox::pg::ordering_notes
