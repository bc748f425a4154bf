#!/usr/bin/perl
# Upgrades lose nothing: ALTER EXTENSION pg_outbox UPDATE from the first release.
#
#  1. A database created at 0.1.0 (CREATE EXTENSION ... VERSION '0.1.0') holds a
#     pending message of a paused endpoint, a sent one, an open dead letter and a
#     grant to an operator role.  The current library serves it as it stands
#     (worker_status() shows the columns 0.1.0 declares).
#  2. ALTER EXTENSION pg_outbox UPDATE: the version is the control file's default, the
#     grant survives, worker_status() has the new columns, the pending messages are
#     delivered once the endpoint resumes, and the dead letter can be requeued and is
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

sub sql { return $node->safe_psql($_[1] // 'postgres', $_[0]) }

my ($default_version) = slurp_file("$FindBin::RealBin/../../pg_outbox.control") =~ /default_version\s*=\s*'([^']+)'/;
ok(defined $default_version && $default_version ne '0.1.0', "the control file's default version is past 0.1.0 ($default_version)");

# ---------------------------------------------------------------------------
# 1. Data at 0.1.0

sql(q{CREATE EXTENSION pg_outbox VERSION '0.1.0'});
is(sql(q{SELECT extversion FROM pg_extension WHERE extname = 'pg_outbox'}), '0.1.0', 'installed at 0.1.0');
sql(q{CREATE ROLE regress_upgrade_ops});
sql(q{GRANT USAGE ON SCHEMA outbox, dlq TO regress_upgrade_ops});
sql(q{GRANT EXECUTE ON FUNCTION outbox.worker_status(), dlq.requeue(bigint, jsonb) TO regress_upgrade_ops});
# A producer of 0.1.0: it could enqueue to every endpoint.
sql(q{CREATE ROLE regress_upgrade_producer});
sql(q{GRANT USAGE ON SCHEMA outbox TO regress_upgrade_producer});
sql(q{GRANT EXECUTE ON FUNCTION outbox.enqueue(text, jsonb, text, jsonb, text, text, timestamptz) TO regress_upgrade_producer});

sql("SELECT outbox.create_endpoint('up', url => '" . $recv->url('/hooks/up') . "')");
sql("SELECT outbox.create_endpoint('bad', url => '" . $recv->url('/hooks/bad') . "')");
$recv->add_rule(path => '/hooks/bad', status => 400, times => 1);

my $sent = sql(q{SELECT outbox.enqueue('up', '{"n": "sent before"}')});
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.messages WHERE id = $sent"), '0.1.0: a message is delivered');
my $dead = sql(q{SELECT outbox.enqueue('bad', '{"n": "dead"}')});
ok(wait_sql($node, "SELECT count(*) = 1 FROM dlq.dead_letters WHERE message_id = $dead"), '0.1.0: a message is dead-lettered');
sql(q{SELECT outbox.pause_endpoint('up')});
my @pending = map { sql(qq{SELECT outbox.enqueue('up', '{"n": $_}')}) } 1 .. 5;

# The current library serves a database still on 0.1.0.
is(sql(q{SELECT count(*) FROM outbox.worker_status() WHERE pid IS NOT NULL}), '1',
	'the new library answers worker_status() of a 0.1.0 database');
my $cols_010 = sql(q{SELECT array_length(proallargtypes, 1) FROM pg_proc
                     WHERE oid = 'outbox.worker_status()'::regprocedure});
is($cols_010, '9', '0.1.0 declares nine worker_status() columns');

# ---------------------------------------------------------------------------
# 2. The update

sql(q{ALTER EXTENSION pg_outbox UPDATE});
is(sql(q{SELECT extversion FROM pg_extension WHERE extname = 'pg_outbox'}), $default_version,
	"updated to $default_version");
is(sql(q{SELECT has_function_privilege('regress_upgrade_ops', 'outbox.worker_status()', 'EXECUTE')}), 't',
	'the grant on worker_status() survived the update');
is(sql(q{SELECT has_function_privilege('public', 'outbox.worker_status()', 'EXECUTE')}), 'f',
	'... and PUBLIC still has none');
is(sql(q{SET ROLE regress_upgrade_ops; SELECT config_loaded_at IS NOT NULL FROM outbox.worker_status()}), 't',
	'the operator reads the new config_loaded_at column');

# Send rights carried over: the 0.1.0 producer keeps every endpoint that existed; an
# endpoint created after the update needs its own grant.
is(sql(q{SET ROLE regress_upgrade_producer; SELECT outbox.enqueue('up', '{"n": "producer after update"}') > 0}), 't',
	'a producer of 0.1.0 still sends to an endpoint that existed (right carried over)');
push @pending, sql(q{SELECT max(id) FROM outbox.messages WHERE endpoint = 'up'});
sql("SELECT outbox.create_endpoint('later', url => '" . $recv->url('/hooks/later') . "')");
my ($rc, $out, $err) = $node->psql('postgres',
	q{SET ROLE regress_upgrade_producer; SELECT outbox.enqueue('later', '{}')});
like($err, qr/permission denied to send to endpoint "later"/, '... but not to an endpoint created after the update');
is(sql(q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'later'}), '0', '... and nothing was inserted');

is(sql("SELECT string_agg(status, ',' ORDER BY id) FROM outbox.messages WHERE id IN (" . join(',', @pending) . ')'),
	'pending,pending,pending,pending,pending,pending', 'the pending messages are still pending');
