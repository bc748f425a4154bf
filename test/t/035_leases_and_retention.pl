#!/usr/bin/perl
# Leases, row locks and the worker's own retention (README "How delivery works" and
# "Configuration"):
#
#  - pg_outbox.lease: a claim holds for the lease and no longer.  lease_until is set
#    at claim to now() + lease; once it has passed, the row is pending again and is
#    claimed anew, with the same webhook-id, even while the first request still runs
#    (today's semantics, see section 1);
#  - pg_outbox.dlq_retention: -1 keeps every dead letter for ever; a retention makes
#    the worker delete the handled (requeued or discarded) dead letters older than it,
#    never the open ones (SPEC §2 "Open dead letters ... are never deleted
#    automatically");
#  - the worker purges expired sent messages itself, in batches of 1,000 per second;
#  - the claim skips rows another transaction has locked (FOR UPDATE SKIP LOCKED):
#    the rest of the endpoint flows, and the locked row goes once it is released.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

# The lease at its minimum (settings.cpp: unit s, min 1).  sent_retention is long
# enough to keep the two-day-old sent rows of section 3 until the test shortens it.
my $LEASE = 1;
my $node = new_outbox_node(
	'leases',
	'pg_outbox.lease'          => "${LEASE}s",
	'pg_outbox.sent_retention' => '3d');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $recv = start_receiver();

# ---------------------------------------------------------------------------
# helpers

sub sql { return $node->safe_psql('postgres', $_[0]) }

sub endpoint { my ($name, $path, %opt) = @_; return create_endpoint($node, $name, $recv->url($path), %opt) }

sub reqs { return $recv->requests(path => $_[0]) }

sub wait_requests { return $recv->wait_requests(@_) }

# One session kept open for the polls that must be quick (a new psql per sample
# would take longer than the states it samples).
my $probe = $node->background_psql('postgres');

sub probe { return $probe->query_safe($_[0]) }

# A sent row older than any retention of this file ("paused" is a paused endpoint, so
# nothing else touches it).  Its disappearance proves that one housekeeping round
# (expire_leases, purge_sent, purge_dead_letters: one transaction) ran after it was
# inserted.
sub housekeeping_round
{
	my ($what) = @_;
	my $canary = sql(q{INSERT INTO outbox.messages (endpoint, payload, status, attempts, sent_at)
	                   VALUES ('paused', '{"canary": true}', 'sent', 1, now() - interval '4 days')
	                   RETURNING id});
	return wait_sql($node, "SELECT NOT EXISTS (SELECT 1 FROM outbox.messages WHERE id = $canary)",
		30);
}

my $pid_start = wait_for_worker($node);
like($pid_start, qr/^\d+$/, 'worker running');
like(sql('SHOW pg_outbox.lease'), qr/^${LEASE}s$/, "pg_outbox.lease is ${LEASE}s");

endpoint('paused', '/hooks/paused');
sql(q{SELECT outbox.pause_endpoint('paused')});

# ---------------------------------------------------------------------------
# 1. pg_outbox.lease: how long a claim holds before it may be taken again.
#
# THIS SECTION DOCUMENTS TODAY'S LEASE SEMANTICS (README: "pg_outbox.lease: how
# long a claim holds before it may be taken again"): the lease is independent of the
# request, so a message whose request outlives the lease is claimed and sent AGAIN
# while the first request is still running.  SPEC §3 "One copy in flight" will forbid
# exactly that ("a message is never sent again while an earlier request for it may
# still be running; its claim lasts as long as its request can"); when the product
# implements it, the second copy asserted below must no longer appear and this
# section has to be rewritten together with the README.
#
# The endpoint's timeout (20 s) is far longer than the lease (1 s); the receiver
# holds the first request without answering for 15 s.  The endpoint is paused just
# after the claim, so that the row, once its lease has run out, stays visibly
# pending instead of being claimed again at once; resuming it lets the second claim
# happen while the first request still hangs.

