#!/usr/bin/perl
# The update from the previous release loses nothing: ALTER EXTENSION pg_outbox UPDATE
# from 0.3.0.
#
#  1. A database created at 0.3.0 is filled the way a 0.3.0 worker left it: pending
#     messages of a paused endpoint, messages of an ordered endpoint waiting behind their
#     key's head, messages in flight under that worker's claim (outbox.claims), sent
#     messages in the history, an open dead letter, and the grants of an operator and a
#     producer.  This library does not serve it: its worker waits, says why, and
#     touches nothing.
#  2. ALTER EXTENSION pg_outbox UPDATE: every grant survives (also on functions and
#     views the update creates again), every pending and in-flight message is delivered
#     once the endpoints resume (the in-flight ones with their attempt of 0.3.0
#     counted), each ordering key in its commit order, the sent ones are still found by
#     outbox.message(), and the dead letter is requeued and delivered with its original
#     webhook-id.
#  3. The updated schema is the fresh install's, object for object.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $from = '0.3.0';
my ($default_version) = slurp_file("$FindBin::RealBin/../../pg_outbox.control") =~ /default_version\s*=\s*'([^']+)'/;
isnt($default_version, $from, "the control file's default version ($default_version) is past $from");

my $node = new_outbox_node('upgrade_03', 'pg_outbox.backoff_base' => '100ms');
my $recv = start_receiver();

# ---------------------------------------------------------------------------
# 1. Data at 0.3.0

sql($node, qq{CREATE EXTENSION pg_outbox VERSION '$from'});
is(sql($node, q{SELECT extversion FROM pg_extension WHERE extname = 'pg_outbox'}), $from, "installed at $from");

# The roles of docs/operations.md, Privileges, with the grants 0.3.0's privileges file
# lists for them.
my $operator_grants = q{
	GRANT USAGE ON SCHEMA outbox, dlq TO regress_up03_ops;
	GRANT EXECUTE ON FUNCTION
	    outbox.create_endpoint(text, text, text, jsonb, text, int, int, boolean, bigint, int, int),
	    outbox.alter_endpoint(text, text, jsonb, text, int, int, boolean, bigint, int, int),
	    outbox.drop_endpoint(text, boolean), outbox.pause_endpoint(text), outbox.resume_endpoint(text),
	    outbox.purge(interval), outbox.metrics(), outbox.message(bigint), outbox.worker_status(),
	    outbox.grant_send(text, name), outbox.revoke_send(text, name),
	    dlq.requeue(bigint, jsonb), dlq.requeue_all(text, text, timestamptz), dlq.discard(bigint, text)
	  TO regress_up03_ops;
	GRANT SELECT ON outbox.endpoints, outbox.endpoint_senders, outbox.messages, outbox.history,
	                outbox.endpoint_stats, dlq.dead_letters, dlq.summary TO regress_up03_ops;
	GRANT USAGE ON SCHEMA outbox TO regress_up03_producer;
	GRANT EXECUTE ON FUNCTION outbox.enqueue(text, jsonb, text, jsonb, text, text, timestamptz) TO regress_up03_producer;
};
sql($node, q{CREATE ROLE regress_up03_ops; CREATE ROLE regress_up03_producer});
sql($node, $operator_grants);
# Every privilege of the two roles at 0.3.0, by object name: after the update each must
# still be held on the object of that name (also where the update created it again).
my $privileges = q{
	SELECT string_agg(line, E'\n' ORDER BY line) FROM (
	  SELECT DISTINCT r.rolname || ' EXECUTE ' || n.nspname || '.' || p.proname AS line
	    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
	         CROSS JOIN LATERAL aclexplode(p.proacl) a JOIN pg_roles r ON r.oid = a.grantee
	   WHERE n.nspname IN ('outbox', 'dlq') AND r.rolname LIKE 'regress_up03_%'
	  UNION
	  SELECT DISTINCT r.rolname || ' ' || a.privilege_type || ' ' || c.oid::regclass::text
	    FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a JOIN pg_roles r ON r.oid = a.grantee
	   WHERE c.relnamespace::regnamespace::text IN ('outbox', 'dlq') AND r.rolname LIKE 'regress_up03_%') x};
my $privileges_before = sql($node, $privileges);
cmp_ok(scalar(split /\n/, $privileges_before), '>=', 20, 'the roles hold their privileges at 0.3.0');

sql($node, "SELECT outbox.create_endpoint('up', url => '" . $recv->url('/hooks/up') . "')");
sql($node, "SELECT outbox.create_endpoint('ord', url => '" . $recv->url('/hooks/ord') . "', ordered => true)");
sql($node, "SELECT outbox.create_endpoint('bad', url => '" . $recv->url('/hooks/bad') . "')");
sql($node, q{SELECT outbox.grant_send('up', 'regress_up03_producer')});
sql($node, q{SELECT outbox.pause_endpoint('up'); SELECT outbox.pause_endpoint('ord')});

