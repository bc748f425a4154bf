#!/usr/bin/perl
# Upgrades lose nothing: ALTER EXTENSION pg_outbox UPDATE from the first release.
#
#  1. A database created at 0.1.0 (CREATE EXTENSION ... VERSION '0.1.0') is filled the
#     way a 0.1.0 worker left it: pending messages of a paused endpoint, messages in
#     flight under that worker's claim, sent messages kept for retention, an open dead
#     letter, grants to an operator and a producer.  The library of this version does
#     not serve those tables: its worker waits, says why once in the log and in
#     worker_status(), and touches nothing, across a server restart too.
#  2. ALTER EXTENSION pg_outbox UPDATE (0.1.0 -> 0.2.0 -> current): the grants
#     survive, every pending and in-flight message is delivered once the endpoint
#     resumes (with its attempt of 0.1.0 counted), the sent ones are in the history
#     and outbox.message() finds them, and the dead letter can be requeued and is
#     delivered with its original webhook-id.
#  3. The upgraded schema is the fresh install's, object for object: functions (with
#     their definitions, privileges and comments), tables, columns, constraints,
#     indexes, views, triggers, extension membership and pg_dump configuration.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_outbox_node('upgrade', 'pg_outbox.backoff_base' => '100ms');
my $recv = start_receiver();

my ($default_version) = slurp_file("$FindBin::RealBin/../../pg_outbox.control") =~ /default_version\s*=\s*'([^']+)'/;
ok(defined $default_version && $default_version ne '0.1.0', "the control file's default version is past 0.1.0 ($default_version)");

# ---------------------------------------------------------------------------
# 1. Data at 0.1.0

sql($node, q{CREATE EXTENSION pg_outbox VERSION '0.1.0'});
is(sql($node, q{SELECT extversion FROM pg_extension WHERE extname = 'pg_outbox'}), '0.1.0', 'installed at 0.1.0');
sql($node, q{CREATE ROLE regress_upgrade_ops});
sql($node, q{GRANT USAGE ON SCHEMA outbox, dlq TO regress_upgrade_ops});
sql($node, q{GRANT EXECUTE ON FUNCTION outbox.worker_status(), dlq.requeue(bigint, jsonb) TO regress_upgrade_ops});
# The functions whose signature 0.3.0 changes (the concurrency option): dropped and
# created again by the update, their grants with them.
sql($node, q{GRANT EXECUTE ON FUNCTION outbox.create_endpoint(text, text, text, jsonb, text, int, int, boolean, bigint),
	outbox.alter_endpoint(text, text, jsonb, text, int, int, boolean, bigint) TO regress_upgrade_ops});
# A producer of 0.1.0: it could enqueue to every endpoint.
sql($node, q{CREATE ROLE regress_upgrade_producer});
sql($node, q{GRANT USAGE ON SCHEMA outbox TO regress_upgrade_producer});
sql($node, q{GRANT EXECUTE ON FUNCTION outbox.enqueue(text, jsonb, text, jsonb, text, text, timestamptz) TO regress_upgrade_producer});

sql($node, "SELECT outbox.create_endpoint('up', url => '" . $recv->url('/hooks/up') . "')");
sql($node, "SELECT outbox.create_endpoint('bad', url => '" . $recv->url('/hooks/bad') . "')");
sql($node, q{SELECT outbox.pause_endpoint('up')});
# What a 0.1.0 worker leaves behind, written as it wrote it.
my @pending = map { sql($node, qq{SELECT outbox.enqueue('up', '{"n": $_}')}) } 1 .. 5;
my @in_flight = split /\n/, sql($node, q{INSERT INTO outbox.messages (endpoint, payload, status, attempts, lease_until)
                                  SELECT 'up', jsonb_build_object('in_flight', g), 'in_flight', 1, now() + interval '5 min'
                                    FROM generate_series(1, 3) g RETURNING id});
my @sent = split /\n/, sql($node, q{INSERT INTO outbox.messages (endpoint, payload, status, attempts, sent_at, last_http_status)
                             SELECT 'up', jsonb_build_object('sent', g), 'sent', 1, now() - interval '1 min', 200
                               FROM generate_series(1, 4) g RETURNING id});
my $dead = sql($node, q{SELECT nextval(pg_get_serial_sequence('outbox.messages', 'id'))});
sql($node, qq{INSERT INTO dlq.dead_letters (message_id, endpoint, payload, reason_code, http_status, attempts,
                                     message_created_at)
       VALUES ($dead, 'bad', '{"n": "dead"}', 'HTTP_CLIENT_ERROR', 400, 1, now())});
my $rows_010 = sql($node, q{SELECT string_agg(id || status || attempts, ',' ORDER BY id) FROM outbox.messages});

