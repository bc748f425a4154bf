#!/usr/bin/perl
# The wake at commit (docs/delivery.md, "Wake at commit"):
#   "A transaction callback sets the worker's latch at COMMIT, never on rollback, and
#    an atomic flag collapses many commits into one wake.  pg_outbox.poll_interval is
#    only the fallback, for example for a COMMIT PREPARED."
# The node polls every 30 s, so a delivery within a few seconds proves a wake.
#
# A wake that finds nothing leaves no trace in the outbox, so the worker's own
# activity is observed instead: pg_stat_statements (track = all) counts the
# executions ("calls") of the worker's claim statement, the one SPI statement that
# starts with "WITH due AS (" (src/pg/outbox_store.cpp kClaimSql).  The worker runs
# it once per claim (src/pg/worker.cpp claim_and_deliver, for its HTTP endpoints);
# housekeeping never claims (it prepares and retires history partitions, purges dead
# letters and dead-letters orphans with other statements: worker.cpp housekeeping()).  Without a wake, the worker claims
# only when its poll interval ends or a retry or deliver_at comes due.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $ROLLBACKS = 50;
my $COMMITS   = 500;

# Later lines of the appended configuration win: shared_preload_libraries replaces
# the 'pg_outbox' that new_outbox_node writes first.
my $node = new_outbox_node(
	'wake',
	'shared_preload_libraries'   => 'pg_outbox,pg_stat_statements',
	'pg_stat_statements.track'   => 'all',
	'pg_outbox.poll_interval'    => '30s',
	'max_prepared_transactions'  => '2');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_stat_statements');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');

my $recv = start_receiver();
my $PATH = '/hooks/wake';

# Executions of the worker's claim statement so far.
my $CLAIMS_SQL = q{SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE 'WITH due AS (%'};
sub claims { return sql($node, $CLAIMS_SQL) }

sub delivered { return scalar keys %{ $recv->answered_2xx($PATH) } }

# The endpoint functions wake the worker at commit too: this first claim makes the
# claim statement appear in pg_stat_statements.
sql($node, sprintf(q{SELECT outbox.create_endpoint('wake', url => '%s')}, $recv->url($PATH)));
ok(wait_sql($node, "SELECT ($CLAIMS_SQL) >= 1", 60),
	"pg_stat_statements sees the worker's claim statement (the commit of create_endpoint woke it)");
ok(wait_sql($node, q{SELECT state = 'idle' FROM outbox.worker_status()}, 60), 'the worker is idle');

###############################################################################
# #67: a rolled-back enqueue wakes nobody.
###############################################################################
# Each rolled-back transaction lasts at least 60 ms (pg_sleep inside it, which only
# paces them): longer than the largest gap by which the worker coalesces the claims
# that wakes trigger (50 ms while they find nothing, worker.cpp kWakeCoalesceMaxMs).
# A rollback that woke the worker would therefore cost one claim each, about
# $ROLLBACKS in all.  Without wakes the worker claims only when its 30 s poll ends:
# at most once in these few seconds; 2 allows for one more.
my $c0 = claims();
my $t0 = time();
sql($node, join '', map {
		"BEGIN; SELECT outbox.enqueue('wake', '{\"rolled\": $_}'); SELECT pg_sleep(0.06); ROLLBACK;\n"
} 1 .. $ROLLBACKS);
my $c1 = claims();
note sprintf('%d rolled-back enqueues in %.2f s: claim calls %d -> %d', $ROLLBACKS, time() - $t0, $c0, $c1);
cmp_ok($c1 - $c0, '<=', 2, "$ROLLBACKS rolled-back enqueues do not wake the worker (claims grew by " . ($c1 - $c0) . ')');
is(sql($node, 'SELECT (SELECT count(*) FROM outbox.messages) + (SELECT count(*) FROM outbox.history)'), '0',
	'nothing in the outbox (neither in the queue nor in the history)');

###############################################################################
# Control: a committed enqueue wakes the worker (and the claim is counted).
###############################################################################
my $t_commit = time();
sql($node, q{SELECT outbox.enqueue('wake', '{"committed": 1}')});
ok(wait_until(sub { delivered() >= 1 }, 10, 'delivery after the commit'),
	'a committed enqueue is delivered within 10 s although the worker polls every 30 s');