endpoint('lease', '/hooks/lease', timeout_ms => 20000);
$recv->add_rule(path => '/hooks/lease', action => 'hang', hang_ms => 15000, times => 1);
my $t_enqueue = sql('SELECT extract(epoch FROM clock_timestamp())');
my $lease_id = sql(q{SELECT outbox.enqueue('lease', '{"lease": true}')});
my ($claim_status, $claim_attempts, $lease_until) = ('', '', '');
ok( wait_until(
		sub {
			($claim_status, $claim_attempts, $lease_until) = split /\|/,
			  probe("SELECT status, attempts, coalesce(extract(epoch FROM lease_until)::text, '')
			           FROM outbox.messages WHERE id = $lease_id");
			return $claim_status ne 'pending';
		},
		30,
		'the lease message claimed'),
	'the message is claimed');
sql(q{SELECT outbox.pause_endpoint('lease')});
is("$claim_status/$claim_attempts", 'in_flight/1', 'claimed: in_flight, first attempt counted');

ok(wait_requests('/hooks/lease', 1), 'the first request arrives (and hangs)');
my $first = reqs('/hooks/lease')->[0];
is($first->{headers}{'webhook-id'}, "msg_$lease_id", '... it is the lease message');
is($first->{response}, 'hang', '... and the receiver holds it without answering');

# lease_until = now() + lease, now() being the claim transaction's start: no earlier
# than just before the enqueue (0.5 s of slack: that transaction may have begun a
# moment before the enqueue committed) and no later than the request's arrival, since
# the request starts only after the claim committed.
note(sprintf('lease_until - enqueue = %.3f s, request arrival - enqueue = %.3f s',
		$lease_until - $t_enqueue, $first->{time} - $t_enqueue));
cmp_ok($lease_until, '>=', $t_enqueue + $LEASE - 0.5,
	'lease_until at claim: no earlier than (enqueue + lease)');
cmp_ok($lease_until, '<=', $t_enqueue + $LEASE + 2,
	'lease_until at claim: no later than (enqueue + lease + 2 s)');
cmp_ok($lease_until, '<=', $first->{time} + $LEASE + 0.05,
	'lease_until at claim: no later than (request arrival + lease)');

# The first request still hangs (15 s), yet the claim runs out after the lease.
ok( wait_sql($node,
		"SELECT status = 'pending' AND lease_until IS NULL AND attempts = 1
		   FROM outbox.messages WHERE id = $lease_id", 30),
	'after the lease the row is pending again (no lease, the one attempt kept)');
my $now = sql('SELECT extract(epoch FROM clock_timestamp())');
# (Polled every 50 ms: a claim released early would be seen pending before this.)
cmp_ok($now, '>=', $lease_until, '... not before lease_until: the claim held for the lease');
ok(!defined reqs('/hooks/lease')->[0]{answered_at},
	'... while the first request is still unanswered');

sql(q{SELECT outbox.resume_endpoint('lease')});
ok(wait_requests('/hooks/lease', 2), 'a second request arrives once it may be claimed again');
my ($first_now, $second) = @{ reqs('/hooks/lease') }[ 0, 1 ];
is($second->{headers}{'webhook-id'}, "msg_$lease_id", '... with the same webhook-id');
is($second->{headers}{'outbox-attempt'}, '2', '... as attempt 2');
cmp_ok($second->{time}, '>', $lease_until, '... after the first claim\'s lease_until');
ok(!defined $first_now->{answered_at} || $first_now->{answered_at} > $second->{time},
	'... while the first request still hangs (two copies in flight: today\'s lease semantics)');
ok( wait_sql($node,
		"SELECT status = 'sent' AND attempts = 2 FROM outbox.messages WHERE id = $lease_id", 30),
	'the second copy is answered 200: the message is sent after 2 attempts');
ok(exists $recv->answered_2xx('/hooks/lease')->{"msg_$lease_id"},
	'... the receiver answered it 2xx');
# The first request ends (the receiver gives up after 15 s) while the next sections
# run; its late failure is checked at the end of the file.

# ---------------------------------------------------------------------------
# 2. pg_outbox.dlq_retention: -1 keeps dead letters for ever; a retention purges the
#    handled ones older than it and leaves the open ones (and all fresh ones).
#
# Dead letters written directly, as superuser, two hours old or fresh; "note" tags
# each kind.  Old handled ones were handled two hours ago too, so the test holds
# whether the age counts from dead_at or from the handling.

sql(q{
	INSERT INTO dlq.dead_letters (message_id, endpoint, payload, reason_code, attempts,
	                              message_created_at, dead_at, requeued_at, requeued_as,
	                              discarded_at, note)
	SELECT 100000 + row_number() OVER (), 'paused', '{"dlq": true}', 'RETRY_EXHAUSTED', 10,
	       t - interval '1 minute', t,
	       CASE WHEN kind = 'requeued'  THEN t END,
	       CASE WHEN kind = 'requeued'  THEN 900000 + g END,
	       CASE WHEN kind = 'discarded' THEN t END,
	       age || '-' || kind
	  FROM (VALUES ('old', now() - interval '2 hours'), ('fresh', now())) AS a(age, t),
	       (VALUES ('open'), ('discarded'), ('requeued')) AS k(kind),
	       generate_series(1, 3) g});

sub dlq_counts
{
	return sql(q{SELECT string_agg(note || '=' || n, ' ' ORDER BY note)
	               FROM (SELECT note, count(*) AS n FROM dlq.dead_letters GROUP BY note) c});
}
my $all_there = 'fresh-discarded=3 fresh-open=3 fresh-requeued=3 old-discarded=3 old-open=3 old-requeued=3';
is(dlq_counts(), $all_there, 'eighteen dead letters inserted (old and fresh, open and handled)');
is(sql('SHOW pg_outbox.dlq_retention'), '-1', 'dlq_retention is -1 by default');

# Several housekeeping rounds: two proven one after the other, and the worker's loop
# at least 2 s past the insertion.
my $t_dlq = sql('SELECT clock_timestamp()');
ok(housekeeping_round(), 'dlq_retention -1: a housekeeping round ran');
ok(housekeeping_round(), 'dlq_retention -1: another housekeeping round ran');
ok(wait_sql($node, "SELECT last_loop_at > '$t_dlq'::timestamptz + interval '2 seconds'
                      FROM outbox.worker_status()", 30),
	'dlq_retention -1: the worker has looped for more than 2 s since');
is(dlq_counts(), $all_there, 'dlq_retention -1: every dead letter is kept, however old');

ok(reload_conf($node, 'pg_outbox.dlq_retention' => '1h'), 'dlq_retention = 1h reloaded');
ok( wait_sql($node,
		q{SELECT count(*) = 0 FROM dlq.dead_letters WHERE note IN ('old-discarded', 'old-requeued')},
		30),
	'dlq_retention 1h: the handled dead letters older than 1 h are purged by the worker');
ok(housekeeping_round(), 'dlq_retention 1h: one more housekeeping round ran');
is(sql(q{SELECT count(*) FROM dlq.dead_letters WHERE note = 'old-open'}), '3',
	'dlq_retention 1h: the OPEN dead letters older than 1 h stay (never deleted automatically)');
is(sql(q{SELECT count(*) FROM dlq.dead_letters WHERE note LIKE 'fresh-%'}), '9',
	'dlq_retention 1h: the fresh dead letters stay, open or handled');

# ---------------------------------------------------------------------------
# 3. The worker purges expired sent messages itself, at most 1,000 per round and one
#    round per second: 2,500 expired rows take three rounds, 2500 -> 1500 -> 500 -> 0.
#
# No other sent row is older than a day (the canaries are gone), so a purge batch
# can only take these.

ok(wait_sql($node, q{SELECT count(*) = 0 FROM outbox.messages WHERE payload ? 'canary'}, 30),
	'no canary left');
sql(q{INSERT INTO outbox.messages (endpoint, payload, status, attempts, sent_at)
      SELECT 'paused', jsonb_build_object('bulk', g), 'sent', 1, now() - interval '2 days'
        FROM generate_series(1, 2500) g});
my $bulk_count = sub { probe(q{SELECT count(*) FROM outbox.messages WHERE payload ? 'bulk'}) };
ok(housekeeping_round(), 'sent_retention 3d: a housekeeping round ran');
is($bulk_count->(), '2500', 'sent_retention 3d keeps the 2,500 sent rows two days old');

my $t_reload = time;
ok(reload_conf($node, 'pg_outbox.sent_retention' => '1d'), 'sent_retention = 1d reloaded');
my @samples;
ok( wait_until(
		sub {
			my $n = $bulk_count->();
			push @samples, $n if !@samples || $samples[-1] != $n;
			return $n == 0;
		},
		60,
		'the 2,500 expired sent rows purged'),
	'sent_retention 1d: the worker purges all 2,500 expired sent rows');
my $took = time - $t_reload;
note(sprintf('counts seen: %s; zero %.3f s after the reload', join(' -> ', @samples), $took));
is_deeply([ grep { !/^(2500|1500|500|0)$/ } @samples ], [],
	'every count seen is 2500, 1500, 500 or 0: at most 1,000 rows per batch');
ok((grep { $_ == 1500 || $_ == 500 } @samples),
	'an intermediate count (1500 or 500) was seen: the purge went in batches');
cmp_ok($took, '>=', 1.5, 'three batches took at least 1.5 s: one batch per second');

# ---------------------------------------------------------------------------
# 4. The claim skips rows locked by another transaction (FOR UPDATE SKIP LOCKED).
#    X is enqueued before Y, so a claim that waited for locks would wait on X and
#    deliver nothing.

endpoint('locked', '/hooks/locked');
sql(q{SELECT outbox.pause_endpoint('locked')});
my $x = sql(q{SELECT outbox.enqueue('locked', '{"which": "x"}')});
my $y = sql(q{SELECT outbox.enqueue('locked', '{"which": "y"}')});
cmp_ok($x, '<', $y, 'X is older than Y');
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN');
is($locker->query_safe("SELECT id FROM outbox.messages WHERE id = $x FOR UPDATE"), $x,
	'another transaction locks X');
sql(q{SELECT outbox.resume_endpoint('locked')});
ok(wait_until(sub { exists $recv->answered_2xx('/hooks/locked')->{"msg_$y"} }, 30, 'Y answered'),
	'Y is delivered (answered 2xx) while X is locked');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.messages WHERE id = $y", 30),
	'... and Y is sent');
is_deeply([ grep { $_->{headers}{'webhook-id'} eq "msg_$x" } @{ reqs('/hooks/locked') } ], [],
	'X was never sent while locked');
is(sql("SELECT status || '/' || attempts FROM outbox.messages WHERE id = $x"), 'pending/0',
	'X stays pending with no attempt while locked');

$locker->query_safe('ROLLBACK');
$locker->quit;
ok(wait_until(sub { exists $recv->answered_2xx('/hooks/locked')->{"msg_$x"} }, 30, 'X answered'),
	'once the lock is released, X is delivered');
ok(wait_sql($node, "SELECT status = 'sent' AND attempts = 1 FROM outbox.messages WHERE id = $x", 30),
	'... sent after one attempt');

# ---------------------------------------------------------------------------
# End of section 1: the first, stale request of the lease message ends (the receiver
# closes it after 15 s, the endpoint's 20 s timeout not reached).  Its failure comes
# after the message was sent by the second copy, and must change nothing.

ok(wait_until(sub { defined reqs('/hooks/lease')->[0]{answered_at} }, 40, 'first lease request ends'),
	'the hung first request of the lease message has ended');
ok(!defined reqs('/hooks/lease')->[0]{answered}, '... unanswered');
ok(housekeeping_round(), 'a housekeeping round ran after it');
is(sql("SELECT status || '/' || attempts FROM outbox.messages WHERE id = $lease_id"), 'sent/2',
	'the stale failure leaves the message sent after 2 attempts');
is(sql("SELECT count(*) FROM dlq.dead_letters WHERE message_id = $lease_id"), '0',
	'... and dead-letters nothing');

is(wait_for_worker($node), $pid_start, 'one worker for the whole file');
my @bad = grep { /PANIC|terminated by signal/ } split /\n/, slurp_file($node->logfile);
ok(!@bad, 'no PANIC, no crash in the server log') or diag(join "\n", @bad);

$probe->quit;
$node->stop;
$recv->stop;
done_testing();
