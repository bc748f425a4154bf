// Who calls outbox.read, outbox.ack and outbox.nack. They are SECURITY DEFINER (they
// write the queue as the extension's owner), so inside them current_user is the owner;
// the consume right (outbox.endpoint_consumers, docs/operations.md, Privileges) is
// judged for the role the session acts as: its SET ROLE role, else its login role.
#include "pg/boundary/boundary.hpp"

extern "C" {
#include "miscadmin.h"
}

// outbox._outer_role() RETURNS oid
PG_OUTBOX_FUNCTION(pg_outbox_outer_role) {
  (void)fcinfo;
  PG_RETURN_OID(GetOuterUserId());
}