note sprintf('commit -> answered: %.3f s', (values %{ $recv->answered_2xx($PATH) })[0] - $t_commit)
  if delivered();
my $c2 = claims();
cmp_ok($c2, '>', $c1, "the commit's wake shows as claims ($c1 -> $c2)");

###############################################################################
# #68: many commits collapse into few wakes.
###############################################################################
# COMMITS single-message transactions from one session, as fast as it goes.  Their
# deliver_at is an hour away, so every claim they trigger finds nothing and the only
# thing that makes the worker claim is a wake (the poll is 30 s away, the next
# due message an hour): no settle, no "more due", no HTTP in the count.
# Every commit sets the wake flag; only the first since the worker last looked sets
# its latch, and the worker claims at most once per 1 ms, up to 50 ms apart while the
# claims find nothing (docs/performance-history.md; core/wake_coalescer.hpp).  A claim
# per commit would be COMMITS claims; collapsed, they are a few per 50 ms of the burst.
# The bounds: fewer than a quarter of the commits (the burst would have to last about
# 6 s, 12 ms per commit, for 50 ms gaps to reach it), and at most one claim per 1 ms
# of the burst plus 2 (the rate docs/delivery.md gives; the burst is timed around the whole psql
# run, so it is if anything longer than the commits took).  A worker that claimed on
# every wake, a few tenths of a millisecond per empty claim, fails the second.
# The worker's main thread sleeps (a voluntary context switch) once per wake: a wake per
# commit would be about $COMMITS of them. A commit's wake deferred to the gap's end stays
# requested meanwhile, so the other commits of the gap leave the latch alone: about two
# wakes per gap, fewer than a quarter of the commits.
sub sleeps {
	my $pid = worker_pid($node);
	open(my $fh, '<', "/proc/$pid/task/$pid/status") or die "no status of the worker $pid: $!";
	my ($n) = map { /^voluntary_ctxt_switches:\s+(\d+)/ ? $1 : () } <$fh>;
	close $fh;
	return $n;
}
my $s3 = sleeps();
my $c3 = claims();
my $t3 = time();
sql($node, join '', map {
		"SELECT outbox.enqueue('wake', '{\"burst\": $_}', deliver_at => now() + interval '1 hour');\n"
} 1 .. $COMMITS);
my $burst_s = time() - $t3;
# The last commits' wakes may still be on their way to a claim: wait until the worker
# is idle again, reporting a loop after the burst ended.
my $t3_end = sql($node, 'SELECT clock_timestamp()');
ok(wait_sql($node, qq{SELECT state = 'idle' AND last_loop_at > '$t3_end' FROM outbox.worker_status()}, 30),
	'the worker is idle after the burst');
my $c4 = claims();
my $woke = sleeps() - $s3;
my $grew = $c4 - $c3;
note sprintf('%d single-message commits in %.3f s: claim calls %d -> %d (+%d)', $COMMITS, $burst_s, $c3, $c4,
	$grew);
is( sql($node, q{SELECT count(*) FROM outbox.messages m WHERE payload ? 'burst'
	         AND NOT EXISTS (SELECT FROM outbox.claims c WHERE m.id = ANY (c.message_ids))}),
	$COMMITS,
	"the $COMMITS messages were committed (and wait for their deliver_at)");
cmp_ok($grew, '>=', 1, 'the burst of commits woke the worker');
cmp_ok($grew, '<', $COMMITS / 4, "$COMMITS commits collapse into far fewer claims ($grew)");
cmp_ok($grew, '<=', int(1000 * $burst_s) + 2,
	sprintf('at most one claim per 1 ms of the %.3f s burst, plus 2 (%d)', $burst_s, $grew));
cmp_ok($woke, '<', $COMMITS / 4, "... and into far fewer wakes of the worker ($woke)");
sql($node, q{DELETE FROM outbox.messages WHERE payload ? 'burst'});