# The worker of this library waits, says why, and touches nothing.
ok(wait_sql($node, q{SELECT state ~ 'ALTER EXTENSION pg_outbox UPDATE' FROM outbox.worker_status()}),
	'on 0.1.0 the worker waits: worker_status() says for ALTER EXTENSION ... UPDATE');
ok(wait_until(sub { slurp_file($node->logfile) =~ /is version 0\.1\.0; this library delivers for version \Q$default_version\E only/ }),
	'... and the log says why');
$node->restart;
ok(wait_sql($node, q{SELECT state ~ 'ALTER EXTENSION pg_outbox UPDATE' FROM outbox.worker_status()}),
	'after a restart on the new library it still waits');
sleep 1;
is(scalar(() = slurp_file($node->logfile) =~ /is version 0\.1\.0; this library/g), 2,
	'... said once per worker, not at every poll');
is(sql($node, q{SELECT string_agg(id || status || attempts, ',' ORDER BY id) FROM outbox.messages}), $rows_010,
	'... and the 0.1.0 rows are untouched');
is(scalar @{ $recv->requests }, 0, '... nothing was sent');

# ---------------------------------------------------------------------------
# 2. The update

sql($node, q{ALTER EXTENSION pg_outbox UPDATE});
is(sql($node, q{SELECT extversion FROM pg_extension WHERE extname = 'pg_outbox'}), $default_version,
	"updated to $default_version");
is(sql($node, q{SELECT has_function_privilege('regress_upgrade_ops', 'outbox.worker_status()', 'EXECUTE')}), 't',
	'the grant on worker_status() survived the update');
is(sql($node, q{SELECT has_function_privilege('public', 'outbox.worker_status()', 'EXECUTE')}), 'f',
	'... and PUBLIC still has none');
# The signatures of this version (create_endpoint and alter_endpoint gain options in
# each release), by name: exactly one of each.
my %signature = map { split /\|/ } split /\n/, sql($node, q{SELECT proname || '|' || oid::regprocedure
	FROM pg_proc WHERE pronamespace = 'outbox'::regnamespace AND proname IN ('create_endpoint', 'alter_endpoint')});
is(sql($node, qq{SELECT has_function_privilege('regress_upgrade_ops', '$signature{alter_endpoint}', 'EXECUTE')}), 't',
	'the grant on alter_endpoint() moved to its new signature');
is(sql($node, q{SELECT count(*) FROM pg_proc WHERE proname IN ('create_endpoint', 'alter_endpoint')}), '2',
	'... and the old signatures are gone');
# A grant an extension script gives is taken for the extension's own (pg_init_privs)
# and left out of a dump: the update must give it as an administrator's grant.
my ($dump_out, $dump_err) = run_command(['pg_dump', '--schema-only', '-d', $node->connstr('postgres')]);
like($dump_out, qr/GRANT ALL ON FUNCTION outbox\.alter_endpoint\([^)]*\) TO regress_upgrade_ops;/,
	'... and pg_dump dumps it (an administrator\'s grant, not the extension\'s)');
like($dump_out, qr/GRANT ALL ON FUNCTION outbox\.create_endpoint\([^)]*\) TO regress_upgrade_ops;/,
	'... for create_endpoint too');
is(sql($node, qq{SELECT count(*) FROM pg_shdepend d JOIN pg_roles r ON r.oid = d.refobjid
	WHERE r.rolname = 'regress_upgrade_ops' AND d.classid = 'pg_proc'::regclass
	AND d.objid IN ('$signature{create_endpoint}'::regprocedure, '$signature{alter_endpoint}'::regprocedure)}), '2',
	'... and the role depends on them (DROP ROLE says so)');
is(sql($node, q{SET ROLE regress_upgrade_ops; SELECT outbox.alter_endpoint('up', concurrency => 8); RESET ROLE;
	SELECT concurrency FROM outbox.endpoints WHERE name = 'up'}), "\n8",
	'the operator sets the new concurrency option');
is(sql($node, q{SET ROLE regress_upgrade_ops; SELECT config_loaded_at IS NOT NULL FROM outbox.worker_status()}), 't',
	'the operator reads the new config_loaded_at column');
ok(wait_sql($node, q{SELECT state !~ 'ALTER EXTENSION' FROM outbox.worker_status()}), 'the worker serves the database');

# Send rights carried over: the 0.1.0 producer keeps every endpoint that existed; an
# endpoint created after the update needs its own grant.
is(sql($node, q{SET ROLE regress_upgrade_producer; SELECT outbox.enqueue('up', '{"n": "producer after update"}') > 0}), 't',
	'a producer of 0.1.0 still sends to an endpoint that existed (right carried over)');
push @pending, sql($node, q{SELECT max(id) FROM outbox.messages WHERE endpoint = 'up'});
sql($node, "SELECT outbox.create_endpoint('later', url => '" . $recv->url('/hooks/later') . "')");
my ($rc, $out, $err) = $node->psql('postgres',
	q{SET ROLE regress_upgrade_producer; SELECT outbox.enqueue('later', '{}')});
