#!/usr/bin/perl
# The worker as a process (docs/delivery.md, "Wake at commit", "Shutdown, reload and restart",
# the worker_status() row of the function table; SECURITY.md threat model):
#
#  - it connects as the bootstrap superuser (the role with oid 10) to
#    its database;
#  - worker_status(): started_at is the process start of the worker seen in
#    pg_stat_activity, last_loop_at advances, in_flight counts a request held at
#    the receiver and drops to 0 once it is answered, config_loaded_at is the
#    configuration load the worker runs with and moves on a reload;
#  - a claim is a row of outbox.claims that lists the message with the attempt it is
#    on (1); the queue row keeps the attempts already recorded (0) until the settle,
#    and outbox.message() reports it in_flight;
#  - while a request waits on the network the worker holds no transaction open;
#  - a worker that died (pg_terminate_backend: FATAL, exit code 1) is started again
#    by the launcher 1 s later (kCrashRestartMs, src/pg/launcher/launcher.cpp),
#    without crash recovery.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

# pg_outbox.lease keeps its default (5min) here; since 0.3.0 it no longer limits a
# claim while the worker runs (t/035).
my $HOLD_MS = 8000;   # how long the receiver holds the one slow request unanswered

my $node = new_outbox_node('worker_process', 'pg_outbox.breaker_threshold' => '1000');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $recv = start_receiver();

my $pid = wait_for_worker($node);
ok(defined $pid, 'a pg_outbox worker runs');
is(sql($node, 'SHOW pg_outbox.lease'), '5min', 'pg_outbox.lease is the default 5min');

# ---------------------------------------------------------------------------
# 1. The role: the bootstrap superuser (BackgroundWorkerInitializeConnectionByOid with no
#    user name), connected to its database.

my $bootstrap = sql($node, 'SELECT rolname FROM pg_roles WHERE oid = 10');
isnt($bootstrap, '', "the bootstrap superuser is '$bootstrap'");
is(sql($node, "SELECT usename FROM pg_stat_activity WHERE pid = $pid"), $bootstrap,
	'the worker connects as the bootstrap superuser (pg_stat_activity.usename)');
is(sql($node, "SELECT usesysid, datname FROM pg_stat_activity WHERE pid = $pid"), '10|postgres',
	'... role oid 10, its database');

# ---------------------------------------------------------------------------
# 2. worker_status(): identity and clocks.

is(sql($node, 'SELECT pid, database FROM outbox.worker_status()'), "$pid|postgres",
	'worker_status(): pid and database');

# started_at is taken when the worker's main loop begins, right after the connection
# is set up; backend_start is the fork. Equal to the second: the same moment, less
# the connection set-up.
sub start_gap
{
	my ($p) = @_;
	return sql($node, qq{SELECT extract(epoch FROM s.started_at - a.backend_start)
	                FROM outbox.worker_status() s JOIN pg_stat_activity a ON a.pid = s.pid
	               WHERE s.pid = $p});
}
my $gap = start_gap($pid);
note("worker_status().started_at - pg_stat_activity.backend_start = $gap s");
ok($gap ne '' && $gap >= 0 && $gap < 1,
	'worker_status().started_at is the worker\'s backend_start, to the second');

# last_loop_at advances on its own (poll_interval 200 ms here, nothing to deliver).
my $loop1 = sql($node, 'SELECT last_loop_at FROM outbox.worker_status()');
ok($loop1 ne '', "last_loop_at is set ($loop1)");
is(sql($node, "SELECT '$loop1' >= started_at AND '$loop1' <= clock_timestamp() FROM outbox.worker_status()"),
	't', 'last_loop_at lies between started_at and now');
ok(wait_sql($node, "SELECT last_loop_at > '$loop1' FROM outbox.worker_status()", 30),
	'last_loop_at advances');

# config_loaded_at is the worker's pg_conf_load_time() (extension/pg_outbox--0.2.0.sql):
# before any reload, the load it inherited from the postmaster, which a fresh session
# inherits too, so it precedes started_at; after a reload, the worker's own re-read,
# which comes after the postmaster's (a fresh session then shows the postmaster's).
my $conf1 = sql($node, 'SELECT config_loaded_at FROM outbox.worker_status()');
ok($conf1 ne '', "config_loaded_at is set ($conf1)");
is(sql($node, "SELECT '$conf1' = pg_conf_load_time(), '$conf1' <= started_at FROM outbox.worker_status()"),
	't|t', 'at start: config_loaded_at is the server\'s configuration load, before started_at');
