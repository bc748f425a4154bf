#include "pg/boundary/spi.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "pgstat.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
}

#include <memory>
#include <stdexcept>
#include <string_view>

namespace pg_outbox::pg {

int64_t Rows::int64(size_t row, size_t column) const {
  const Cell& c = cell(row, column);
  if (!c.number && !c.null) throw std::logic_error("pg_outbox: column " + std::to_string(column) + " is not a number");
  return c.value;
}

std::optional<int64_t> Rows::optional_int64(size_t row, size_t column) const {
  if (is_null(row, column)) return std::nullopt;
  return int64(row, column);
}

const std::string& Rows::text(size_t row, size_t column) const {
  const Cell& c = cell(row, column);
  if (c.number) throw std::logic_error("pg_outbox: column " + std::to_string(column) + " is a number");
  return c.text;
}

std::string Rows::take_text(size_t row, size_t column) {
  (void)text(row, column);
  return std::move(cells_[row * columns_ + column].text);
}

namespace {

bool is_number_type(Oid type) {
  return type == INT8OID || type == INT4OID || type == INT2OID || type == OIDOID || type == BOOLOID || type == TIDOID;
}

int64_t number_of(Datum value, Oid type) {
  switch (type) {
    case INT8OID:
      return DatumGetInt64(value);
    case INT4OID:
      return DatumGetInt32(value);
    case INT2OID:
      return DatumGetInt16(value);
    case OIDOID:
      return DatumGetObjectId(value);
    case TIDOID: {
      const auto* tid = reinterpret_cast<const ItemPointerData*>(DatumGetPointer(value));
      return tid_number(ItemPointerGetBlockNumberNoCheck(tid), ItemPointerGetOffsetNumberNoCheck(tid));
    }
    default:
      return DatumGetBool(value) ? 1 : 0;
  }
}

// Copies SPI's result out of its memory (which the next statement frees): numbers as
// numbers, text as its bytes, the rest through their output functions. One pass under
// pg_call reads every cell into plain storage (no allocation that could throw there); the
// texts become strings after it. A text column is read where its datum lies (detoasted
// if it has to be): through textout it was copied twice more and measured for its
// length, the payload of every message a claim returns among them.
Rows copy_result(uint64 processed) {
  if (processed == 0 || SPI_tuptable == nullptr) return {};
  const size_t columns = static_cast<size_t>(SPI_tuptable->tupdesc->natts);
  std::vector<Rows::Cell> cells(processed * columns);
  std::vector<std::string_view> texts(processed * columns);
  std::vector<void*> copies;  // palloc'd here (output functions, detoasted texts), freed below;
                              // reserved for one a cell, so that pg_call never allocates
  std::vector<Oid> types(columns);
  std::vector<Datum> values(columns);
  std::unique_ptr<bool[]> nulls(new bool[columns]);
  copies.reserve(processed * columns);
  pg_call([&] {
    SPITupleTable* table = SPI_tuptable;
    for (size_t c = 0; c < columns; ++c) types[c] = SPI_gettypeid(table->tupdesc, static_cast<int>(c) + 1);
    for (uint64 r = 0; r < processed; ++r) {
      // The row's columns in one walk: read one at a time, each column after a text one
      // walked the row from its start again (nocachegetattr, 1.3 % of an HTTP drain).
      heap_deform_tuple(table->vals[r], table->tupdesc, values.data(), nulls.get());
      for (size_t c = 0; c < columns; ++c) {
        Rows::Cell& cell = cells[r * columns + c];
        const int attribute = static_cast<int>(c) + 1;
        cell.number = is_number_type(types[c]);
        if (cell.number || types[c] == TEXTOID) {
          const Datum value = values[c];
          cell.null = nulls[c];
          if (cell.null) continue;
          if (cell.number) {
            cell.value = number_of(value, types[c]);
          } else {
            text* t = DatumGetTextPP(value);
            if (PointerGetDatum(t) != value) copies.push_back(t);
            texts[r * columns + c] = std::string_view(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
          }
        } else {
          char* out = SPI_getvalue(table->vals[r], table->tupdesc, attribute);
          cell.null = out == nullptr;
          if (out == nullptr) continue;
          copies.push_back(out);
          texts[r * columns + c] = out;
        }
      }
    }
  });
  for (size_t i = 0; i < texts.size(); ++i)
    if (!cells[i].null && !cells[i].number) cells[i].text = texts[i];
  pg_call([&] {
    for (void* copy : copies) pfree(copy);
    SPI_freetuptable(SPI_tuptable);
  });
  return Rows(columns, std::move(cells));
}

}  // namespace

Rows Statement::run(const std::vector<Datum>& arguments, Visibility visibility, const std::string& nulls,
                    long max_rows) {
  // PostgreSQL plans at the run (SPI_prepare_cursor only parses): on first use, and again
  // after an invalidation (an ANALYZE, a DDL).
  const LimitedPlans limited(sql_, limits_ ? &*limits_ : nullptr);
  if (plan_ == nullptr) {
    plan_ = pg_call([&] {
      SPIPlanPtr plan =
          SPI_prepare_cursor(sql_, static_cast<int>(argument_types_.size()), const_cast<Oid*>(argument_types_.data()),
                             generic_ ? CURSOR_OPT_GENERIC_PLAN : 0);
      if (plan == nullptr) elog(ERROR, "pg_outbox: SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
      if (SPI_keepplan(plan) != 0) elog(ERROR, "pg_outbox: SPI_keepplan failed");
      return plan;
    });
  }
  uint64 processed = pg_call([&] {
    Datum* values = const_cast<Datum*>(arguments.data());
    const char* null_flags = nulls.empty() ? nullptr : nulls.c_str();
    int rc = visibility == Visibility::kLatest
                 ? SPI_execute_snapshot(plan_, values, null_flags, GetLatestSnapshot(), InvalidSnapshot, false, true,
                                        max_rows)
                 : SPI_execute_plan(plan_, values, null_flags, visibility == Visibility::kReadOnly, max_rows);
    if (rc < 0) elog(ERROR, "pg_outbox: SPI_execute_plan failed: %s", SPI_result_code_string(rc));
    return SPI_tuptable != nullptr ? SPI_processed : uint64{0};
  });
  return copy_result(processed);
}

Rows run_once(const char* sql) {
  uint64 processed = pg_call([&] {
    int rc = SPI_execute(sql, true, 0);
    if (rc < 0) elog(ERROR, "pg_outbox: SPI_execute failed: %s", SPI_result_code_string(rc));
    return SPI_tuptable != nullptr ? SPI_processed : uint64{0};
  });
  return copy_result(processed);
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

Datum tid_array(const std::vector<int64_t>& tids) {
  return build_array(tids, TIDOID, [](int64_t number) {
    auto* tid = static_cast<ItemPointer>(palloc(sizeof(ItemPointerData)));
    ItemPointerSet(tid, tid_block(number), tid_offset(number));
    return PointerGetDatum(tid);
  });
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

void with_spi(const std::function<void()>& body, TriggerData* trigger) {
  pg_call([&] {
    if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "pg_outbox: SPI_connect failed");
    if (trigger != nullptr && SPI_register_trigger_data(trigger) != SPI_OK_TD_REGISTER)
      elog(ERROR, "pg_outbox: SPI_register_trigger_data failed");
  });
  body();
  pg_call([] { SPI_finish(); });
}

Oid function_owner(Oid function) {
  HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(function));
  if (!HeapTupleIsValid(tuple)) elog(ERROR, "cache lookup failed for function %u", function);
  Oid owner = reinterpret_cast<Form_pg_proc>(GETSTRUCT(tuple))->proowner;
  ReleaseSysCache(tuple);
  return owner;
}

Oid called_function_owner(FunctionCallInfo fcinfo) {
  return pg_call([&] { return function_owner(fcinfo->flinfo->fn_oid); });
}

namespace {

// Runs body, then restore: also when body throws (the exception goes on).
void run_then(const std::function<void()>& body, const std::function<void()>& restore) {
  try {
    body();
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

}  // namespace

void with_index_plans(const std::function<void()>& body) {
  int nest_level = 0;
  pg_call([&] {
    nest_level = NewGUCNestLevel();
    for (const char* name : {"enable_seqscan", "enable_bitmapscan"})
      (void)set_config_option(name, "off", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
  });
  run_then(body, [&] { pg_call([&] { AtEOXact_GUC(true, nest_level); }); });
}

void as_owner(Oid owner, const std::function<void()>& body) {
  Oid saved_user = InvalidOid;
  int saved_context = 0;
  int nest_level = 0;
  pg_call([&] {
    GetUserIdAndSecContext(&saved_user, &saved_context);
    SetUserIdAndSecContext(owner, saved_context | SECURITY_LOCAL_USERID_CHANGE);
    nest_level = NewGUCNestLevel();
    (void)set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0,
                            false);
  });
  run_then(body, [&] {
    pg_call([&] {
      AtEOXact_GUC(true, nest_level);
      SetUserIdAndSecContext(saved_user, saved_context);
    });
  });
}

}  // namespace pg_outbox::pg