my @pending = map { sql($node, qq{SELECT outbox.enqueue('up', '{"n": $_}')}) } 1 .. 5;
# Three keys, four messages each, enqueued in commit order k0 k1 k2 k0 k1 k2 ...: the
# heads are due, the others wait behind them in the key's order.
my %ordered;
for my $i (1 .. 4)
{
	for my $k (0 .. 2)
	{
		push @{ $ordered{"k$k"} }, sql($node, qq{SELECT outbox.enqueue('ord', '{"i": $i}', ordering_key => 'k$k')});
	}
}
# In flight under a 0.3.0 worker: the messages stay queued and a claim lists them with
# the attempt each is on (outbox.claims).
my @in_flight = map { sql($node, qq{SELECT outbox.enqueue('up', '{"in_flight": $_}')}) } 1 .. 3;
sql($node, 'INSERT INTO outbox.claims (message_ids, attempts) VALUES (ARRAY[' . join(',', @in_flight) . "], '{1,1,1}')");
# Sent: in the history, as the worker moved them there.
my @sent = split /\n/, sql($node, q{
	INSERT INTO outbox.history (id, endpoint, payload, attempts, last_http_status, created_at, sent_at)
	SELECT nextval(pg_get_serial_sequence('outbox.messages', 'id')), 'up', jsonb_build_object('sent', g), 1, 200,
	       now() - interval '2 min', now() - interval '1 min'
	  FROM generate_series(1, 4) g RETURNING id});
# Dead: a message that the receiver refused.
my $dead = sql($node, q{SELECT outbox.enqueue('bad', '{"n": "dead"}')});
sql($node, qq{WITH m AS (DELETE FROM outbox.messages WHERE id = $dead RETURNING *)
	INSERT INTO dlq.dead_letters (message_id, endpoint, payload, reason_code, http_status, attempts, message_created_at)
	SELECT id, endpoint, payload, 'HTTP_CLIENT_ERROR', 400, 1, created_at FROM m});
my $dead_wid = sql($node, "SELECT outbox._webhook_id($dead, NULL)");
my %wid = map { $_ => sql($node, "SELECT outbox._webhook_id($_, NULL)") } @pending, @in_flight, map { @$_ } values %ordered;

my $snapshot = q{SELECT (SELECT string_agg(id || '/' || attempts || '/' || coalesce(ordering_seq::text, '-'), ',' ORDER BY id) FROM outbox.messages)
	|| ' claims ' || (SELECT string_agg(message_ids::text || attempts::text, ',') FROM outbox.claims)
	|| ' history ' || (SELECT count(*) FROM outbox.history) || ' dead ' || (SELECT count(*) FROM dlq.dead_letters)};
my $rows_03 = sql($node, $snapshot);

ok(wait_sql($node, q{SELECT state ~ 'ALTER EXTENSION pg_outbox UPDATE' FROM outbox.worker_status()}),
	"on $from the worker waits: worker_status() says for ALTER EXTENSION ... UPDATE");
ok(wait_until(sub { slurp_file($node->logfile) =~ /is version \Q$from\E; this library delivers for version \Q$default_version\E only/ }),
	'... and the log says why');
$node->restart;
ok(wait_sql($node, q{SELECT state ~ 'ALTER EXTENSION pg_outbox UPDATE' FROM outbox.worker_status()}),
	'after a restart it still waits');
is(sql($node, $snapshot), $rows_03, "... and the $from rows are untouched");
is(scalar @{ $recv->requests }, 0, '... nothing was sent');

# ---------------------------------------------------------------------------
# 2. The update

sql($node, q{ALTER EXTENSION pg_outbox UPDATE});
is(sql($node, q{SELECT extversion FROM pg_extension WHERE extname = 'pg_outbox'}), $default_version,
	"updated to $default_version");
is(sql($node, $privileges), $privileges_before, 'every privilege of the operator and the producer survived the update');
is(sql($node, q{SELECT count(*) FROM pg_proc p, aclexplode(p.proacl) a
	WHERE p.pronamespace::regnamespace::text IN ('outbox', 'dlq') AND a.grantee = 0}), '0', '... and PUBLIC has none');
# A grant an extension script gives is taken for the extension's own (pg_init_privs) and
# left out of a dump: the operator's grants must be dumped like any administrator's.
my ($dump_out) = run_command(['pg_dump', '--schema-only', '-d', $node->connstr('postgres')]);
for my $f (qw(outbox.create_endpoint outbox.alter_endpoint outbox.metrics outbox.message dlq.requeue))
{
	like($dump_out, qr/GRANT ALL ON FUNCTION \Q$f\E\([^)]*\) TO regress_up03_ops;/, "pg_dump dumps the operator's grant on $f");
}
like($dump_out, qr/GRANT SELECT ON TABLE outbox\.endpoint_stats TO regress_up03_ops;/, '... and on outbox.endpoint_stats');
ok(wait_sql($node, q{SELECT state !~ 'ALTER EXTENSION' FROM outbox.worker_status()}), 'the worker serves the database');

