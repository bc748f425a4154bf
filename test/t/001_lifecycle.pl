#!/usr/bin/perl
# The worker's life cycle (docs/delivery.md, "Guarantees", "Shutdown, reload and restart";
# src/pg/launcher/README.md):
#
#  - the launcher runs from server start, connected to no database; a database
#    without the extension keeps no delivery worker (the one that asked exits
#    quietly: no FATAL, no "worker started" line);
#  - CREATE EXTENSION: a worker for that database runs within a second of the
#    commit and delivers;
#  - SIGTERM (pg_terminate_backend) ends it within a second; the launcher starts a
#    new one, which delivers;
#  - DROP EXTENSION: the worker exits within a second and is not started again;
#    CREATE EXTENSION again: a new worker delivers;
#  - the server log shows no PANIC and no crashed process.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

# restart_after_crash: a crashing worker must show up as failed checks below (pid,
# log), not as a server that is gone for the rest of the file.
my $node = new_outbox_node(
	'lifecycle',
	'pg_outbox.breaker_threshold' => '1000',
	'restart_after_crash'         => 'on');
my $recv = start_receiver();

sub worker_pids
{
	my $out = sql($node, q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'});
	return grep { /^\d+$/ } split /\n/, $out;
}

sub worker_state { return sql($node, 'SELECT state FROM outbox.worker_status()') }

# ---------------------------------------------------------------------------
# 1. Before CREATE EXTENSION.

ok(wait_until(sub { sql($node, q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'pg_outbox launcher'}) eq '1' },
		undef, 'the launcher'),
	'the launcher runs before any CREATE EXTENSION');
is(sql($node, q{SELECT coalesce(datname, '-') FROM pg_stat_activity WHERE backend_type = 'pg_outbox launcher'}),
	'-', '... connected to no database');
is(sql($node, q{SELECT count(*) FROM pg_extension WHERE extname = 'pg_outbox'}), '0',
	'no extension in the database yet');
# The launcher asks the database at start; the worker that asked finds no extension
# and exits. An observation window after that: no worker comes back by itself.
ok(wait_until(sub { scalar(worker_pids()) == 0 }, undef, 'no worker'),
	'no delivery worker stays in a database without the extension');
sleep(1.5);
is(scalar(worker_pids()), 0, '... and none is started again (no restart loop)');
my $log0 = slurp_file($node->logfile);
unlike($log0, qr/FATAL/, 'no FATAL in the log');
unlike($log0, qr/pg_outbox worker started/, 'no "worker started" line for a database without the extension');

# ---------------------------------------------------------------------------
# 2. CREATE EXTENSION: a worker runs within a second and delivers.

my $t_create = time;
sql($node, 'CREATE EXTENSION pg_outbox');
my $W = webhook_prefix($node);    # webhook-id = $W<id> (docs/delivery.md, Webhook id)
my $pid0 = wait_for_worker($node, undef, 10);
my $start_s = time - $t_create;
note(sprintf('worker running %.3f s after CREATE EXTENSION (psql included)', $start_s));
ok(defined $pid0, 'a worker runs after CREATE EXTENSION');
cmp_ok($start_s, '<', 2, '... within a second of the commit (2 s with psql start-up and a loaded machine)');
ok(wait_until(sub { worker_state() eq 'idle' }), 'worker_status(): idle');
my ($st_pid, $st_db) = split /\|/, sql($node, 'SELECT pid, database FROM outbox.worker_status()');
is($st_pid, $pid0, 'worker_status().pid is the pid in pg_stat_activity');
is($st_db,  'postgres', 'worker_status().database');

sql($node, sprintf("SELECT outbox.create_endpoint('life', url => '%s')", $recv->url('/hooks/life')));
my $t0 = time;
my $id1 = sql($node, q{SELECT outbox.enqueue('life', '{"phase": "first"}')});
ok($recv->wait_requests('/hooks/life', 1), 'delivered after CREATE EXTENSION');
note(sprintf('first delivery %.3f s after the enqueue', time - $t0));
is($recv->requests(path => '/hooks/life')->[0]{body}, '{"phase": "first"}', 'first message body');
ok(wait_until(sub { sql($node, "SELECT status FROM outbox.message($id1)") eq 'sent' }),
	'first message sent');
is(worker_pid($node), $pid0, 'same worker (no restart needed)');

# ---------------------------------------------------------------------------
# 3. SIGTERM while a request hangs: the worker ends within a second, the
#    launcher starts a new one, which redelivers the claimed message and
#    delivers new ones.

sql($node, sprintf("SELECT outbox.create_endpoint('term', url => '%s')", $recv->url('/hooks/term')));
$recv->add_rule(path => '/hooks/term', action => 'hang', hang_ms => 20000, times => 1);
my $hung_id = sql($node, q{SELECT outbox.enqueue('term', '{"phase": "in flight at SIGTERM"}')});
ok($recv->wait_requests('/hooks/term', 1), 'a request is hanging at the receiver');
is(sql($node, "SELECT status FROM outbox.message($hung_id)"), 'in_flight',
	'the message is in flight');

my $old = worker_pid($node);
ok(defined $old, 'worker pid known before SIGTERM');
ok(kill(0, $old), 'the worker process exists');
my $t_term = time;
# Measured on the server, from the signal to the process leaving the proc array
# (pg_terminate_backend with a timeout waits for that): no psql start-up in it.
my ($terminated, $exit_s) = split /\|/, sql($node, qq{
	SELECT pg_terminate_backend($old, 30000), extract(epoch FROM clock_timestamp() - statement_timestamp())});
