#!/usr/bin/perl
# The library loaded WITHOUT shared_preload_libraries (docs/operations.md, "Installing the library": enqueue and
# the endpoint and DLQ functions work but nothing is delivered, worker_status() and
# metrics() fail with 55000, and a WARNING says so wherever the library loads).
#
# Without the preload, _PG_init (src/pg/module.cpp) neither requests shared memory
# nor registers the background worker: it only defines the GUCs and the commit-time
# wake, and raises a WARNING. So on such a node:
#
#  - CREATE EXTENSION works and tells the client, naming shared_preload_libraries;
#  - no pg_outbox worker runs;
#  - the SQL side works: endpoints, enqueue (returns an id), pause/resume,
#    endpoint_stats, purge, drop_endpoint(force) into the DLQ, dlq.summary,
#    dlq.requeue, dlq.discard;
#  - a committed message stays pending: the receiver gets no request;
#  - the two functions that read the worker's shared memory refuse with SQLSTATE
#    55000 (object_not_in_prerequisite_state): outbox.worker_status() directly,
#    outbox.metrics() through outbox._delivery_counters() (src/pg/status_functions.cpp).
#    They are the exception to "the SQL functions work".
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# A plain node: no shared_preload_libraries at all (new_outbox_node would add it).
my $node = PostgreSQL::Test::Cluster->new('nopreload');
$node->init;
$node->start;
my $recv = start_receiver();

# Runs one statement in a fresh session with verbose errors; returns (exit code,
# stdout, stderr). The stderr of a failure reads "ERROR:  55000: message".
sub sql_verbose
{
	my ($query) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql('postgres', "\\set VERBOSITY verbose\n$query",
		stdout => \$out, stderr => \$err);
	return ($rc, $out, $err);
}

is(sql($node, 'SHOW shared_preload_libraries'), '', 'the node does not preload anything');

# ---------------------------------------------------------------------------
# 1. CREATE EXTENSION: works, and the operator who runs it is told that nothing
#    will be delivered. The message comes from _PG_init (src/pg/module.cpp), which
#    runs when the script's CREATE FUNCTION ... LANGUAGE C loads the library in this
#    session. PostgreSQL runs extension scripts with client_min_messages raised to
#    WARNING (extension.c, execute_extension_script), so what is raised at that moment
#    reaches the client only if it is at least a WARNING: the check below looks for
#    the text at any level.

my ($rc, $out, $err) = sql_verbose('CREATE EXTENSION pg_outbox');
is($rc, 0, 'CREATE EXTENSION pg_outbox works without shared_preload_libraries')
  or diag($err);
like($err,
	qr/(NOTICE|WARNING):  [0-9A-Z]{5}: pg_outbox is not in shared_preload_libraries: messages will not be delivered/,
	'CREATE EXTENSION tells the client that nothing will be delivered');
like($err, qr/HINT:  Add pg_outbox to shared_preload_libraries and restart the server\./,
	'... with a HINT on how to fix it');
is(sql($node, q{SELECT count(*) FROM pg_extension WHERE extname = 'pg_outbox'}), '1',
	'the extension exists');
if ($rc != 0)
{
	# Everything below needs the extension: end here, failed, instead of dying in the
	# next safe_psql with the real cause buried.
	diag('CREATE EXTENSION failed; the rest of this file needs it');
	$node->stop;
	$recv->stop;
	done_testing();
	exit;
}
is(sql($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'}), '0',
	'no pg_outbox worker runs');
is(sql($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type ILIKE '%outbox%'}), '0',
	'no other pg_outbox process either');

# ---------------------------------------------------------------------------
# 2. The SQL side works.

sql($node, sprintf(q{SELECT outbox.create_endpoint('np', url => '%s')}, $recv->url('/hooks/np')));
is(sql($node, q{SELECT url FROM outbox.endpoints WHERE name = 'np'}), $recv->url('/hooks/np'),
	'create_endpoint works');
($rc, $out, $err) =
  sql_verbose(q{SELECT outbox.enqueue('np', '{"n": 1}', event_type => 'test.np')});
is($rc, 0, 'enqueue works') or diag($err);
like($out, qr/^\d+$/, 'enqueue returns an id');
my $id = $out;
# A producer's session loads the library too (the commit-time wake is a C trigger
# function), so every session that enqueues hears it too.
like($err, qr/pg_outbox is not in shared_preload_libraries: messages will not be delivered/,
	'a session that enqueues is told too');
is(sql($node, "SELECT status, attempts FROM outbox.message($id)"),
	'pending|0', 'the committed message is pending, never attempted');

