#!/usr/bin/perl
# The queue holds only undelivered work; delivered messages live in a history
# partitioned by time (docs/delivery.md, "Queue and history"):
#   1. a delivered message leaves outbox.messages in the transaction that records it,
#      and is in outbox.history, in a time partition (not the default one);
#   2. outbox.message(id) tells where any message stands: pending, in_flight, sent,
#      dead (with its dead letter), and nothing for an unknown id;
#   3. endpoint_stats counts the history from outbox.history_counts, and the counts
#      agree with the rows;
#   4. retention drops whole partitions: the relations that held the rows are gone,
#      with their counts, and no DELETE ran on them;
#   5. outbox.purge() empties the history and says how many it removed;
#   6. sent_retention = 0 keeps nothing;
#   7. a pg_dump / pg_restore round trip keeps the history, its partitions, its counts,
#      the queue, the dead letters and the id sequence, and the restored database
#      delivers;
#   8. ... also when the restored database's worker made its partitions before the
#      restore brought the dump's: its empty ones give way, one with rows never does.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;

my $node = new_outbox_node('history',
	'pg_outbox.sent_retention' => '1h',
	'pg_outbox.backoff_base'   => '100ms');
my $recv = start_receiver();
sql($node, 'CREATE EXTENSION pg_outbox');
create_endpoint($node, 'h', $recv->url('/hooks/h'));
create_endpoint($node, 'slow', $recv->url('/hooks/slow'));
create_endpoint($node, 'bad', $recv->url('/hooks/bad'));
$recv->add_rule(path => '/hooks/bad', status => 400);

# ---------------------------------------------------------------------------
# 1. Delivered messages leave the queue for a time partition.
my @ids = split /\n/, sql($node, q{SELECT outbox.enqueue('h', jsonb_build_object('n', g)) FROM generate_series(1, 50) g});
ok(wait_sql($node, q{SELECT count(*) = 50 FROM outbox.history WHERE endpoint = 'h'}),
	'50 delivered messages are in the history');
is(sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'h'}), '0', '... and none is left in the queue');
is(sql($node, q{SELECT count(*) FROM outbox.history_default}), '0', '... none in the default partition');
my $partitions = sql($node, q{SELECT count(DISTINCT tableoid) FROM outbox.history WHERE endpoint = 'h'});
cmp_ok($partitions, '>=', 1, "... they are in time partitions ($partitions)");
is(sql($node, q{SELECT p.to_at - p.from_at FROM outbox._history_partitions() p
          WHERE p.from_at <= now() AND p.to_at > now()}),
	'00:15:00', 'the current partition is 15 minutes wide (a quarter of 1h of retention)');
cmp_ok(sql($node, q{SELECT count(*) FROM outbox._history_partitions() WHERE from_at > now()}), '>=', 2,
	'partitions are created ahead of need');
is(sql($node, q{SELECT count(*) FROM outbox.history h JOIN outbox._history_partitions() p ON p.partition = h.tableoid
          WHERE h.sent_at < p.from_at OR h.sent_at >= p.to_at}), '0', 'every row is within its partition\'s bounds');

