// outbox.publish(): one event to every endpoint subscribed to its type, in the caller's
// transaction (docs/delivery.md, Publish and subscribe).
//
// Each subscriber gets its own message (its own row in outbox.messages, payload
// included): its own attempts, breaker, ordering and dead letter, exactly as if the
// event had been enqueued to each. The checks are enqueue's (enqueue_checks.hpp), made
// for every subscriber before anything is inserted, so a publish is all or nothing: an
// endpoint the caller may not send to, or one at its max_pending, refuses the whole
// publish with enqueue's error. Like enqueue it is not SECURITY DEFINER: the send rights
// are judged for the role that really calls it.
//
// One webhook-id for all the deliveries of an event: the publish's idempotency key when
// it has one; otherwise the first delivery's own webhook-id (msg_<instance>_<its id>),
// which the others carry as their idempotency key, the way dlq.requeue keeps a webhook-id.
#include "core/validation.hpp"
#include "pg/boundary/boundary.hpp"
#include "pg/boundary/spi.hpp"
#include "pg/ordering/ordering.hpp"
#include "pg/producer/argument_checks.hpp"
#include "pg/producer/enqueue_checks.hpp"
#include "pg/producer/enqueue_row.hpp"
#include "pg/producer/queued_count.hpp"
#include "pg/producer/subscribers.hpp"
#include "pg/runtime/commit_wake.hpp"
#include "pg/runtime/settings.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
}

#include <string>
#include <vector>

namespace pg_outbox::pg {

namespace publish {
// outbox.publish's arguments, in order.
enum Argument { kEventType, kPayload, kHeaders, kOrderingKey, kIdempotencyKey, kDeliverAt };
}  // namespace publish

namespace {

using namespace publish;
using enqueue::EndpointFacts;
using enqueue::queued_with_key;

struct Subscriber {
  std::string name;
  EndpointFacts facts;
  bool reserved = false;  // counted for max_pending by this transaction
  bool done = false;      // the message with the idempotency key is already queued
};

// This database's instance id (outbox.instance), read once per installation of the
// extension (a new one has a new table).
std::string instance_id(Oid owner) {
  static Oid known_relid = InvalidOid;
  static Oid known_database = InvalidOid;
  static std::string known;
  const Oid relid = pg_call([] { return get_relname_relid("instance", get_namespace_oid("outbox", false)); });
  if (relid == known_relid && MyDatabaseId == known_database && !known.empty()) return known;
  static Statement read("SELECT i.id FROM outbox._instance() i", {});
  as_owner(owner, [&] { with_spi([&] { known = read.run({}).text(0, 0); }); });
  known_relid = relid;
  known_database = MyDatabaseId;
  return known;
}

// The first subscriber the caller may not send to, or "" (one query for all of them).
std::string first_not_allowed(const std::vector<Subscriber>& subscribers, Oid caller, Oid owner) {
  static Statement refused(R"sql(
    SELECT e.name FROM pg_catalog.unnest($1::pg_catalog.text[]) AS e(name)
     WHERE NOT EXISTS (SELECT FROM outbox.endpoint_senders s
                        WHERE s.endpoint OPERATOR(pg_catalog.=) e.name
                          AND (s.role::pg_catalog.oid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
                               OR pg_catalog.pg_has_role($2, s.role::pg_catalog.oid, 'USAGE')))
     ORDER BY 1 LIMIT 1
  )sql",
                           {TEXTARRAYOID, OIDOID});
  std::vector<std::string> names;
  for (const Subscriber& s : subscribers) names.push_back(s.name);
  std::string first;
  as_owner(owner, [&] {
    with_spi([&] {
      Rows rows = refused.run({text_array(names), ObjectIdGetDatum(caller)}, Statement::Visibility::kReadOnly);
      if (rows.size() == 1) first = rows.text(0, 0);
    });
  });
  return first;
}

// A keyed delivery: enqueue's idempotent insert; the message is in the queue afterwards
// (inserted now, or already there).
void insert_keyed(FunctionCallInfo fcinfo, const std::string& endpoint, TimestampTz next_attempt_at, Oid owner) {
  (void)enqueue::insert_or_find_with_key(fcinfo, {kEventType, kPayload, kHeaders, kOrderingKey, kIdempotencyKey},
                                         text_datum(endpoint), next_attempt_at, owner, "publish");
}

void release_all(std::vector<Subscriber>& subscribers) {
  for (Subscriber& s : subscribers)
    if (s.reserved) {
      release_queued(s.name);
      s.reserved = false;
    }
}

}  // namespace

}  // namespace pg_outbox::pg