is(sql($node, q{SET ROLE regress_up03_producer; SELECT outbox.enqueue('up', '{"n": "producer after update"}') > 0}), 't',
	'the producer still sends to the endpoint it was granted');
my $after = sql($node, q{SELECT max(id) FROM outbox.messages WHERE endpoint = 'up'});
$wid{$after} = sql($node, "SELECT outbox._webhook_id($after, NULL)");
push @pending, $after;

is(sql($node, 'SELECT string_agg(s.status, \',\' ORDER BY h.id) FROM outbox.history h, outbox.message(h.id) s WHERE h.id IN ('
		. join(',', @sent) . ')'),
	join(',', ('sent') x 4), 'the sent messages are in the history, and outbox.message() finds them');

sql($node, q{SET ROLE regress_up03_ops; SELECT outbox.resume_endpoint('up'); SELECT outbox.resume_endpoint('ord')});
my @all = (@pending, @in_flight, map { @$_ } values %ordered);
ok(wait_until(sub {
			my %ok = (%{ $recv->answered_2xx('/hooks/up') }, %{ $recv->answered_2xx('/hooks/ord') });
			!grep { !$ok{ $wid{$_} } } @all
		}, 60),
	'every message pending, waiting behind its key or in flight across the update is delivered');
my @got = map { $_->{headers}{'webhook-id'} } @{ $recv->requests(path => '/hooks/up') }, @{ $recv->requests(path => '/hooks/ord') };
my %times;
$times{$_}++ for @got;
is(scalar(grep { $times{ $wid{$_} } != 1 } @all), 0, '... each exactly once');
ok(wait_sql($node, 'SELECT bool_and(attempts = 2) FROM outbox.history WHERE id IN (' . join(',', @in_flight) . ')'),
	"the in-flight ones count their attempt of $from (2 attempts)");
my @ord_seen = map { $_->{headers}{'webhook-id'} } @{ $recv->requests(path => '/hooks/ord') };
for my $k (sort keys %ordered)
{
	my %mine = map { $wid{$_} => 1 } @{ $ordered{$k} };
	is_deeply([ grep { $mine{$_} } @ord_seen ], [ map { $wid{$_} } @{ $ordered{$k} } ], "key $k is delivered in its commit order");
}
is(sql($node, 'SELECT count(*) FROM outbox.messages'), '0', 'the queue is empty');

my $dl = sql($node, "SELECT id FROM dlq.dead_letters WHERE message_id = $dead");
sql($node, "SET ROLE regress_up03_ops; SELECT dlq.requeue($dl)");
ok(wait_until(sub { $recv->answered_2xx('/hooks/bad')->{$dead_wid} }, 60),
	"the dead letter of $from is requeued and delivered with its original webhook-id");

# ---------------------------------------------------------------------------
# 3. The updated schema is the fresh install's.

sql($node, q{CREATE DATABASE fresh});
sql($node, q{CREATE EXTENSION pg_outbox}, 'fresh');
# The same privileges as the updated database's roles hold, on the same objects.
sql($node, sql($node, q{
	SELECT 'GRANT USAGE ON SCHEMA outbox, dlq TO regress_up03_ops; GRANT USAGE ON SCHEMA outbox TO regress_up03_producer; '
	       || string_agg(g, ' ') FROM (
	  SELECT format('GRANT EXECUTE ON FUNCTION %s TO %I;', p.oid::regprocedure, r.rolname) AS g
	    FROM pg_proc p CROSS JOIN LATERAL aclexplode(p.proacl) a JOIN pg_roles r ON r.oid = a.grantee
	   WHERE p.pronamespace::regnamespace::text IN ('outbox', 'dlq') AND r.rolname LIKE 'regress_up03_%'
	  UNION ALL
	  SELECT format('GRANT %s ON %s TO %I;', a.privilege_type, c.oid::regclass, r.rolname)
	    FROM pg_class c CROSS JOIN LATERAL aclexplode(c.relacl) a JOIN pg_roles r ON r.oid = a.grantee
	   WHERE c.relnamespace::regnamespace::text IN ('outbox', 'dlq') AND r.rolname LIKE 'regress_up03_%') x}), 'fresh');
my $fresh    = describe_schema($node, 'fresh');
my $upgraded = describe_schema($node);
cmp_ok(scalar(split /\n/, $fresh), '>', 100, 'the description covers the whole schema (over 100 lines)');
my @only_fresh    = do { my %u = map { $_ => 1 } split /\n/, $upgraded; grep { !$u{$_} } split /\n/, $fresh };
my @only_upgraded = do { my %f = map { $_ => 1 } split /\n/, $fresh;    grep { !$f{$_} } split /\n/, $upgraded };
ok(!@only_fresh && !@only_upgraded, "the updated schema equals a fresh $default_version install")
  or diag("only in the fresh install:\n" . join("\n", @only_fresh) . "\nonly after the update:\n" . join("\n", @only_upgraded));

$node->stop;
$recv->stop;
done_testing();