my $before_reload = sql($node, 'SELECT clock_timestamp()');
ok(reload_conf($node, 'pg_outbox.batch_size' => '400'), 'reload of pg_outbox.batch_size seen by the worker');
is( sql($node, qq{SELECT config_loaded_at > '$conf1', config_loaded_at > '$before_reload',
                  config_loaded_at >= pg_conf_load_time(), config_loaded_at <= clock_timestamp()
             FROM outbox.worker_status()}),
	't|t|t|t',
	'after the reload: config_loaded_at is later than before, and than the reload request');
is(sql($node, 'SELECT pid FROM outbox.worker_status()'), $pid, '... same worker (a reload is no restart)');

# ---------------------------------------------------------------------------
# 3. One request held at the receiver: the claim (outbox.claims), in_flight, and
#    no transaction open while the worker waits on the network.
#    The receiver holds the request for HOLD_MS and then answers 200 (delay_ms): the
#    worker is waiting on the network the whole time, and the request ends answered.
#    The endpoint's timeout is far longer, so the worker never gives up first.

sql($node, sprintf(q{SELECT outbox.create_endpoint('slow', url => '%s', timeout_ms => 60000)},
		$recv->url('/hooks/slow')));
$recv->add_rule(path => '/hooks/slow', status => 200, delay_ms => $HOLD_MS, times => 1);
my $id = sql($node, q{SELECT outbox.enqueue('slow', '{"held": true}')});
ok(wait_until(sub { @{ $recv->requests(path => '/hooks/slow') } >= 1 }, 30, 'the slow request'),
	'the request reached the receiver');

# The claim: one row of outbox.claims lists the message, on its first attempt.  Read
# right after the request arrived, so the claim is at most seconds old: claimed_at
# lies in (now() - 10 s, now()].  The queue row still shows the attempts already
# recorded (none): this one is recorded when the message settles.
is( sql($node, qq{SELECT count(*), min(c.attempts[array_position(c.message_ids, ${id}::bigint)]),
                  bool_and(c.claimed_at > now() - interval '10 s' AND c.claimed_at <= now())
             FROM outbox.claims c WHERE $id = ANY (c.message_ids)}),
	'1|1|t',
	'while the request hangs: one claim lists the message, on attempt 1, claimed just now');
is(sql($node, "SELECT status, attempts FROM outbox.message($id)"), 'in_flight|0',
	'... outbox.message(): in_flight, no attempt recorded yet');
is(sql($node, "SELECT count(*) FROM outbox.messages WHERE id = $id"), '1',
	'... the message is still in the queue');
note('claim age: '
	  . sql($node, "SELECT now() - claimed_at FROM outbox.claims WHERE $id = ANY (message_ids)"));
ok(wait_sql($node, 'SELECT in_flight = 1 FROM outbox.worker_status()', 30),
	'worker_status().in_flight = 1 while the request hangs');

# "It never holds a transaction open while waiting on the network." Sampled from the
# server, 40 times 50 ms apart (about 2 s), while the request is held: the worker's
# xact_start, backend_xid and state. A transaction open across the wait would have
# started before the request was sent, so by the end of the window it would be
# seconds old, and it would be visible in every sample. Its own short transactions
# (claims, housekeeping) show up at most as an xact_start a few milliseconds old.
# pg_stat_clear_snapshot() makes each sample a fresh reading within the DO block.
my $samples = sql($node, qq{
	CREATE TEMP TABLE samples (n int, at timestamptz, xact_start timestamptz, xid xid, state text);
	DO \$\$
	BEGIN
	  FOR i IN 1 .. 40 LOOP
	    PERFORM pg_stat_clear_snapshot();
	    INSERT INTO samples
	      SELECT i, clock_timestamp(), a.xact_start, a.backend_xid, a.state
	        FROM pg_stat_activity a WHERE a.pid = $pid;
	    PERFORM pg_sleep(0.05);
	  END LOOP;
	END
	\$\$;
	SELECT count(*),
	       count(*) FILTER (WHERE xact_start IS NULL),
	       count(*) FILTER (WHERE xact_start IS NOT NULL AND at - xact_start >= interval '1 s'),
	       coalesce(round(extract(epoch FROM max(at - xact_start)) * 1000), 0),
	       count(*) FILTER (WHERE xid IS NOT NULL),
	       string_agg(DISTINCT coalesce(state, '<null>'), ','),
	       round(extract(epoch FROM max(at) - min(at))::numeric, 2)
	  FROM samples});
my ($n, $idle, $old_xacts, $max_age_ms, $with_xid, $states, $span) = split /\|/, $samples;
# The window must lie inside the hold: the request is still unanswered after it.
my ($held) = @{ $recv->requests(path => '/hooks/slow') };
ok(!defined $held->{answered_at}, 'the request was still held after the sampling window');
note("samples: $n over $span s; idle (xact_start NULL): $idle; with an xid: $with_xid; "
	  . "states: $states; oldest transaction seen: $max_age_ms ms");