sql(q{SELECT outbox.resume_endpoint('up')});
ok(wait_until(sub { my $ok = $recv->answered_2xx('/hooks/up'); !grep { !$ok->{"msg_$_"} } @pending }, 60),
	'every message pending across the update is delivered (a 2xx reached the worker)');

my $dl = sql("SELECT id FROM dlq.dead_letters WHERE message_id = $dead");
my $requeued = sql("SET ROLE regress_upgrade_ops; SELECT dlq.requeue($dl)");
ok(wait_until(sub { $recv->answered_2xx('/hooks/bad')->{"msg_$dead"} }, 60),
	'the dead letter of 0.1.0 is requeued and delivered, with its original webhook-id');
isnt($requeued, $dead, '... as a new message');

# ---------------------------------------------------------------------------
# 3. The upgraded schema is the fresh install's.

# One line per object property, sorted: what the install script and the upgrade
# scripts must agree on.
my $describe = q{
SELECT line FROM (
  SELECT 'schema ' || nspname || ' acl=' || coalesce(nspacl::text, '') || ' comment=' || coalesce(obj_description(oid, 'pg_namespace'), '') AS line
    FROM pg_namespace WHERE nspname IN ('outbox', 'dlq')
  UNION ALL
  SELECT 'function ' || p.oid::regprocedure::text || ' ' || replace(pg_get_functiondef(p.oid), E'\n', ' ')
         || ' acl=' || coalesce(array_to_string(ARRAY(SELECT a::text FROM unnest(p.proacl) a ORDER BY 1), ','), '')
         || ' comment=' || coalesce(obj_description(p.oid, 'pg_proc'), '')
    FROM pg_proc p WHERE p.pronamespace::regnamespace::text IN ('outbox', 'dlq')
  UNION ALL
  SELECT 'relation ' || c.oid::regclass::text || ' kind=' || c.relkind::text
         || ' options=' || coalesce(array_to_string(c.reloptions, ','), '')
         || ' acl=' || coalesce(array_to_string(ARRAY(SELECT a::text FROM unnest(c.relacl) a ORDER BY 1), ','), '')
         || ' comment=' || coalesce(obj_description(c.oid, 'pg_class'), '')
         || CASE c.relkind WHEN 'v' THEN ' ' || pg_get_viewdef(c.oid) WHEN 'i' THEN ' ' || pg_get_indexdef(c.oid) ELSE '' END
    FROM pg_class c WHERE c.relnamespace::regnamespace::text IN ('outbox', 'dlq')
  UNION ALL
  SELECT 'column ' || a.attrelid::regclass::text || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
         || ' notnull=' || a.attnotnull || ' identity=' || a.attidentity::text
         || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
         || ' comment=' || coalesce(col_description(a.attrelid, a.attnum), '')
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE c.relnamespace::regnamespace::text IN ('outbox', 'dlq') AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT 'constraint ' || conrelid::regclass::text || '.' || conname || ' ' || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace::regnamespace::text IN ('outbox', 'dlq')
  UNION ALL
  SELECT 'trigger ' || tgrelid::regclass::text || '.' || tgname || ' ' || pg_get_triggerdef(oid)
    FROM pg_trigger WHERE NOT tgisinternal
     AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace::regnamespace::text IN ('outbox', 'dlq'))
  UNION ALL
  SELECT 'member ' || pg_describe_object(classid, objid, objsubid)
    FROM pg_depend
   WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
     AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_outbox')
  UNION ALL
  SELECT 'dumped ' || array_to_string(ARRAY(SELECT c::regclass::text FROM unnest(extconfig) c ORDER BY 1), ',')
         || ' conditions=' || array_to_string(extcondition, ',')
    FROM pg_extension WHERE extname = 'pg_outbox'
) x ORDER BY line};

sql(q{CREATE DATABASE fresh});
sql(q{CREATE EXTENSION pg_outbox}, 'fresh');
sql(q{GRANT USAGE ON SCHEMA outbox, dlq TO regress_upgrade_ops}, 'fresh');
sql(q{GRANT EXECUTE ON FUNCTION outbox.worker_status(), dlq.requeue(bigint, jsonb) TO regress_upgrade_ops}, 'fresh');
sql(q{GRANT USAGE ON SCHEMA outbox TO regress_upgrade_producer}, 'fresh');
sql(q{GRANT EXECUTE ON FUNCTION outbox.enqueue(text, jsonb, text, jsonb, text, text, timestamptz) TO regress_upgrade_producer}, 'fresh');
my $fresh    = sql($describe, 'fresh');
my $upgraded = sql($describe);
cmp_ok(scalar(split /\n/, $fresh), '>', 100, 'the description covers the whole schema (over 100 lines)');
like($fresh, qr/^function outbox\.worker_status\(\)/m, '(control: it lists worker_status())');
my @only_fresh    = do { my %u = map { $_ => 1 } split /\n/, $upgraded; grep { !$u{$_} } split /\n/, $fresh };
my @only_upgraded = do { my %f = map { $_ => 1 } split /\n/, $fresh;    grep { !$f{$_} } split /\n/, $upgraded };
ok(!@only_fresh && !@only_upgraded, "the upgraded schema equals a fresh $default_version install")
  or diag("only in the fresh install:\n" . join("\n", @only_fresh) . "\nonly after the update:\n" . join("\n", @only_upgraded));

$node->stop;
$recv->stop;
done_testing();