# ---------------------------------------------------------------------------
# 2. outbox.message(id), wherever the row lives.
is(sql($node, "SELECT status || ' ' || attempts || ' ' || (sent_at IS NOT NULL) || ' ' || last_http_status
          FROM outbox.message($ids[0])"), 'sent 1 true 200', 'message(): a delivered message is sent, after 1 attempt');
sql($node, q{SELECT outbox.pause_endpoint('slow')});
my $pending = sql($node, q{SELECT outbox.enqueue('slow', '{"n": "held"}')});
is(sql($node, "SELECT status || ' ' || attempts FROM outbox.message($pending)"), 'pending 0',
	'message(): a message of a paused endpoint is pending');
$recv->add_rule(path => '/hooks/slow', action => 'hang', hang_ms => 3000, times => 1);
sql($node, q{SELECT outbox.resume_endpoint('slow')});
ok($recv->wait_requests('/hooks/slow', 1), 'the receiver holds the request of that message');
is(sql($node, "SELECT status FROM outbox.message($pending)"), 'in_flight', 'message(): while it is held, it is in_flight');
is(sql($node, q{SELECT in_flight FROM outbox.endpoint_stats WHERE endpoint = 'slow'}), '1', '... and endpoint_stats says so');
my $dead = sql($node, q{SELECT outbox.enqueue('bad', '{"n": "refused"}')});
ok(wait_sql($node, "SELECT status = 'dead' FROM outbox.message($dead)"), 'message(): a refused message is dead');
is(sql($node, "SELECT dead_letter_id = (SELECT id FROM dlq.dead_letters WHERE message_id = $dead)
               AND last_http_status = 400 AND attempts = 1 FROM outbox.message($dead)"),
	't', '... with its dead letter, the status the receiver gave and its attempt');
is(sql($node, 'SELECT count(*) FROM outbox.message(987654321)'), '0', 'message(): no row for an unknown id');

# ---------------------------------------------------------------------------
# 3. endpoint_stats counts the history without reading it.
is(sql($node, q{SELECT sent FROM outbox.endpoint_stats WHERE endpoint = 'h'}), '50', 'endpoint_stats: 50 sent (retained)');
is(sql($node, q{SELECT sum(sent) FROM outbox.history_counts WHERE endpoint = 'h'}), '50',
	'... from the per-partition counts the worker keeps');
like(sql($node, 'SELECT outbox.metrics()'), qr/^pg_outbox_messages\{endpoint="h",status="sent"\} 50$/m,
	'metrics(): the same count');
my $batches = sql($node, q{SELECT count(*) FROM outbox.history_counts WHERE endpoint = 'h'});
is($batches, $partitions, 'one count row per partition and endpoint, not per message');

# ---------------------------------------------------------------------------
# 4. Retention drops whole partitions.  A second server keeps 20 s: its partitions are
#    10 s wide, and the ones holding our rows go 20 to 30 s after the last was sent.
#    (A retention made shorter at run time takes effect as the wider partitions made
#    for the old one expire.)
my $short = new_outbox_node('short',
	'pg_outbox.sent_retention' => '20s',
	'pg_stat_statements.track' => 'all',
	'shared_preload_libraries' => 'pg_outbox,pg_stat_statements');
$short->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
$short->safe_psql('postgres', 'CREATE EXTENSION pg_stat_statements');
create_endpoint($short, 'h', $recv->url('/hooks/short'));
$short->safe_psql('postgres', q{SELECT outbox.enqueue('h', jsonb_build_object('n', g)) FROM generate_series(1, 30) g});
ok(wait_sql($short, q{SELECT count(*) = 30 FROM outbox.history}), 'retention 20s: 30 delivered and kept');
my @held = split /\n/, $short->safe_psql('postgres', q{SELECT DISTINCT tableoid FROM outbox.history});
is($short->safe_psql('postgres', q{SELECT count(*) FILTER (WHERE p.to_at - p.from_at <> interval '10 s') || '/' || count(*)
                                     FROM outbox._history_partitions() p}) =~ s{/\d+$}{}r,
	'0', '... in partitions 10 s wide');
ok(wait_sql($short, 'SELECT count(*) = 0 FROM pg_class WHERE oid IN (' . join(',', @held) . ')', 90),
	'retention: the partitions that held the delivered rows were dropped');
is($short->safe_psql('postgres', 'SELECT count(*) FROM outbox.history'), '0', '... the rows went with them');
is($short->safe_psql('postgres', 'SELECT count(*) FROM outbox.history_counts WHERE partition::oid IN (' . join(',', @held) . ')'),
	'0', '... and their counts');
is($short->safe_psql('postgres', q{SELECT sent FROM outbox.endpoint_stats WHERE endpoint = 'h'}), '0',
	'endpoint_stats: 0 sent retained');
my $deletes = $short->safe_psql('postgres',
	q{SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query ~* 'delete\s+from\s+(outbox\.)?history(_[0-9]|\s)'});
is($deletes, '0', 'no DELETE ran on a time partition (they were dropped whole)');
cmp_ok($short->safe_psql('postgres', q{SELECT count(*) FROM outbox._history_partitions() WHERE to_at > now()}), '>=', 1,
	'partitions for what comes next remain');
$short->stop;

# ---------------------------------------------------------------------------
# 5. purge() empties the history on demand and counts what it removed.
sql($node, q{SELECT outbox.enqueue('h', jsonb_build_object('n', g)) FROM generate_series(1, 7) g});
ok(wait_sql($node, q{SELECT count(*) = 57 FROM outbox.history WHERE endpoint = 'h'}), '7 more delivered');
my $retained = sql($node, 'SELECT count(*) FROM outbox.history');
is(sql($node, q{SELECT outbox.purge('0')}), $retained, "purge(0) removes every delivered message and says how many ($retained)");
is(sql($node, 'SELECT count(*) FROM outbox.history'), '0', '... the history is empty');
is(sql($node, 'SELECT coalesce(sum(sent), 0) FROM outbox.history_counts'), '0', '... and so are its counts');

# ---------------------------------------------------------------------------
# 6. sent_retention = 0 keeps nothing.
ok(reload_conf($node, 'pg_outbox.sent_retention' => '0'), 'sent_retention = 0 (reloaded)');
my $gone = sql($node, q{SELECT outbox.enqueue('h', '{"n": "not kept"}')});
ok($recv->wait_requests('/hooks/h', 58), 'delivered with retention 0');
ok(wait_sql($node, "SELECT count(*) = 0 FROM outbox.messages WHERE id = $gone"), '... it left the queue');
is(sql($node, "SELECT count(*) FROM outbox.history WHERE id = $gone"), '0', '... and was not kept');
is(sql($node, "SELECT count(*) FROM outbox.message($gone)"), '0', 'message(): a message not kept is unknown');

# ---------------------------------------------------------------------------
# 7. pg_dump / pg_restore keeps the history and its partitions.
ok(reload_conf($node, 'pg_outbox.sent_retention' => '1h'), 'sent_retention = 1h (reloaded)');
sql($node, q{SELECT outbox.enqueue('h', jsonb_build_object('n', g)) FROM generate_series(1, 20) g});
ok(wait_sql($node, q{SELECT count(*) = 20 FROM outbox.history WHERE endpoint = 'h'}), '20 delivered before the dump');
sql($node, q{SELECT outbox.pause_endpoint('h')});
sql($node, q{SELECT outbox.enqueue('h', '{"n": "pending at dump"}')});
# The restored database's own worker may make the next partition ahead before the
# comparison (its first round): the partitions compared are those the dump held.
my $partitions_until = q{SELECT string_agg(p.partition::text || p.from_at || p.to_at, ',' ORDER BY p.from_at)
                     FROM outbox._history_partitions() p WHERE p.to_at <= '%s'};
my $describe = q{SELECT (SELECT count(*) FROM outbox.history) || ' history, '
                     || (SELECT sum(sent) FROM outbox.history_counts) || ' counted, '
                     || (SELECT count(*) FROM outbox.messages) || ' queued, '
                     || (SELECT count(*) FROM dlq.dead_letters) || ' dead, '
                     || (SELECT sent FROM outbox.endpoint_stats WHERE endpoint = 'h') || ' sent in stats'};
my $before = sql($node, $describe);
my $last_bound = sql($node, q{SELECT max(to_at) FROM outbox._history_partitions()});
my $partitions_before = sql($node, sprintf($partitions_until, $last_bound));
cmp_ok(scalar(split /,/, $partitions_before), '>=', 2, "the history has its partitions at the dump ($partitions_before)");
my $next_id = sql($node, q{SELECT last_value FROM outbox.messages_id_seq});
my $dump = $node->basedir . '/outbox.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr('postgres'), '-f', $dump ], 'pg_dump of the database');
sql($node, 'CREATE DATABASE restored');
$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', $node->connstr('restored'), $dump ], 'pg_restore into a new database');
is(sql($node, $describe, 'restored'), $before, "the restored database holds the same ($before)");
is(sql($node, sprintf($partitions_until, $last_bound), 'restored'), $partitions_before,
	'... the same partitions, with the same bounds');
is(sql($node, q{SELECT count(*) FROM outbox.history h
          JOIN (SELECT DISTINCT partition, endpoint FROM outbox.history_counts) c ON c.partition = h.tableoid::regclass
          WHERE h.endpoint = c.endpoint}, 'restored'),
	sql($node, q{SELECT count(*) FROM outbox.history WHERE endpoint IN (SELECT endpoint FROM outbox.history_counts)}, 'restored'),
	'... and the counts point at the restored partitions');
is(sql($node, q{SELECT last_value FROM outbox.messages_id_seq}, 'restored'), $next_id, '... and the id sequence');
my $probe = sql($node, q{SELECT status FROM outbox.message((SELECT max(id) FROM outbox.history))}, 'restored');
is($probe, 'sent', 'message() finds a delivered message in the restored history');

# ---------------------------------------------------------------------------
# 8. The restored database's worker starts at the restore's CREATE EXTENSION and makes
#    its partitions for the same times as the dump's (same names; one of each parent
#    renamed here, so that one overlaps under another name). A restore that comes after
#    them still succeeds: the worker's empty partitions give way to the restored ones.
#    (Two pg_restore runs make the order certain: the extension, then the rest.)
my ($listing) = run_command([ 'pg_restore', '-l', $dump ]);
my @entries = grep { !/^;/ } split /\n/, $listing;
my @extension = grep { /EXTENSION - pg_outbox/ } @entries;
my @rest = grep { !/EXTENSION - pg_outbox/ } @entries;
is(scalar(@extension), 1, 'the dump lists the extension once');
my ($list_extension, $list_rest) = map { $node->basedir . "/$_.list" } qw(extension rest);
append_to_file($list_extension, join("\n", @extension) . "\n");
append_to_file($list_rest, join("\n", @rest) . "\n");
sql($node, 'CREATE DATABASE restored_late');
$node->command_ok([ 'pg_restore', '--exit-on-error', '-L', $list_extension, '-d', $node->connstr('restored_late'), $dump ],
	'pg_restore of the extension alone');
ok(wait_sql($node, q{SELECT count(*) > 0 FROM outbox._history_partitions() WHERE to_at > now() + interval '30 min'}, 60, 'restored_late')
	  && wait_sql($node, q{SELECT count(*) > 0 FROM outbox._partitions('outbox.attempts') WHERE to_at > now() + interval '1 day'}, 60, 'restored_late'),
	"... its worker made the partitions ahead");
my %dumped = map { /TABLE outbox (\w+) / ? ($1 => 1) : () } @entries;
my @taken = grep { $dumped{$_} } split /,/, sql($node,
	q{SELECT string_agg(c.relname, ',') FROM unnest(ARRAY['outbox.history', 'outbox.attempts']::regclass[]) parent
	   CROSS JOIN LATERAL outbox._partitions(parent) p JOIN pg_class c ON c.oid = p.partition}, 'restored_late');
cmp_ok(scalar(@taken), '>=', 2, "... with names the dump's partitions have (@taken)");
sql($node, q{DO $$ DECLARE p record; BEGIN
               FOR p IN SELECT parent, (SELECT partition FROM outbox._partitions(parent) WHERE now() >= from_at AND now() < to_at) AS current
                          FROM unnest(ARRAY['outbox.history', 'outbox.attempts']::regclass[]) parent LOOP
                   EXECUTE format('ALTER TABLE %s RENAME TO %I', p.current, 'worker_made_' || p.parent::text);
               END LOOP; END $$}, 'restored_late');
$node->command_ok([ 'pg_restore', '--exit-on-error', '-L', $list_rest, '-d', $node->connstr('restored_late'), $dump ],
	'pg_restore of the rest, after them');
is(sql($node, $describe, 'restored_late'), $before, "the late restore holds the same ($before)");
is(sql($node, sprintf($partitions_until, $last_bound), 'restored_late'), $partitions_before,
	'... the dump\'s partitions, with their bounds');
is(sql($node, q{SELECT count(*) FROM pg_class WHERE relname LIKE 'worker_made_%'}, 'restored_late'), '0',
	'... the overlapping ones under other names gave way too');

# A partition that holds rows never gives way: attaching over it fails, and it keeps them.
my $full = sql($node, q{SELECT tableoid::regclass FROM outbox.history ORDER BY id DESC LIMIT 1}, 'restored_late');
my $rows = sql($node, "SELECT count(*) FROM $full", 'restored_late');
my ($from, $to) = split /\|/, sql($node, "SELECT from_at, to_at FROM outbox._history_partitions() WHERE partition = '$full'::regclass", 'restored_late');
my ($rc, $out, $err) = $node->psql('restored_late', qq{CREATE TABLE outbox.history_over (LIKE outbox.history);
	ALTER TABLE ONLY outbox.history ATTACH PARTITION outbox.history_over FOR VALUES FROM ('$from') TO ('$to')});
like($err, qr/would overlap partition/, "attaching over a partition with rows fails ($full)");
is(sql($node, "SELECT count(*) FROM $full", 'restored_late'), $rows, "... and it keeps its $rows rows");

# A restore's CREATE TABLE of a partition waits for the partitions' advisory lock, which
# the worker holds while it makes partitions (and only tries to take): the two never
# create a table of the same name at the same moment, which fails the second on the
# catalog's unique index once the first commits (seen in CI: "duplicate key value
# violates unique constraint pg_type_typname_nsp_index").
my $maker = $node->background_psql('restored_late');
$maker->query_safe('BEGIN');
$maker->query_safe('SELECT pg_advisory_xact_lock(1868724336, 0)');
my $restorer = $node->background_psql('restored_late');
$restorer->query_until(qr/creating/,
	"\\echo creating\nCREATE TABLE outbox.history_29990101_000000 (LIKE outbox.history);\n");
ok( wait_sql(
		$node, q{SELECT count(*) = 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = 1868724336 AND NOT granted},
		30, 'restored_late'),
	"a restore's CREATE TABLE of a partition name waits while partitions are being made");
$maker->query_safe('COMMIT');
$maker->quit;
$restorer->query_safe('SELECT 1');
$restorer->quit;
is(sql($node, q{SELECT count(*) FROM pg_class WHERE relname = 'history_29990101_000000'}, 'restored_late'), '1',
	'... and goes on once they are made');

# ---------------------------------------------------------------------------
# 9. Each message keeps its own status and attempt number, whether the results settled
# together share them (two values for the whole settle) or not (one of each per row):
# three endpoints claimed together answer 200, 202, and 503 once then 200. A session holds
# the history for 250 ms after they are enqueued (the worker's lock_timeout is 500 ms),
# so that the answers that come back meanwhile are settled together.
$node->safe_psql('postgres', q{SELECT outbox.create_endpoint(e, url => u) FROM (VALUES
	('mix_ok', '} . $recv->url('/hooks/mix_ok') . q{'), ('mix_accepted', '} . $recv->url('/hooks/mix_accepted') . q{'),
	('mix_retried', '} . $recv->url('/hooks/mix_retried') . q{')) v(e, u)});
$recv->add_rule(path => '/hooks/mix_accepted', status => 202);
$recv->add_rule(path => '/hooks/mix_retried', status => 503, times => 10);
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN');
$locker->query_safe('LOCK TABLE outbox.history IN SHARE MODE');
sql($node, q{SELECT outbox.enqueue(e, jsonb_build_object('n', g)) FROM generate_series(1, 10) g,
	unnest(ARRAY['mix_ok', 'mix_accepted', 'mix_retried']) e});
Time::HiRes::sleep(0.25);    # their answers come back meanwhile
$locker->query_safe('COMMIT');
$locker->quit;
ok(wait_sql($node, q{SELECT count(*) = 30 FROM outbox.history WHERE endpoint LIKE 'mix%'}),
	'30 messages of three endpoints delivered');
is(sql($node, q{SELECT string_agg(endpoint || ' ' || attempts || ' ' || last_http_status || ' ' || n, ', ' ORDER BY endpoint)
	FROM (SELECT endpoint, attempts, last_http_status, count(*) AS n FROM outbox.history WHERE endpoint LIKE 'mix%'
	       GROUP BY 1, 2, 3) h}),
	'mix_accepted 1 202 10, mix_ok 1 200 10, mix_retried 2 200 10',
	'each message has its own endpoint\'s status and its own attempts in the history');

$node->stop;
$recv->stop;
done_testing();
