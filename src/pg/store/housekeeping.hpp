// What the worker does once a second besides delivering: the time partitions of the
// history and of the attempt log, the DLQ's retention, and messages whose endpoint no
// longer exists.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pg_outbox::pg::store {

// The tables partitioned by time (extension/src/60_time_partitions.sql).
enum class TimePartitioned { kHistory, kAttempts };

// Partitions of width_s seconds exist up to the returned time (unix ms).
int64_t prepare_partitions(TimePartitioned table, int width_s);
// Drops what retention has passed; rows of a partition wider than width_s (made for a
// longer retention) are deleted one by one, so that a shorter retention holds at once.
void retire_partitions(TimePartitioned table, int retention_s, int width_s);
// Handled dead letters past retention; rows another transaction holds wait for a later round.
int64_t purge_dead_letters(int retention_s, int limit);

// Messages whose endpoint no longer exists (a plain INSERT may name any endpoint), found
// through the distinct endpoints of the queue, not by reading every row.
struct Orphan {
  int64_t id;
  int attempts;
  std::string endpoint;
  std::optional<std::string> ordering_key;  // a keyed message's key
};
std::vector<Orphan> find_orphans(const std::vector<int64_t>& excluded, int limit);

}  // namespace pg_outbox::pg::store