sql($node, q{SELECT outbox.pause_endpoint('np')});
is(sql($node, q{SELECT paused FROM outbox.endpoints WHERE name = 'np'}), 't', 'pause_endpoint works');
sql($node, q{SELECT outbox.resume_endpoint('np')});
is(sql($node, q{SELECT paused FROM outbox.endpoints WHERE name = 'np'}), 'f', 'resume_endpoint works');
is(sql($node, q{SELECT pending, in_flight FROM outbox.endpoint_stats WHERE endpoint = 'np'}),
	'1|0', 'outbox.endpoint_stats works (one pending)');
is(sql($node, q{SELECT outbox.purge('1 hour')}), '0', 'outbox.purge works (nothing sent to purge)');

# The DLQ side: a forced drop dead-letters the undelivered message; summary,
# requeue and discard work on it.
sql($node, sprintf(q{SELECT outbox.create_endpoint('gone', url => '%s')}, $recv->url('/hooks/gone')));
my $gone_id = sql($node, q{SELECT outbox.enqueue('gone', '{"n": 2}')});
sql($node, q{SELECT outbox.drop_endpoint('gone', force => true)});
is(sql($node, qq{SELECT reason_code FROM dlq.dead_letters WHERE message_id = $gone_id}),
	'ENDPOINT_DROPPED', 'drop_endpoint(force) moves the message to the DLQ');
is(sql($node, q{SELECT endpoint, reason_code, count FROM dlq.summary}),
	'gone|ENDPOINT_DROPPED|1', 'dlq.summary works');
sql($node, sprintf(q{SELECT outbox.create_endpoint('gone', url => '%s')}, $recv->url('/hooks/gone')));
my $dl = sql($node, qq{SELECT id FROM dlq.dead_letters WHERE message_id = $gone_id});
my $requeued = sql($node, qq{SELECT dlq.requeue($dl)});
like($requeued, qr/^\d+$/, 'dlq.requeue works and returns the new id');
is(sql($node, qq{SELECT status FROM outbox.message($requeued)}), 'pending',
	'... the requeued message is pending');
my $gone_id2 = sql($node, q{SELECT outbox.enqueue('gone', '{"n": 3}')});
sql($node, q{SELECT outbox.drop_endpoint('gone', force => true)});
my $dl2 = sql($node, qq{SELECT id FROM dlq.dead_letters WHERE message_id = $gone_id2});
sql($node, qq{SELECT dlq.discard($dl2, note => 'test')});
is(sql($node, qq{SELECT discarded_at IS NOT NULL, note FROM dlq.dead_letters WHERE id = $dl2}),
	't|test', 'dlq.discard works');

# ---------------------------------------------------------------------------
# 3. Nothing is delivered. A NEGATIVE assertion: it can only be made over a bounded
#    observation window. 2 s is enough: a preloaded worker delivers within
#    milliseconds of the commit (and polls every pg_outbox.poll_interval, 1 s by
#    default), so a delivery path, if any existed, would show up well within it.
#    wait_until returns early (and the test fails) as soon as anything arrives or
#    the row changes.
my $moved = wait_until(
	sub {
		@{ $recv->requests } > 0
		  || sql($node, "SELECT status, attempts FROM outbox.message($id)") ne
		  'pending|0';
	},
	2,
	'a request or a claim (none expected)');
ok(!$moved, 'nothing was delivered or claimed within the 2 s observation window');
is(scalar @{ $recv->requests }, 0, 'the receiver got no request');
is(sql($node, "SELECT m.status, m.attempts, (SELECT count(*) FROM outbox.claims) FROM outbox.message($id) m"),
	'pending|0|0', 'the message is still pending, with no attempt and no claim');

# ---------------------------------------------------------------------------
# 4. The shared-memory readers refuse: SQLSTATE 55000.

($rc, $out, $err) = sql_verbose('SELECT * FROM outbox.worker_status()');
isnt($rc, 0, 'outbox.worker_status() fails');
like($err,
	qr/ERROR:  55000: pg_outbox is not loaded through shared_preload_libraries/,
	'outbox.worker_status(): SQLSTATE 55000, "not loaded through shared_preload_libraries"');
like($err, qr/HINT:  Add pg_outbox to shared_preload_libraries and restart the server\./,
	'... with the HINT');

($rc, $out, $err) = sql_verbose('SELECT outbox.metrics()');
isnt($rc, 0, 'outbox.metrics() fails');
like($err,
	qr/ERROR:  55000: pg_outbox is not loaded through shared_preload_libraries/,
	'outbox.metrics(): SQLSTATE 55000, same message (from outbox._delivery_counters())');
like($err, qr/_delivery_counters/, '... raised by its call of outbox._delivery_counters()');

# No backend crashed on the way (a NULL shared state dereferenced at commit, say).
my $log = slurp_file($node->logfile);
unlike($log, qr/terminated by signal|PANIC/, 'no crashed process, no PANIC in the server log');
is(sql($node, 'SELECT 1'), '1', 'the server is up');

$node->stop;
$recv->stop;
done_testing();
