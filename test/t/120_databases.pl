#!/usr/bin/perl
# Every database of a cluster (README "Databases and workers", src/pg/launcher/README.md):
#
#  1. three databases with the extension and one without: each has its own worker
#     (pg_stat_activity, worker_status()), and a message committed in each reaches
#     the receiver through that database's own wake (poll_interval is 30 s here: a
#     wake that went to another worker would leave it waiting for the poll);
#  2. isolation: a database whose worker is stuck (an ACCESS EXCLUSIVE lock held on
#     its outbox.messages) delays no other database's deliveries;
#  3. DROP DATABASE of one while its worker delivers (requests held at the receiver)
#     returns within 5 s, no worker of it comes back (no FATAL), and the others keep
#     delivering; a DROP DATABASE by a role that does not own the database stops no
#     worker; one that fails (a session connected) leaves the worker serving;
#  4. CREATE EXTENSION in the fourth database is served within 2 s, without a restart;
#  5. ALTER DATABASE ... RENAME of a served database works, and the worker comes back
#     under the new name;
#  6. a SIGKILLed worker (crash restart of the cluster) and a server restart: every
#     database is served again;
#  7. limits: with pg_outbox.max_workers = 1 the second database is not served, the
#     log says so once and worker_status() there says why; with max_worker_processes
#     too small likewise.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $node = new_outbox_node(
	'databases',
	'pg_outbox.poll_interval' => '30s',
	'restart_after_crash' => 'on',
	'pg_outbox.breaker_threshold' => '1000');
my $recv = start_receiver();
my @dbs = qw(alpha beta gamma);

sub delivered_within
{
	my ($db, $tag, $limit, $path) = @_;
	$path //= "/hooks/$db";
	my $before = scalar @{ $recv->requests(path => $path) };
	my $t0 = time;
	sql($node, qq{SELECT outbox.enqueue('ep', '{"tag": "$tag"}')}, $db);
	my $ok = $recv->wait_requests($path, $before + 1, $limit);
	return ($ok, time - $t0);
}

for my $db (@dbs, 'delta')
{
	sql($node, "CREATE DATABASE $db", 'postgres');
}
for my $db (@dbs)
{
	sql($node, 'CREATE EXTENSION pg_outbox', $db);
	sql($node, sprintf("SELECT outbox.create_endpoint('ep', url => '%s')", $recv->url("/hooks/$db")), $db);
}

# ---------------------------------------------------------------------------
# 1. One worker per database, each woken by its own database's commits.