###############################################################################
# A commit wakes the worker for what it wrote (docs/delivery.md, "Wake at commit").
###############################################################################
# Beside the HTTP endpoint 'wake', a NOTIFY endpoint and a pull endpoint. Each burst is
# $KINDS commits from one session, 60 ms apart (more than the largest coalescing gap,
# as for the rollbacks above), and counts the claim statements the worker ran meanwhile:
#  - for the pull endpoint, none: its readers take its messages (they are woken, and
#    read all of them); nor do the readers' acknowledgements wake the worker;
#  - for the HTTP endpoint (deliver_at an hour ahead: nothing to send), one claim each,
#    not also a NOTIFY round (its own claim statement);
#  - for the NOTIFY endpoint (the same), one NOTIFY round each, not also a claim of the
#    HTTP endpoint, which its claims above found with nothing due.
# A wake that ran both, as every commit's did before, makes about twice as many in the
# last two, and about two per commit in the first. Then a message due now, for the
# NOTIFY endpoint by outbox.enqueue, by outbox.publish and by a plain INSERT, and for
# the pull endpoint by a waiting reader, goes at once: well before the 30 s poll.
my $KINDS = 30;
sql($node, q{SELECT outbox.create_endpoint('wake_feed', channel => 'wake_feed')});
sql($node, q{SELECT outbox.create_endpoint('wake_pull', pull => true)});
# Their creation's wake ran a claim and a NOTIFY round, which found nothing.
my $created = sql($node, 'SELECT clock_timestamp()');
ok(wait_sql($node, qq{SELECT state = 'idle' AND last_loop_at > '$created' FROM outbox.worker_status()}, 30),
	'the worker is idle after the endpoints were created');

# Claim statements while $KINDS commits run the statement $sql each.
sub claims_during
{
	my ($sql) = @_;
	my $before = claims();
	sql($node, "DO \$\$ BEGIN FOR i IN 1 .. $KINDS LOOP $sql; COMMIT; PERFORM pg_sleep(0.06); END LOOP; END \$\$");
	sleep 0.5;    # the last wake's claim
	return claims() - $before;
}
my $pulled = claims_during(q{PERFORM outbox.enqueue('wake_pull', jsonb_build_object('i', i))});
my $acks   = claims();
my $read   = sql($node, q{SELECT count(outbox.ack('wake_pull', ARRAY[r.id])) FROM outbox.read('wake_pull', 1000) r});
sleep 0.5;
$acks = claims() - $acks;
my $http = claims_during(q{PERFORM outbox.enqueue('wake', jsonb_build_object('later', i), deliver_at => now() + interval '1 hour')});
my $notify = claims_during(q{PERFORM outbox.enqueue('wake_feed', jsonb_build_object('later', i), deliver_at => now() + interval '1 hour')});
note("claim statements for $KINDS commits each: pull $pulled (acks $acks), HTTP $http, NOTIFY $notify");
is($read, $KINDS, "the readers took the pull endpoint's $KINDS messages");
cmp_ok($pulled + $acks, '<=', 2, "commits for a pull endpoint and their acknowledgements claim nothing ($pulled, $acks)");
cmp_ok($http, '>=', $KINDS / 2, "commits for an HTTP endpoint wake the worker ($http claims)");
cmp_ok($http, '<=', $KINDS + 2, '... for a claim, not also a NOTIFY round');
cmp_ok($notify, '>=', $KINDS / 2, "commits for a NOTIFY endpoint wake the worker ($notify claims)");
cmp_ok($notify, '<=', $KINDS + 2, '... for a NOTIFY round, not also a claim of the HTTP endpoint');
sql($node, q{DELETE FROM outbox.messages WHERE payload ? 'later'});

# Gone from the queue into the history within 10 s (the poll is 30 s away).
sub notified
{
	my ($how, $n, $sql) = @_;
	sql($node, $sql);
	ok(wait_sql($node, qq{SELECT EXISTS (SELECT FROM outbox.history WHERE payload = '{"now": $n}')}, 10),
		"a NOTIFY message committed by $how goes at once");
}
notified('outbox.enqueue', 1, q{SELECT outbox.enqueue('wake_feed', '{"now": 1}')});
sql($node, q{SELECT outbox.subscribe('wake_feed', ARRAY['wake.now'])});
notified('outbox.publish', 2, q{SELECT outbox.publish('wake.now', '{"now": 2}')});
notified('a plain INSERT', 3, q{INSERT INTO outbox.messages (endpoint, payload) VALUES ('wake_feed', '{"now": 3}')});
my $reader = $node->background_psql('postgres');
$reader->query_until(qr/reading/, q{\echo reading
SELECT count(*) FROM outbox.read('wake_pull', 10, wait => '20s');
});
ok( wait_sql(
		$node, q{SELECT EXISTS (SELECT FROM pg_stat_activity WHERE query LIKE '%outbox.read(''wake_pull''%'
		                        AND wait_event_type = 'Extension' AND pid <> pg_backend_pid())}, 10),
	'a reader waits in outbox.read');
