#include "pg/boundary/spi.hpp"

#include "pg/boundary/boundary.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "pgstat.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
}

#include <cstdlib>

namespace pg_outbox::pg {

int64_t Rows::int64(size_t row, size_t column) const {
  const auto& cell = at(row, column);
  return cell ? std::strtoll(cell->c_str(), nullptr, 10) : 0;
}

Rows Statement::execute(const std::vector<Datum>& arguments, bool latest_snapshot) {
  if (plan_ == nullptr) {
    plan_ = pg_call([&] {
      SPIPlanPtr plan =
          SPI_prepare(sql_, static_cast<int>(argument_types_.size()), const_cast<Oid*>(argument_types_.data()));
      if (plan == nullptr) elog(ERROR, "pg_outbox: SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
      if (SPI_keepplan(plan) != 0) elog(ERROR, "pg_outbox: SPI_keepplan failed");
      return plan;
    });
  }
  uint64 processed = pg_call([&] {
    Datum* values = const_cast<Datum*>(arguments.data());
    int rc = latest_snapshot
                 ? SPI_execute_snapshot(plan_, values, nullptr, GetLatestSnapshot(), InvalidSnapshot, false, true, 0)
                 : SPI_execute_plan(plan_, values, nullptr, false, 0);
    if (rc < 0) elog(ERROR, "pg_outbox: SPI_execute_plan failed: %s", SPI_result_code_string(rc));
    return SPI_tuptable != nullptr ? SPI_processed : uint64{0};
  });
  if (processed == 0) return {};
  size_t columns = static_cast<size_t>(SPI_tuptable->tupdesc->natts);
  std::vector<char*> raw(processed * columns, nullptr);
  pg_call([&] {
    for (uint64 r = 0; r < processed; ++r)
      for (size_t c = 0; c < columns; ++c)
        raw[r * columns + c] = SPI_getvalue(SPI_tuptable->vals[r], SPI_tuptable->tupdesc, static_cast<int>(c) + 1);
  });
  std::vector<std::optional<std::string>> cells;
  cells.reserve(raw.size());
  for (char* value : raw) cells.emplace_back(value ? std::optional<std::string>(value) : std::nullopt);
  pg_call([&] {
    for (char* value : raw)
      if (value) pfree(value);
    SPI_freetuptable(SPI_tuptable);
  });
  return Rows(columns, std::move(cells));
}

namespace {

template <typename T, typename ToDatum>
Datum build_array(const std::vector<T>& values, Oid element_type, ToDatum to_datum) {
  return pg_call([&] {
    int16 length;
    bool by_value;
    char align;
    get_typlenbyvalalign(element_type, &length, &by_value, &align);
    Datum* datums = static_cast<Datum*>(palloc(sizeof(Datum) * (values.empty() ? 1 : values.size())));
    for (size_t i = 0; i < values.size(); ++i) datums[i] = to_datum(values[i]);
    return PointerGetDatum(
        construct_array(datums, static_cast<int>(values.size()), element_type, length, by_value, align));
  });
}

}  // namespace

Datum int8_array(const std::vector<int64_t>& values) {
  return build_array(values, INT8OID, [](int64_t v) { return Int64GetDatum(v); });
}

Datum int4_array(const std::vector<int32_t>& values) {
  return build_array(values, INT4OID, [](int32_t v) { return Int32GetDatum(v); });
}

Datum text_array(const std::vector<std::string>& values) {
  return build_array(values, TEXTOID, [](const std::string& v) {
    return PointerGetDatum(cstring_to_text_with_len(v.data(), static_cast<int>(v.size())));
  });
}

Datum text_datum(const std::string& value) {
  return pg_call(
      [&] { return PointerGetDatum(cstring_to_text_with_len(value.data(), static_cast<int>(value.size()))); });
}

void in_transaction(const char* activity, const std::function<void()>& body) {
  pg_call([&] {
    SetCurrentStatementStartTimestamp();
    StartTransactionCommand();
    if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "pg_outbox: SPI_connect failed");
    PushActiveSnapshot(GetTransactionSnapshot());
    pgstat_report_activity(STATE_RUNNING, activity);
  });
  body();
  pg_call([] {
    SPI_finish();
    PopActiveSnapshot();
    CommitTransactionCommand();
    pgstat_report_stat(false);
    pgstat_report_activity(STATE_IDLE, nullptr);
  });
}

void abort_transaction() {
  // AbortOutOfAnyTransaction also unwinds SPI and the snapshot stack.
  pg_call([] {
    AbortOutOfAnyTransaction();
    pgstat_report_activity(STATE_IDLE, nullptr);
  });
}

}  // namespace pg_outbox::pg