note(sprintf('worker exited %.3f s after SIGTERM', $exit_s));
is($terminated, 't', 'pg_terminate_backend: the worker is gone');
cmp_ok($exit_s, '<', 1.0, 'SIGTERM ends the worker within 1 s (despite the hanging request)');

my $new;
ok( wait_until(
		sub { $new = worker_pid($node); defined $new && $new != $old }, undef, 'a new worker'),
	'the launcher started a new worker');
note(sprintf('new worker %s running %.3f s after SIGTERM', $new // 'none', time - $t_term));
isnt($new, $old, 'new worker pid');
ok(wait_until(sub { sql($node, 'SELECT pid FROM outbox.worker_status()') eq ($new // '') }),
	'worker_status() reports the new pid');

ok(wait_until(sub { sql($node, "SELECT status FROM outbox.message($hung_id)") eq 'sent' }),
	'the message in flight at SIGTERM is delivered by the new worker');
my @term = @{ $recv->requests(path => '/hooks/term') };
is_deeply([ map { $_->{response} } @term ], [ 'hang', 200 ],
	'... with one more request (hang, then 200)');
is($term[-1]{headers}{'webhook-id'}, "$W$hung_id", '... same webhook-id');
# The new worker records the attempt of the claim the old one left behind.
is(sql($node, "SELECT attempts FROM outbox.message($hung_id)"), '2',
	'... the history counts both attempts (the one cut by SIGTERM recorded on restart)');

my $id4 = sql($node, q{SELECT outbox.enqueue('life', '{"phase": "after sigterm"}')});
ok($recv->wait_requests('/hooks/life', 2), 'the restarted worker delivers a new message');
is($recv->requests(path => '/hooks/life')->[1]{headers}{'webhook-id'}, "$W$id4",
	'... the message enqueued after the restart');
ok(wait_until(sub { sql($node, "SELECT status FROM outbox.message($id4)") eq 'sent' }),
	'... and marks it sent');
is(sql($node, q{SELECT count(*) FROM outbox.messages}), '0',
	'nothing left pending or in flight (the queue is empty)');
is(sql($node, q{SELECT count(*) FROM outbox.claims}), '0', '... and the worker holds no claim');
is(scalar(worker_pids()), 1, 'exactly one worker');

# ---------------------------------------------------------------------------
# 4. DROP EXTENSION and CREATE EXTENSION again.

my $t_drop = time;
sql($node, 'DROP EXTENSION pg_outbox');
ok(wait_until(sub { !defined worker_pid($node) && !kill(0, $new) }, 10, 'worker gone after DROP'),
	'after DROP EXTENSION the worker exits');
note(sprintf('worker gone %.3f s after DROP EXTENSION', time - $t_drop));
# An observation window longer than the launcher's restart delay (1 s): a worker
# that the launcher took for crashed would be back by now.
sleep(1.5);
is(scalar(worker_pids()), 0, '... and is not started again while the extension is gone');
unlike(slurp_file($node->logfile), qr/pg_outbox worker stopped/, '... an exit, not an error');

sql($node, 'CREATE EXTENSION pg_outbox');
my $W2 = webhook_prefix($node);
isnt($W2, $W, 'the re-created extension has another instance id in its webhook-ids');
sql($node, sprintf("SELECT outbox.create_endpoint('life2', url => '%s')", $recv->url('/hooks/life2')));
my $id2 = sql($node, q{SELECT outbox.enqueue('life2', '{"phase": "recreated"}')});
ok($recv->wait_requests('/hooks/life2', 1), 'delivered after DROP + CREATE EXTENSION');
my $new2 = worker_pid($node);
ok(defined $new2 && $new2 != $new, 'by a new worker');
is($recv->requests(path => '/hooks/life2')->[0]{headers}{'webhook-id'}, "$W2$id2",
	'the recreated outbox message was delivered');
ok(wait_until(sub { sql($node, "SELECT status FROM outbox.message($id2)") eq 'sent' }),
	'recreated outbox: message marked sent');
# and it keeps delivering
my $id3 = sql($node, q{SELECT outbox.enqueue('life2', '{"phase": "recreated-2"}')});
ok($recv->wait_requests('/hooks/life2', 2), 'second delivery after the re-creation');
ok(wait_until(sub { sql($node, "SELECT status FROM outbox.message($id3)") eq 'sent' }),
	'recreated outbox: second message marked sent');
is(worker_pid($node), $new2, 'the same worker for the second message');
is(scalar(@{ $recv->requests(path => '/hooks/life') }), 2,
	'nothing more went to the dropped endpoint');

# ---------------------------------------------------------------------------
# 5. The log: no crash.

my $log = slurp_file($node->logfile);
my @panic   = grep { /PANIC/ } split /\n/, $log;
my @crashed = grep { /terminated by signal/ } split /\n/, $log;
ok(!@panic, 'no PANIC in the server log') or diag(join "\n", @panic);
ok(!@crashed, 'no process terminated by a signal (11, 6, ...)')
  or diag(join "\n", @crashed);
like($log, qr/pg_outbox worker started for database "postgres"/,
	'the log shows the worker starting');

$node->stop;
$recv->stop;
done_testing();