PG_OUTBOX_FUNCTION(pg_outbox_publish) {
  using namespace pg_outbox;
  using namespace pg_outbox::pg;
  using namespace pg_outbox::pg::publish;
  using enqueue::at_max_pending;
  using enqueue::check_key_text;
  using enqueue::insert_rows;
  using enqueue::next_message_id;
  using enqueue::queued_with_key;
  using enqueue::read_endpoint;
  using enqueue::refuse_full;
  using enqueue::stored_size;
  if (PG_ARGISNULL(kEventType)) throw SqlError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "event_type must not be NULL");
  if (PG_ARGISNULL(kPayload))
    throw SqlError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "payload must not be NULL",
                   "Use 'null'::jsonb for a JSON null payload.");
  const int64 payload_size = pg_call([&] { return stored_size(PG_GETARG_DATUM(kPayload)); });
  if (payload_size > settings.max_payload_size)
    throw SqlError(ERRCODE_PROGRAM_LIMIT_EXCEEDED, core::payload_too_large(payload_size, settings.max_payload_size),
                   "Store large documents elsewhere and send a reference to them.");
  check_key_text(PG_GETARG_DATUM(kEventType), "event_type", true);
  if (!PG_ARGISNULL(kHeaders)) check_headers(PG_GETARG_DATUM(kHeaders));
  const bool keyed = !PG_ARGISNULL(kIdempotencyKey);
  if (keyed) {
    const char* key =
        pg_call([&] { return static_cast<const char*>(TextDatumGetCString(PG_GETARG_DATUM(kIdempotencyKey))); });
    check_idempotency_key(key);
  }
  if (!PG_ARGISNULL(kOrderingKey)) check_key_text(PG_GETARG_DATUM(kOrderingKey), "ordering_key", false);
  TimestampTz next_attempt_at = pg_call([] { return GetCurrentTransactionStartTimestamp(); });
  if (!PG_ARGISNULL(kDeliverAt)) {
    const TimestampTz deliver_at = PG_GETARG_TIMESTAMPTZ(kDeliverAt);
    if (TIMESTAMP_IS_NOEND(deliver_at))
      throw SqlError(ERRCODE_INVALID_PARAMETER_VALUE, "deliver_at must not be infinity",
                     "Pause the endpoint to hold its messages back.");
    if (deliver_at > next_attempt_at) next_attempt_at = deliver_at;
  }

  const Oid caller = pg_call([] { return GetUserId(); });
  const Oid owner = called_function_owner(fcinfo);
  const bool privileged = caller == owner || pg_call([&] { return superuser_arg(caller); });
  const std::string event_type =
      pg_call([&] { return static_cast<const char*>(TextDatumGetCString(PG_GETARG_DATUM(kEventType))); });

  std::vector<Subscriber> subscribers;
  for (std::string& name : subscribers_of(event_type, owner)) {
    Subscriber s;
    s.name = std::move(name);
    const Datum datum = text_datum(s.name);
    pg_call([&] { read_endpoint(datum, s.facts); });
    if (s.facts.exists) subscribers.push_back(std::move(s));  // dropped since the lookup: not a subscriber
  }
  if (subscribers.empty()) {
    count_unmatched_publish();
    return Int64GetDatum(0);
  }
  if (!privileged) {
    const std::string refused = first_not_allowed(subscribers, caller, owner);
    if (!refused.empty()) {
      const char* role = pg_call([&] {
        return static_cast<const char*>(quote_literal_cstr(quote_identifier(GetUserNameFromId(caller, false))));
      });
      const char* quoted = pg_call([&] { return static_cast<const char*>(quote_literal_cstr(refused.c_str())); });
      throw SqlError(
          ERRCODE_INSUFFICIENT_PRIVILEGE,
          "permission denied to publish \"" + event_type + "\": it would send to endpoint \"" + refused + "\"",
          std::string("Publishing needs the send right on every subscribed endpoint; an operator grants "
                      "it with outbox.grant_send(") +
              quoted + ", " + role + ").");
    }
  }

  // max_pending, for every subscriber before anything is inserted: all or nothing.
  for (Subscriber& s : subscribers) {
    if (!s.facts.has_max_pending) continue;
    const Room room = reserve_queued(s.name, s.facts.max_pending, s.reserved);
    if (room == Room::kFull || (room == Room::kUnknown && at_max_pending(s.name, s.facts.max_pending, owner))) {
      if (s.reserved) {
        release_queued(s.name);
        s.reserved = false;
      }
      // A retried publish of an event already queued there is not new work.
      if (keyed) {
        const Datum name = text_datum(s.name);
        if (queued_with_key(name, PG_GETARG_DATUM(kIdempotencyKey), owner) != 0) {
          s.done = true;
          continue;
        }
      }
      release_all(subscribers);
      refuse_full(s.name, s.facts.max_pending);
    }
  }

  int64 deliveries = 0;
  if (keyed) {
    // Statements that note their own rows (order, max_pending): the reservations go back.
    for (Subscriber& s : subscribers) {
      if (!s.done) insert_keyed(fcinfo, s.name, next_attempt_at, owner);
      ++deliveries;
    }
    release_all(subscribers);
  } else {
    std::vector<enqueue::RowValues> rows(subscribers.size());
    // One subscriber: its message's own webhook-id is the event's; nothing to share.
    const int64 first = rows.size() > 1 ? next_message_id() : 0;
    const Datum shared_key =
        rows.size() > 1 ? text_datum("msg_" + instance_id(owner) + "_" + std::to_string(first)) : Datum(0);
    auto argument = [&](int n) {
      NullableDatum value;
      value.isnull = PG_ARGISNULL(n);
      value.value = value.isnull ? Datum(0) : PG_GETARG_DATUM(n);
      return value;
    };
    for (size_t i = 0; i < subscribers.size(); ++i) {
      enqueue::RowValues& row = rows[i];
      row.id = i == 0 ? first : 0;
      row.endpoint.value = text_datum(subscribers[i].name);
      row.endpoint.isnull = false;
      row.event_type = argument(kEventType);
      row.payload = argument(kPayload);
      row.headers = argument(kHeaders);
      row.ordering_key = argument(kOrderingKey);
      row.idempotency_key.isnull = i == 0;
      row.idempotency_key.value = i == 0 ? Datum(0) : shared_key;
      row.ordered = subscribers[i].facts.ordered;
    }
    insert_rows(rows, next_attempt_at, owner);
    deliveries = static_cast<int64>(rows.size());
    if (!PG_ARGISNULL(kOrderingKey)) {
      const std::string ordering_key =
          pg_call([&] { return static_cast<const char*>(TextDatumGetCString(PG_GETARG_DATUM(kOrderingKey))); });
      for (size_t i = 0; i < rows.size(); ++i)
        if (rows[i].ordered)
          order_at_commit(rows[i].id, subscribers[i].name, ordering_key, inserted_seq(rows[i].provisional));
    }
    place_noted_if_asked(owner);
  }
  uint32_t wake_for = kWakeReadersOnly;
  for (const Subscriber& s : subscribers) wake_for |= s.facts.wake_for;
  wake_at_commit(wake_for);
  return Int64GetDatum(deliveries);
}
