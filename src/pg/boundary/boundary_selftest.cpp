// outbox._boundary_selftest(kind): proves, from SQL, that the C++/PostgreSQL boundary
// holds. Each kind fails in a different way while a C++ object with a destructor is
// alive; the regress suite checks that each becomes a clean SQL error and that the
// backend survives. Not granted to anyone: it is for the test suite.
#include "pg/boundary/boundary.hpp"

extern "C" {
#include "utils/builtins.h"
}

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// Counts live guards: a destructor skipped by a longjmp would leave the count up.
int live_guards = 0;
struct LiveGuard {
  LiveGuard() { ++live_guards; }
  ~LiveGuard() { --live_guards; }
  LiveGuard(const LiveGuard&) = delete;
  LiveGuard& operator=(const LiveGuard&) = delete;
};

}  // namespace

PG_OUTBOX_FUNCTION(pg_outbox_boundary_selftest) {
  if (PG_ARGISNULL(0)) throw pg_outbox::pg::SqlError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "kind must not be null");
  std::string kind =
      pg_outbox::pg::pg_call([&] { return static_cast<const char*>(text_to_cstring(PG_GETARG_TEXT_PP(0))); });
  if (live_guards != 0)
    throw std::logic_error("a destructor was skipped by an earlier call (" + std::to_string(live_guards) + ")");
  LiveGuard guard;
  auto owned = std::make_unique<std::vector<int>>(1000, 7);
  if (kind == "std_exception") throw std::runtime_error("selftest std::runtime_error");
  if (kind == "bad_alloc") throw std::bad_alloc();
  if (kind == "unknown") throw 42;
  if (kind == "pg_error_in_cpp") {
    // A PostgreSQL ERROR raised under C++ frames: it must unwind them as a PgError.
    pg_outbox::pg::pg_call(
        [] { ereport(ERROR, (errcode(ERRCODE_DIVISION_BY_ZERO), errmsg("selftest PostgreSQL error"))); });
  }
  if (kind != "ok")
    throw pg_outbox::pg::SqlError(ERRCODE_INVALID_PARAMETER_VALUE, "unknown selftest kind \"" + kind + "\"");
  std::string answer = "ok: " + std::to_string(owned->size()) + " live guards " + std::to_string(live_guards);
  return pg_outbox::pg::pg_call([&] { return PointerGetDatum(cstring_to_text(answer.c_str())); });
}
