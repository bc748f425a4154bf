// How a table partitioned by time (the history of delivered messages, the attempt log)
// is cut into partitions.
#pragma once

namespace pg_outbox::core {

// The width of a time partition for a retention (both in seconds): the largest of
// 10 s, 1 min, 5 min, 15 min, 1 h, 6 h and 1 day that is at most a quarter of the
// retention, so that the table holds at most about 1.25 x retention of rows and
// a few partitions; never less than 10 s.
int partition_width_s(int retention_s);

}  // namespace pg_outbox::core