my $t_read = time();
sql($node, q{SELECT outbox.enqueue('wake_pull', '{"now": 4}')});
ok(wait_sql($node, q{SELECT EXISTS (SELECT FROM outbox.holds WHERE endpoint = 'wake_pull')}, 10),
	'a waiting reader takes a pull message at its commit');
note(sprintf('pull commit -> read: %.2f s', time() - $t_read));
$reader->quit;
sql($node, q{DELETE FROM outbox.messages WHERE endpoint = 'wake_pull'});

###############################################################################
# #69: COMMIT PREPARED is found by the poll.
###############################################################################
# PREPARE TRANSACTION ends the session's transaction without a commit (the wake flag
# is dropped, src/pg/commit_wake.cpp), and COMMIT PREPARED commits the rows
# elsewhere: docs/delivery.md says poll_interval is the fallback for it.  The poll is shortened
# to 2 s so that the wait stays short; the message must be delivered within the poll
# interval plus a margin for a loaded machine.
ok(reload_conf($node, 'pg_outbox.poll_interval' => '2s'), 'poll_interval reloaded to 2 s');
my $before = delivered();
sql($node, q{BEGIN; SELECT outbox.enqueue('wake', '{"prepared": 1}'); PREPARE TRANSACTION 'wake_p1';});
is(sql($node, q{SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'wake_p1'}), '1', 'the transaction is prepared');
my $t_cp = time();
sql($node, q{COMMIT PREPARED 'wake_p1'});
ok(wait_until(sub { delivered() > $before }, 2 + 8, 'delivery after COMMIT PREPARED'),
	'a message committed by COMMIT PREPARED is delivered within poll_interval (2 s) + 8 s');
my @after = sort { $b <=> $a } values %{ $recv->answered_2xx($PATH) };
note sprintf('COMMIT PREPARED -> answered: %.3f s', $after[0] - $t_cp) if @after;
ok(wait_sql($node, q{SELECT (SELECT count(*) FROM outbox.history WHERE endpoint = 'wake') = 2 AND NOT EXISTS (SELECT FROM outbox.messages)}, 30),
	'both committed messages are marked sent (in the history, the queue empty)');
is(delivered(), 2, 'the receiver got exactly the two committed messages');

###############################################################################
# An endpoint changed by COMMIT PREPARED, which tells the worker nothing: it reads the
# endpoints again when a commit says they changed, and at least once a poll_interval
# (2 s here), the fallback docs/delivery.md names for COMMIT PREPARED.
###############################################################################
my $MOVED = '/hooks/moved';
sql($node, sprintf(q{BEGIN; SELECT outbox.alter_endpoint('wake', url => '%s'); PREPARE TRANSACTION 'wake_p2';},
		$recv->url($MOVED)));
sql($node, q{SELECT outbox.enqueue('wake', '{"before_commit_prepared": 1}')});
ok(wait_until(sub { delivered() == 3 }, 30, 'delivery while the change is prepared'),
	'while the change is only prepared, the old URL gets the messages');
sql($node, q{COMMIT PREPARED 'wake_p2'});
sleep 3;    # more than poll_interval
sql($node, q{SELECT outbox.enqueue('wake', '{"after_commit_prepared": 1}')});
ok(wait_until(sub { scalar(keys %{ $recv->answered_2xx($MOVED) }) == 1 }, 30, 'delivery to the new URL'),
	'after COMMIT PREPARED, the new URL gets them');
is(delivered(), 3, '... and the old one no more');

$recv->stop;
$node->stop;
done_testing();