like($err, qr/permission denied to send to endpoint "later"/, '... but not to an endpoint created after the update');
is(sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'later'}), '0', '... and nothing was inserted');

is(sql($node, 'SELECT string_agg(s.status, \',\' ORDER BY m.id) FROM outbox.messages m, outbox.message(m.id) s WHERE m.id IN ('
		. join(',', @pending, @in_flight) . ')'),
	join(',', ('pending') x 9), 'the pending and in-flight messages of 0.1.0 are pending');
is(sql($node, 'SELECT string_agg(s.status || s.attempts, \',\' ORDER BY h.id) FROM outbox.history h, outbox.message(h.id) s
         WHERE h.id IN (' . join(',', @sent) . ')'),
	join(',', ('sent1') x 4), 'the sent ones are in the history, and outbox.message() finds them');
sql($node, q{SELECT outbox.resume_endpoint('up')});
# The webhook-ids: msg_<id> for the messages of 0.1.0 (as they were first sent), the
# instance's for the one enqueued after the update.
my %wid = map { $_ => sql($node, "SELECT outbox._webhook_id($_, NULL)") } @pending, @in_flight;
is(scalar(grep { $wid{$_} eq "msg_$_" } @pending, @in_flight), scalar(@pending) + scalar(@in_flight) - 1,
	'messages of 0.1.0 keep the webhook-id msg_<id> they were first sent with');
like($wid{ $pending[-1] }, qr/^msg_[0-9a-f]{16}_$pending[-1]$/, '... one enqueued after the update carries the instance id');
ok(wait_until(sub { my $ok = $recv->answered_2xx('/hooks/up'); !grep { !$ok->{ $wid{$_} } } @pending, @in_flight }, 60),
	'every message pending or in flight across the update is delivered (a 2xx reached the worker)');
my %sent_ids = map { $_->{headers}{'webhook-id'} => 1 } @{ $recv->requests(path => '/hooks/up') };
is(scalar(grep { $sent_ids{"msg_$_"} } @sent), 0, '... and none that 0.1.0 had sent already');
ok(wait_sql($node, 'SELECT bool_and(attempts = 2) FROM outbox.history WHERE id IN (' . join(',', @in_flight) . ')'),
	'the in-flight ones count their attempt of 0.1.0 (2 attempts)');

my $dl = sql($node, "SELECT id FROM dlq.dead_letters WHERE message_id = $dead");
my $requeued = sql($node, "SET ROLE regress_upgrade_ops; SELECT dlq.requeue($dl)");
ok(wait_until(sub { $recv->answered_2xx('/hooks/bad')->{"msg_$dead"} }, 60),
	'the dead letter of 0.1.0 is requeued and delivered, with its original webhook-id');
isnt($requeued, $dead, '... as a new message');

# ---------------------------------------------------------------------------
# 3. The upgraded schema is the fresh install's.

sql($node, q{CREATE DATABASE fresh});
sql($node, q{CREATE EXTENSION pg_outbox}, 'fresh');
sql($node, q{GRANT USAGE ON SCHEMA outbox, dlq TO regress_upgrade_ops}, 'fresh');
sql($node, q{GRANT EXECUTE ON FUNCTION outbox.worker_status(), dlq.requeue(bigint, jsonb) TO regress_upgrade_ops}, 'fresh');
sql($node, qq{GRANT EXECUTE ON FUNCTION $signature{create_endpoint}, $signature{alter_endpoint} TO regress_upgrade_ops}, 'fresh');
sql($node, q{GRANT USAGE ON SCHEMA outbox TO regress_upgrade_producer}, 'fresh');
sql($node, q{GRANT EXECUTE ON FUNCTION outbox.enqueue(text, jsonb, text, jsonb, text, text, timestamptz) TO regress_upgrade_producer}, 'fresh');
my $fresh    = describe_schema($node, 'fresh');
my $upgraded = describe_schema($node);
cmp_ok(scalar(split /\n/, $fresh), '>', 100, 'the description covers the whole schema (over 100 lines)');
like($fresh, qr/^function outbox\.worker_status\(\)/m, '(control: it lists worker_status())');
my @only_fresh    = do { my %u = map { $_ => 1 } split /\n/, $upgraded; grep { !$u{$_} } split /\n/, $fresh };
my @only_upgraded = do { my %f = map { $_ => 1 } split /\n/, $fresh;    grep { !$f{$_} } split /\n/, $upgraded };
ok(!@only_fresh && !@only_upgraded, "the upgraded schema equals a fresh $default_version install")
  or diag("only in the fresh install:\n" . join("\n", @only_fresh) . "\nonly after the update:\n" . join("\n", @only_upgraded));

$node->stop;
$recv->stop;
done_testing();
