// The one rule that must never break: PostgreSQL errors (longjmp) and C++ exceptions
// (stack unwinding) never cross each other's frames.
//
//  - pg_call(fn): C++ code that holds RAII objects calls PostgreSQL through it. A
//    PostgreSQL ERROR raised inside fn is caught by its own sigsetjmp (PG_TRY), copied
//    out of ErrorContext and re-thrown as a C++ PgError, so destructors run normally.
//    fn itself must not throw and must not own objects with destructors.
//  - invoke_cpp(fn): every SQL-callable function enters C++ through it. Any exception
//    is caught; its message is copied into a fixed buffer, and ereport(ERROR) happens
//    only after the try/catch has ended, when no C++ frame with a live object remains.
//  - SqlError: how C++ code says "refuse this call with this SQLSTATE".
#pragma once

#include "pg/boundary/postgres.hpp"

#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

namespace pg_outbox::pg {

// A PostgreSQL error caught by pg_call. The ErrorData lives in the memory context
// that was current when pg_call started.
class PgError : public std::exception {
 public:
  explicit PgError(ErrorData* edata) : edata_(edata) {}
  const char* what() const noexcept override {
    return edata_ != nullptr && edata_->message != nullptr ? edata_->message : "PostgreSQL error";
  }
  ErrorData* data() const noexcept { return edata_; }

 private:
  ErrorData* edata_;
};

// A refusal with a SQLSTATE, thrown by our own C++ code (validation and the like).
class SqlError : public std::exception {
 public:
  SqlError(int sqlstate, std::string message, std::string hint = {})
      : sqlstate_(sqlstate), message_(std::move(message)), hint_(std::move(hint)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  int sqlstate() const noexcept { return sqlstate_; }
  const std::string& hint() const noexcept { return hint_; }

 private:
  int sqlstate_;
  std::string message_;
  std::string hint_;
};

template <typename Fn>
auto pg_call(Fn&& fn) -> decltype(fn()) {
  using Result = decltype(fn());
  MemoryContext caller_context = CurrentMemoryContext;
  ErrorData* volatile edata = nullptr;
  if constexpr (std::is_void_v<Result>) {
    PG_TRY();
    { fn(); }
    PG_CATCH();
    {
      MemoryContextSwitchTo(caller_context);
      edata = CopyErrorData();
      FlushErrorState();
    }
    PG_END_TRY();
    if (edata != nullptr) throw PgError(edata);
  } else {
    static_assert(std::is_scalar_v<Result>, "pg_call results cross a longjmp boundary: return plain values only");
    // volatile: set inside the sigsetjmp scope and read after it.
    Result volatile result{};
    PG_TRY();
    { result = fn(); }
    PG_CATCH();
    {
      MemoryContextSwitchTo(caller_context);
      edata = CopyErrorData();
      FlushErrorState();
    }
    PG_END_TRY();
    if (edata != nullptr) throw PgError(edata);
    return result;
  }
}

namespace detail {
// Sized for any message we produce; longer ones are cut, never overflowed.
constexpr size_t kMessageBuffer = 1024;
}  // namespace detail

template <typename Fn>
Datum invoke_cpp(Fn&& fn) noexcept {
  ErrorData* pg_error = nullptr;
  int sqlstate = ERRCODE_INTERNAL_ERROR;
  // Written only on the way to an error: zeroing 2 KiB at every call cost 1.7 % of the
  // worker's CPU in a NOTIFY drain (the claim's two _payload_size calls per row).
  char message[detail::kMessageBuffer];
  char hint[detail::kMessageBuffer];
  message[0] = '\0';
  hint[0] = '\0';
  try {
    return fn();
  } catch (const PgError& e) {
    pg_error = e.data();
  } catch (const SqlError& e) {
    sqlstate = e.sqlstate();
    snprintf(message, sizeof message, "%s", e.what());
    snprintf(hint, sizeof hint, "%s", e.hint().c_str());
  } catch (const std::bad_alloc&) {
    sqlstate = ERRCODE_OUT_OF_MEMORY;
    snprintf(message, sizeof message, "out of memory in pg_outbox");
  } catch (const std::exception& e) {
    snprintf(message, sizeof message, "pg_outbox internal error: %s", e.what());
  } catch (...) {
    snprintf(message, sizeof message, "pg_outbox internal error: unknown C++ exception");
  }
  // Only plain C data is alive from here on: raising is safe.
  if (pg_error != nullptr) ReThrowError(pg_error);
  ereport(ERROR, (errcode(sqlstate), errmsg("%s", message), hint[0] != '\0' ? errhint("%s", hint) : 0));
  pg_unreachable();
}

}  // namespace pg_outbox::pg

// Defines a SQL-callable function whose body is C++ running inside invoke_cpp.
// Usage: PG_OUTBOX_FUNCTION(pg_outbox_check_url) { ... return (Datum) 0; }
#define PG_OUTBOX_FUNCTION(name)                                                  \
  extern "C" {                                                                    \
  PG_FUNCTION_INFO_V1(name);                                                      \
  }                                                                               \
  static Datum name##_body(FunctionCallInfo fcinfo);                              \
  extern "C" Datum name(PG_FUNCTION_ARGS) {                                       \
    return pg_outbox::pg::invoke_cpp([fcinfo]() { return name##_body(fcinfo); }); \
  }                                                                               \
  static Datum name##_body(FunctionCallInfo fcinfo)