my %pid;
for my $db (@dbs)
{
	$pid{$db} = wait_for_worker($node, undef, undef, $db);
	ok(defined $pid{$db}, "$db: a worker runs");
	is(sql($node, 'SELECT pid, database FROM outbox.worker_status()', $db), ($pid{$db} // '') . "|$db",
		"$db: worker_status() is this database's worker");
}
is(scalar(keys %{ { map { ($pid{$_} // $_) => 1 } @dbs } }), 3, 'three different workers');
ok(wait_until(sub { sql($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'}, 'postgres') eq '3' }),
	'no worker for postgres or delta (no extension there)');

for my $db (@dbs)
{
	my ($ok, $s) = delivered_within($db, 'first', 10);
	ok($ok, "$db: a message committed there is delivered");
	note(sprintf '%s: COMMIT to receipt %.3f s', $db, $s);
	cmp_ok($s, '<', 3, "$db: ... by its own wake (not after the 30 s poll)");
	is($recv->requests(path => "/hooks/$db")->[-1]{body}, '{"tag": "first"}', "$db: ... to its own endpoint");
}

my %first_wid = map { $_ => $recv->requests(path => "/hooks/$_")->[0]{headers}{'webhook-id'} } @dbs;
is(scalar(keys %{ { reverse %first_wid } }), 3,
	'the first message of each database has its own webhook-id (' . join(', ', map { $first_wid{$_} } @dbs) . ')');

# ---------------------------------------------------------------------------
# 2. Isolation: alpha's worker stuck behind a lock; beta and gamma unaffected.

# outbox.claims: the worker's claim writes there, enqueue does not. alpha's worker
# then spends its time in lock waits (lock_timeout 2 s, rolled back, retried).
my $alpha_path_before = scalar @{ $recv->requests(path => '/hooks/alpha') };
my $locker = $node->background_psql('alpha');
$locker->query_safe('BEGIN; LOCK TABLE outbox.claims IN ACCESS EXCLUSIVE MODE');
sql($node, q{SELECT outbox.enqueue('ep', '{"tag": "stuck"}')}, 'alpha');
ok(wait_sql($node, q{SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'
	AND datname = 'alpha' AND wait_event_type = 'Lock'}, 10, 'alpha'),
	"alpha's worker waits for the lock");
for my $round (1 .. 3)
{
	for my $db (qw(beta gamma))
	{
		my ($ok, $s) = delivered_within($db, "while alpha is stuck $round", 10);
		ok($ok, "$db: delivered while alpha's worker is stuck (round $round)");
		cmp_ok($s, '<', 3, sprintf('%s: ... in %.3f s', $db, $s));
	}
}
is(scalar @{ $recv->requests(path => '/hooks/alpha') }, $alpha_path_before, 'alpha delivered nothing meanwhile');
$locker->query_safe('COMMIT');
$locker->quit;
ok($recv->wait_requests('/hooks/alpha', $alpha_path_before + 1, 15), 'alpha delivers once the lock is gone');
is($recv->requests(path => '/hooks/alpha')->[-1]{body}, '{"tag": "stuck"}', '... the message that waited');

# ---------------------------------------------------------------------------
# 3. DROP DATABASE gamma while its worker has requests in flight.

$recv->add_rule(path => '/hooks/gamma', action => 'hang', hang_ms => 20000);
sql($node, q{SELECT outbox.enqueue('ep', jsonb_build_object('n', g)) FROM generate_series(1, 200) g}, 'gamma');
ok($recv->wait_requests('/hooks/gamma', 4), 'gamma: requests in flight (its first window), held by the receiver');
my $gamma_pid = worker_pid($node, 'gamma');
my $off = -s $node->logfile;
my $t_drop = time;
my ($rc, $out, $err) = $node->psql('postgres', 'DROP DATABASE gamma');
my $drop_s = time - $t_drop;
is($rc, 0, 'DROP DATABASE of a database whose worker delivers succeeds') or diag($err);
note(sprintf 'DROP DATABASE returned after %.3f s', $drop_s);
cmp_ok($drop_s, '<', 5, '... within 5 s');
ok(!kill(0, $gamma_pid), "gamma's worker is gone");
for my $db (qw(alpha beta))
{
	my ($ok, $s) = delivered_within($db, 'after the drop', 10);
	ok($ok, "$db: still delivers after DROP DATABASE gamma");
	cmp_ok($s, '<', 3, sprintf('%s: ... in %.3f s', $db, $s));
}
sleep(2);    # longer than the launcher's restart delay: a worker taken for crashed would be back
my $after_drop = log_since($node, $off);
unlike($after_drop, qr/FATAL:  database .* does not exist/, 'no worker tried to connect to the dropped database');
is(sql($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'}, 'postgres'), '2',
	'two workers left');
$recv->clear_rules;

# A role that may not drop the database does not stop its worker either.
sql($node, 'CREATE ROLE regress_not_owner LOGIN', 'postgres');
my $beta_before = worker_pid($node, 'beta');
($rc, $out, $err) = $node->psql('postgres', 'SET ROLE regress_not_owner; DROP DATABASE beta');
like($err, qr/must be owner of database beta/, 'DROP DATABASE by a role that does not own it fails');
sleep(1.5);    # longer than the launcher's restart delay
is(worker_pid($node, 'beta'), $beta_before, "... and beta's worker was not stopped (same pid)");

# A DROP DATABASE that fails (a session still connected) leaves the worker running.
my $stay = $node->background_psql('beta');
my $beta_pid = worker_pid($node, 'beta');
($rc, $out, $err) = $node->psql('postgres', 'DROP DATABASE beta');
isnt($rc, 0, 'DROP DATABASE beta fails while a session is connected');
like($err, qr/being accessed by other users/, '... with PostgreSQL\'s own error');
$stay->quit;
my $beta_back = wait_for_worker($node, $beta_pid, 10, 'beta');
ok(defined $beta_back, 'beta is served again after the failed DROP DATABASE');
my ($beta_ok) = delivered_within('beta', 'after a failed drop', 10);
ok($beta_ok, '... and delivers');

# ---------------------------------------------------------------------------
# 4. CREATE EXTENSION in delta: served within 2 s.

my $t_create = time;
sql($node, 'CREATE EXTENSION pg_outbox', 'delta');
sql($node, sprintf("SELECT outbox.create_endpoint('ep', url => '%s')", $recv->url('/hooks/delta')), 'delta');
sql($node, q{SELECT outbox.enqueue('ep', '{"tag": "new database"}')}, 'delta');
ok($recv->wait_requests('/hooks/delta', 1, 10), 'delta: delivered after CREATE EXTENSION');
my $create_s = time - $t_create;
note(sprintf 'delta: CREATE EXTENSION to receipt %.3f s (three psql calls included)', $create_s);
cmp_ok($create_s, '<', 2, 'delta: served within 2 s of CREATE EXTENSION, without a restart');

# ---------------------------------------------------------------------------
# 5. ALTER DATABASE ... RENAME of a served database.

my $delta_pid = worker_pid($node, 'delta');
($rc, $out, $err) = $node->psql('postgres', 'ALTER DATABASE delta RENAME TO epsilon');
is($rc, 0, 'ALTER DATABASE delta RENAME TO epsilon succeeds while delta is served') or diag($err);
my $eps = wait_for_worker($node, $delta_pid, 15, 'epsilon');
ok(defined $eps, 'epsilon is served by a new worker');
is(sql($node, 'SELECT database FROM outbox.worker_status()', 'epsilon'), 'epsilon', '... worker_status() has the new name');

# ---------------------------------------------------------------------------
# 6. A worker killed with SIGKILL (every process restarts) and a server restart.

kill 'KILL', worker_pid($node, 'beta');
for my $db (qw(alpha beta epsilon))
{
	ok(defined wait_for_worker($node, undef, 30, $db), "$db: served again after the crash restart");
}
$node->restart;
for my $db (qw(alpha beta epsilon))
{
	ok(defined wait_for_worker($node, undef, 30, $db), "$db: served after a server restart");
	my ($ok) = delivered_within($db, 'after restart', 10, $db eq 'epsilon' ? '/hooks/delta' : undef);
	ok($ok, "$db: delivers after the restart");
}

my @crashed = grep { !/signal 9: Killed/ } log_since($node, 0) =~ /^(.*(?:terminated by signal|PANIC).*)$/mg;
is(scalar @crashed, 0, 'no crash but the SIGKILL the test sent') or diag(join "\n", @crashed);
$node->stop;

# ---------------------------------------------------------------------------
# 7. Limits: pg_outbox.max_workers, then max_worker_processes.

{
	my $small = new_outbox_node('small', 'pg_outbox.max_workers' => '1');
	$small->safe_psql('postgres', 'CREATE DATABASE one');
	$small->safe_psql('postgres', 'CREATE DATABASE two');
	$small->safe_psql('one', 'CREATE EXTENSION pg_outbox');
	ok(defined wait_for_worker($small, undef, 10, 'one'), 'max_workers = 1: the first database is served');
	$small->safe_psql('two', 'CREATE EXTENSION pg_outbox');
	ok(wait_sql($small, q{SELECT state LIKE 'not served:%max_workers%' FROM outbox.worker_status()}, 10, 'two'),
		'... the second is not, and worker_status() there says why');
	note('two: ' . $small->safe_psql('two', 'SELECT state FROM outbox.worker_status()'));
	is($small->safe_psql('two', 'SELECT pid IS NULL FROM outbox.worker_status()'), 't', '... no pid');
	sleep(6);    # longer than the launcher's retry: said once, not every retry
	my @said = slurp_file($small->logfile) =~ /database "two" is not served: all 1 delivery workers/g;
	is(scalar @said, 1, '... the log says so once');
	$small->safe_psql('one', 'DROP EXTENSION pg_outbox');
	ok(wait_sql($small, q{SELECT pid IS NOT NULL FROM outbox.worker_status()}, 15, 'two'),
		'once the first database frees its worker, the second is served');
	$small->stop;
}
{
	# The logical replication launcher takes the second background worker slot.
	my $tiny = new_outbox_node('tiny', 'max_worker_processes' => '2');
	$tiny->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
	ok(wait_sql($tiny, q{SELECT state LIKE 'not served:%max_worker_processes%' FROM outbox.worker_status()}, 10),
		'max_worker_processes too small: worker_status() says why');
	note('tiny: ' . $tiny->safe_psql('postgres', 'SELECT state FROM outbox.worker_status()'));
	sleep(6);
	my @said = slurp_file($tiny->logfile) =~ /database "postgres" is not served: no background worker slot/g;
	is(scalar @said, 1, '... the log says so once');
	$tiny->stop;
}

$recv->stop;
done_testing();