is($n, 40, '40 samples of the worker in pg_stat_activity');
is($old_xacts, 0,
	'in every sample the worker is outside a transaction or in one less than 1 s old');
cmp_ok($idle, '>=', 1, 'the worker was seen with no transaction open (xact_start NULL)');

ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($id)", 60),
	'the held request is answered and the message sent');
is(sql($node, "SELECT attempts FROM outbox.message($id)"), '1', '... after one attempt (history.attempts)');
is(sql($node, "SELECT count(*) FROM outbox.messages WHERE id = $id"), '0',
	'... it left the queue');
is(sql($node, "SELECT count(*) FROM outbox.claims WHERE $id = ANY (message_ids)"), '0',
	'... and no claim lists it any more');
ok(wait_until(sub { defined $recv->requests(path => '/hooks/slow')->[0]{answered} }, 30),
	'the receiver recorded its answer');
is($recv->requests(path => '/hooks/slow')->[0]{answered}, 200, '... a 200 the worker received');
ok(wait_sql($node, 'SELECT in_flight = 0 FROM outbox.worker_status()', 30),
	'worker_status().in_flight = 0 after the answer');
is(scalar @{ $recv->requests(path => '/hooks/slow') }, 1, 'one request in all');

# ---------------------------------------------------------------------------
# 4. pg_terminate_backend: the worker ends with FATAL (exit code 1), and the
#    launcher starts a new one 1 s later, with no crash recovery.
#    The delay is measured by the server: the new worker's backend_start minus a
#    clock reading taken AFTER pg_terminate_backend returned, which can only make
#    it smaller than the true delay, so the lower bound is safe. The upper bound is
#    generous (the wall-clock time until the new pid is visible).

# The worker is terminated with a request hanging at the receiver: its delivery thread
# (libcurl) must be stopped and joined on the way out (before_shmem_exit), or the exit
# would hang or crash; the message's attempt was recorded by its claim, and the next
# worker sends it again.
sql($node, sprintf(q{SELECT outbox.create_endpoint('hanging', url => '%s', timeout_ms => 60000)},
		$recv->url('/hooks/hanging')));
$recv->add_rule(path => '/hooks/hanging', action => 'hang', hang_ms => 20000, times => 1);
my $hanging = sql($node, q{SELECT outbox.enqueue('hanging', '{"hang": true}')});
ok(wait_until(sub { @{ $recv->requests(path => '/hooks/hanging') } >= 1 }, 30, 'the hanging request'),
	'a request hangs at the receiver when the worker is terminated');

my $t_wall = time;
my (undef, $t_after) = split /\n/,
  sql($node, "SELECT pg_terminate_backend($pid); SELECT clock_timestamp()");
my $new = wait_for_worker($node, $pid, 30);
my $wall = time - $t_wall;
ok(defined $new, 'the launcher started a new worker');
$new //= 0;
my $delay = sql($node, qq{SELECT extract(epoch FROM backend_start - '$t_after')
                     FROM pg_stat_activity WHERE pid = $new});
note(sprintf('new worker forked %.3f s after pg_terminate_backend (server clock); '
	  . 'visible %.3f s after it (wall clock)', $delay || 0, $wall));
cmp_ok($delay, '>=', 0.8, 'the new worker starts about 1 s later, not at once');
cmp_ok($wall, '<', 30, '... and well within 30 s');
is(sql($node, 'SELECT pid FROM outbox.worker_status()'), $new, 'worker_status() reports the new pid');
$gap = start_gap($new);
ok($gap ne '' && $gap >= 0 && $gap < 1,
	"the new worker's started_at is its backend_start, to the second ($gap s)");
is(sql($node, "SELECT usename FROM pg_stat_activity WHERE pid = $new"), $bootstrap,
	'the new worker is the bootstrap superuser too');

cmp_ok(scalar @{ $recv->requests(path => '/hooks/hanging') }, '<=', 2,
	'the hanging request was not repeated in a loop');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($hanging)", 60),
	'the message whose request hung is delivered by the new worker');

# It still delivers.
sql($node, sprintf(q{SELECT outbox.create_endpoint('after', url => '%s')}, $recv->url('/hooks/after')));
my $id2 = sql($node, q{SELECT outbox.enqueue('after', '{"after": "restart"}')});
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($id2)", 60),
	'the restarted worker delivers');

my $log = slurp_file($node->logfile);
like($log, qr/terminating background worker "pg_outbox worker[^"]*" due to administrator command/,
	'the log shows the FATAL of the terminated worker');
like($log, qr/background worker "pg_outbox worker" \(PID $pid\) exited with exit code 1/,
	'... which exited with code 1 (an error exit, so the launcher restarts it)');
unlike($log, qr/terminated by signal|all server processes terminated|PANIC/,
	'no crash, no crash recovery, no PANIC');

$node->stop;
$recv->stop;
done_testing();
