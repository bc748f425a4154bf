// The TriggerData of a C function that PostgreSQL must call as a trigger; called
// otherwise (SELECT outbox._note_inserts()), it refuses with 39P01.
#pragma once

#include "pg/boundary/boundary.hpp"

extern "C" {
#include "commands/trigger.h"
}

#include <string>

namespace pg_outbox::pg {

inline TriggerData* trigger_data(FunctionCallInfo fcinfo, const char* function) {
  if (!CALLED_AS_TRIGGER(fcinfo))
    throw SqlError(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED, std::string(function) + " must be called as a trigger");
  return reinterpret_cast<TriggerData*>(fcinfo->context);
}

}  // namespace pg_outbox::pg
