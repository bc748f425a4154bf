// Running SQL from the worker's C++ code: prepared statements kept for the life of
// the process, array parameters built from C++ vectors, rows copied out as text,
// and the transaction shape of worker_spi. Every PostgreSQL call goes through
// pg_call, so an ERROR arrives as a PgError and C++ destructors still run.
#pragma once

#include "pg/boundary/postgres.hpp"

extern "C" {
#include "executor/spi.h"
}

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace pg_outbox::pg {

// Query results as text cells (nullopt for SQL NULL), in the column order of the query.
class Rows {
 public:
  Rows() = default;
  Rows(size_t columns, std::vector<std::optional<std::string>> cells) : columns_(columns), cells_(std::move(cells)) {}
  size_t size() const { return columns_ ? cells_.size() / columns_ : 0; }
  const std::optional<std::string>& at(size_t row, size_t column) const { return cells_[row * columns_ + column]; }
  std::string text(size_t row, size_t column) const { return at(row, column).value_or(""); }
  int64_t int64(size_t row, size_t column) const;  // 0 for NULL
  bool boolean(size_t row, size_t column) const { return text(row, column) == "t"; }

 private:
  size_t columns_ = 0;
  std::vector<std::optional<std::string>> cells_;
};

// A statement prepared on first use and kept (SPI_keepplan) across transactions. The
// plan cache re-plans it when the tables change (DROP/CREATE EXTENSION).
class Statement {
 public:
  Statement(const char* sql, std::vector<Oid> argument_types) : sql_(sql), argument_types_(std::move(argument_types)) {}
  // Runs inside an open transaction with SPI connected; returns the rows (if any).
  Rows run(const std::vector<Datum>& arguments) { return execute(arguments, false); }
  // The same, but reading what is committed now (a fresh snapshot, as a foreign key
  // check does) even in a REPEATABLE READ or SERIALIZABLE transaction.
  Rows run_latest(const std::vector<Datum>& arguments) { return execute(arguments, true); }

 private:
  Rows execute(const std::vector<Datum>& arguments, bool latest_snapshot);

  const char* sql_;
  std::vector<Oid> argument_types_;
  SPIPlanPtr plan_ = nullptr;
};

// Parameter values, allocated in the current (SPI) memory context.
Datum int8_array(const std::vector<int64_t>& values);
Datum int4_array(const std::vector<int32_t>& values);
Datum text_array(const std::vector<std::string>& values);
Datum text_datum(const std::string& value);

// One unit of work: start transaction, SPI, snapshot; run body; commit. If body
// throws, the caller must abort the transaction (abort_transaction below).
void in_transaction(const char* activity, const std::function<void()>& body);
void abort_transaction();

}  // namespace pg_outbox::pg
