// The one way this library runs SQL: statements prepared on first use and kept for the
// life of the process, array parameters built from C++ vectors, results copied out with
// their types (integers and booleans as numbers, everything else as text), run inside
// the worker's transactions (in_transaction) or inside a SQL function or trigger of a
// backend (with_spi). Every PostgreSQL call goes through pg_call, so an ERROR arrives as
// a PgError and C++ destructors still run. Callers must not be inside pg_call.
#pragma once

#include "pg/boundary/boundary.hpp"
#include "pg/boundary/plan_limits.hpp"
#include "pg/boundary/postgres.hpp"

extern "C" {
#include "commands/trigger.h"
#include "executor/spi.h"
#include "utils/guc.h"
}

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace pg_outbox::pg {

// A row version's address (a tid: block and line number) as one integer, which Rows
// gives for a tid column and tid_array takes.
constexpr int64_t tid_number(uint32_t block, uint16_t offset) { return (int64_t{block} << 16) | offset; }
constexpr uint32_t tid_block(int64_t number) { return static_cast<uint32_t>(number >> 16); }
constexpr uint16_t tid_offset(int64_t number) { return static_cast<uint16_t>(number & 0xFFFF); }

// A query's result, in the column order of the query. Integer (int2, int4, int8, oid),
// boolean and tid columns are read as numbers, others as their text; asking a column for
// the other kind is a programming error (std::logic_error).
class Rows {
 public:
  struct Cell {
    bool null = true;
    bool number = false;  // an integer, boolean or tid (tid_number) column
    int64_t value = 0;
    std::string text;
  };
  Rows() = default;
  Rows(size_t columns, std::vector<Cell> cells) : columns_(columns), cells_(std::move(cells)) {}
  size_t size() const { return columns_ ? cells_.size() / columns_ : 0; }
  bool is_null(size_t row, size_t column) const { return cell(row, column).null; }
  int64_t int64(size_t row, size_t column) const;  // 0 for NULL
  std::optional<int64_t> optional_int64(size_t row, size_t column) const;
  bool boolean(size_t row, size_t column) const { return int64(row, column) != 0; }  // false for NULL
  const std::string& text(size_t row, size_t column) const;                          // "" for NULL
  std::string take_text(size_t row, size_t column);                                  // moves a (large) text out

 private:
  const Cell& cell(size_t row, size_t column) const { return cells_[row * columns_ + column]; }
  size_t columns_ = 0;
  std::vector<Cell> cells_;
};

// A statement prepared on first use and kept (SPI_keepplan) across transactions. The
// plan cache re-plans it when the tables change (DROP/CREATE EXTENSION). Runs with SPI
// connected: inside in_transaction or with_spi.
class Statement {
 public:
  enum class Visibility {
    kStatement,  // what a new statement of the transaction sees (its own rows included)
    kLatest,     // what is committed now, even in REPEATABLE READ (as a foreign key check reads)
    kReadOnly,   // the calling statement's snapshot, read-only (a lookup inside a function)
  };
  enum class Plan {
    kChosen,   // PostgreSQL's plan cache decides: a custom plan for each call's values while
               // it estimates those cheaper than its generic plan
    kGeneric,  // the generic plan always: for a statement run per worker round whose plan
               // does not depend on the values, where planning every call cost more than
               // running it (next_due_in_ms: 2.3 s of planning against 0.5 s of execution in
               // 20 s at 1,000 messages a second)
  };
  // limits: what its plans must not use (plan_limits.hpp), whatever the statistics say.
  Statement(const char* sql, std::vector<Oid> argument_types, Plan plan = Plan::kChosen,
            std::optional<PlanLimits> limits = std::nullopt)
      : sql_(sql), argument_types_(std::move(argument_types)), generic_(plan == Plan::kGeneric), limits_(limits) {}
  // nulls: one char per argument, 'n' for NULL (or empty: none is NULL); max_rows 0: all.
  Rows run(const std::vector<Datum>& arguments, Visibility visibility = Visibility::kStatement,
           const std::string& nulls = {}, long max_rows = 0);
  Rows run_latest(const std::vector<Datum>& arguments) { return run(arguments, Visibility::kLatest); }

 private:
  const char* sql_;
  std::vector<Oid> argument_types_;
  bool generic_;
  std::optional<PlanLimits> limits_;
  SPIPlanPtr plan_ = nullptr;
};

// A query run once, read-only, not prepared: over a trigger's transition tables, which
// exist for one call only.
Rows run_once(const char* sql);

// Parameter values, allocated in the current (SPI) memory context.
Datum int8_array(const std::vector<int64_t>& values);
Datum int4_array(const std::vector<int32_t>& values);
Datum text_array(const std::vector<std::string>& values);
Datum tid_array(const std::vector<int64_t>& tids);  // of tid_number's
Datum text_datum(const std::string& value);

// One unit of the worker's work: start transaction, SPI, snapshot; run body; commit. If
// body throws, the caller must abort the transaction (abort_transaction below).
void in_transaction(const char* activity, const std::function<void()>& body);
void abort_transaction();

// SPI connected for body, inside a SQL function or trigger of a backend; with a trigger,
// its transition tables are visible to run_once. An error leaves SPI to the
// transaction's abort, as PostgreSQL does.
void with_spi(const std::function<void()>& body, TriggerData* trigger = nullptr);

// Runs body as the extension's owner, as a SECURITY DEFINER function with search_path =
// pg_catalog, pg_temp would: a trigger or function an operator added to the outbox
// tables then never resolves a name through the caller's search_path with the owner's
// rights. The caller's identity and settings come back afterwards, also when body throws.
void as_owner(Oid owner, const std::function<void()>& body);

// Runs body with sequential and bitmap scans priced out, as the worker runs (a statement
// then takes an index path whatever the statistics of the queue say); the settings come
// back afterwards, also when body throws.
void with_index_plans(const std::function<void()>& body);
// The owner of a function (the extension's owner, for the extension's functions): whom
// as_owner acts as. May raise an ERROR: call it inside pg_call.
Oid function_owner(Oid function);
// The owner of the function being called (a C function of the extension: its owner).
Oid called_function_owner(FunctionCallInfo fcinfo);

}  // namespace pg_outbox::pg
