#!/usr/bin/perl
# Claims, row locks and the worker's own retention (docs/delivery.md, "Claim", "Leases" and
# "Configuration"):
#
#  - one copy in flight (docs/delivery.md, "Claim"): a claimed message is listed in outbox.claims for as
#    long as its request may run; the worker never sends it again meanwhile, however
#    short pg_outbox.lease is (see section 1);
#  - pg_outbox.dlq_retention: -1 keeps every dead letter for ever; a retention makes
#    the worker delete the handled (requeued or discarded) dead letters older than it,
#    never the open ones (docs/operations.md, "Retention and history": "Open dead letters ... are never deleted
#    automatically");
#  - the worker removes the delivered messages kept longer than sent_retention from
#    the history (outbox.history) itself: a partition wholly past the retention is
#    dropped whole, and rows of the default partition past it are deleted;
#  - the claim skips rows another transaction has locked (as FOR UPDATE SKIP LOCKED
#    would, without a lock of its own): the rest of the endpoint flows, and the locked
#    row goes once it is released.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

# The lease at its minimum (settings.cpp: unit s, min 1): it must not release a claim
# while its request runs.  sent_retention is long enough to keep the two-day-old sent
# messages of section 3 until the test shortens it.
my $LEASE = 1;
my $node = new_outbox_node(
	'leases',
	'pg_outbox.lease'          => "${LEASE}s",
	'pg_outbox.sent_retention' => '3d');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $W = webhook_prefix($node);    # webhook-id = $W<id> (docs/delivery.md, Webhook id)
my $recv = start_receiver();

# ---------------------------------------------------------------------------
# helpers

# One session kept open for the polls that must be quick (a new psql per sample
# would take longer than the states it samples).
my $probe = $node->background_psql('postgres');

sub probe { return $probe->query_safe($_[0]) }

# A delivered message older than any retention of this file, in the history ("paused"
# is a paused endpoint, so nothing else touches it; no partition covers four days ago,
# so it lands in the default partition).  Its disappearance proves that one
# housekeeping round (history retention, purge_dead_letters: one transaction) ran
# after it was inserted.
my $canary_id = 800000000;
sub housekeeping_round
{
	my ($what) = @_;
	my $canary = ++$canary_id;
	sql($node, qq{INSERT INTO outbox.history (id, endpoint, payload, attempts, created_at, sent_at)
	       VALUES ($canary, 'paused', '{"canary": true}', 1, now() - interval '4 days', now() - interval '4 days')});
	return wait_sql($node, "SELECT NOT EXISTS (SELECT 1 FROM outbox.history WHERE id = $canary)",
		30);
}

my $pid_start = wait_for_worker($node);
like($pid_start, qr/^\d+$/, 'worker running');
like(sql($node, 'SHOW pg_outbox.lease'), qr/^${LEASE}s$/, "pg_outbox.lease is ${LEASE}s");

endpoint($node, $recv, 'paused', '/hooks/paused');
sql($node, q{SELECT outbox.pause_endpoint('paused')});

# ---------------------------------------------------------------------------
# 1. One copy in flight: a claim lasts as long as its request can.
#
# Until 0.2.0 the lease was independent of the request: a message whose request
# outlived pg_outbox.lease was claimed and sent AGAIN while the first request still
# ran, and this section asserted that second copy.  docs/delivery.md ("Claim": one copy in flight)
# forbids it ("a message is never sent again while an earlier request for it may
# still be running; its claim lasts as long as its request can"), and from 0.3.0 the
# worker never expires a claim it still has in flight: the message is listed in
# outbox.claims from the claim until its request has ended and been recorded.
#
# The endpoint's timeout (20 s) is far longer than the lease (1 s); the receiver holds
# the first request without answering for 15 s, then closes it.  All that time the
# endpoint stays active (the worker claims from it every poll), and the message must
# stay in flight with exactly one request sent.  Once the first request has ended
# (unanswered: a retryable failure), the message goes again, as attempt 2, and is
# answered 200.  The hang runs on while sections 2 to 4 do; its end is checked at the
# end of the file.

endpoint($node, $recv, 'lease', '/hooks/lease', timeout_ms => 20000);
$recv->add_rule(path => '/hooks/lease', action => 'hang', hang_ms => 15000, times => 1);

# The message's state (outbox.message()) and its claim: "status|attempts|claimed_at
# (epoch)|the attempt its claim records" (the last two empty without a claim).
sub lease_state
{
	return probe(qq{SELECT s.status, s.attempts,
	                       coalesce((SELECT extract(epoch FROM c.claimed_at) || '|' || c.attempts[array_position(c.message_ids, s.id)]
	                                   FROM outbox.claims c WHERE s.id = ANY (c.message_ids)), '|')
	                  FROM outbox.message($_[0]) s});
}

my $t_enqueue = sql($node, 'SELECT extract(epoch FROM clock_timestamp())');
my $lease_id = sql($node, q{SELECT outbox.enqueue('lease', '{"lease": true}')});
my ($claim_status, $claim_attempts, $claimed_at, $claim_attempt) = ('', '', '', '');
ok( wait_until(
		sub {
			($claim_status, $claim_attempts, $claimed_at, $claim_attempt) = split /\|/, lease_state($lease_id), 4;
			return $claim_status ne 'pending';
		},
		30,
		'the lease message claimed'),
	'the message is claimed');
# While in flight the queue row still shows the attempts already recorded (none); the
# claim records the attempt under way.
is("$claim_status/$claim_attempts/$claim_attempt", 'in_flight/0/1',
	'claimed: in_flight, its claim records attempt 1');

ok($recv->wait_requests('/hooks/lease', 1), 'the first request arrives (and hangs)');
my $first = $recv->requests(path => '/hooks/lease')->[0];
is($first->{headers}{'webhook-id'}, "$W$lease_id", '... it is the lease message');
is($first->{headers}{'outbox-attempt'}, '1', '... as attempt 1');
is($first->{response}, 'hang', '... and the receiver holds it without answering');

# claimed_at is the claim transaction's now(): no earlier than just before the enqueue
# (0.5 s of slack: that transaction may have begun a moment before the enqueue
# committed) and no later than the request's arrival, since the request starts only
# after the claim committed.
note(sprintf('claimed_at - enqueue = %.3f s, request arrival - enqueue = %.3f s',
		$claimed_at - $t_enqueue, $first->{time} - $t_enqueue));
cmp_ok($claimed_at, '>=', $t_enqueue - 0.5, 'claimed_at: no earlier than the enqueue');
cmp_ok($claimed_at, '<=', $t_enqueue + 2, 'claimed_at: no later than (enqueue + 2 s)');
cmp_ok($claimed_at, '<=', $first->{time} + 0.05, 'claimed_at: no later than the request arrival');

# The first request still hangs (15 s); three leases pass, and more than one
# housekeeping round, with the endpoint active: the claim holds.
ok( wait_sql($node, "SELECT clock_timestamp() > to_timestamp($claimed_at) + interval '3 seconds'", 30),
	'three leases have passed since the claim');
ok(housekeeping_round(), 'a housekeeping round ran meanwhile');
ok(!defined $recv->requests(path => '/hooks/lease')->[0]{answered_at}, '... while the first request is still unanswered');
my ($held_status, $held_attempts, $held_claimed_at, $held_attempt) = split /\|/, lease_state($lease_id), 4;
is("$held_status/$held_attempts/$held_attempt", 'in_flight/0/1',
	'the message is still in flight under its first claim (the lease released nothing)');
is($held_claimed_at, $claimed_at, '... the same claim');
is(scalar(@{ $recv->requests(path => '/hooks/lease') }), 1, '... and no second copy was sent');
# The first request ends (the receiver gives up after 15 s) while the next sections
# run; the message's delivery is checked at the end of the file.

# ---------------------------------------------------------------------------
# 2. pg_outbox.dlq_retention: -1 keeps dead letters for ever; a retention purges the
#    handled ones older than it and leaves the open ones (and all fresh ones).
#
# Dead letters written directly, as superuser, two hours old or fresh; "note" tags
# each kind.  Old handled ones were handled two hours ago too, so the test holds
# whether the age counts from dead_at or from the handling.

sql($node, q{
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
	return sql($node, q{SELECT string_agg(note || '=' || n, ' ' ORDER BY note)
	               FROM (SELECT note, count(*) AS n FROM dlq.dead_letters GROUP BY note) c});
}
my $all_there = 'fresh-discarded=3 fresh-open=3 fresh-requeued=3 old-discarded=3 old-open=3 old-requeued=3';
is(dlq_counts(), $all_there, 'eighteen dead letters inserted (old and fresh, open and handled)');
is(sql($node, 'SHOW pg_outbox.dlq_retention'), '-1', 'dlq_retention is -1 by default');

# Several housekeeping rounds: two proven one after the other, and the worker's loop
# at least 2 s past the insertion.
my $t_dlq = sql($node, 'SELECT clock_timestamp()');
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
is(sql($node, q{SELECT count(*) FROM dlq.dead_letters WHERE note = 'old-open'}), '3',
	'dlq_retention 1h: the OPEN dead letters older than 1 h stay (never deleted automatically)');
is(sql($node, q{SELECT count(*) FROM dlq.dead_letters WHERE note LIKE 'fresh-%'}), '9',
	'dlq_retention 1h: the fresh dead letters stay, open or handled');

# ---------------------------------------------------------------------------
# 3. The worker removes the delivered messages older than sent_retention from the
#    history itself.  Until 0.2.0 it deleted expired sent rows 1,000 per second
#    (2,500 rows went 2500 -> 1500 -> 500 -> 0 over three rounds); from 0.3.0 the
#    history is partitioned by sent_at and a partition wholly past the retention is
#    dropped whole, in one round, with its count in outbox.history_counts, and the rows
#    of the default partition past the retention are deleted in the same round.
#
# The worker creates partitions ahead of time only, so the one for two days ago is
# created here, as the worker would have created it then (a range partition of
# outbox.history with its index on id; the worker reads the bounds from the catalog),
# holding 2,500 messages sent two days ago, counted in outbox.history_counts as its
# settles would have counted them.  500 more, sent a day and a half ago, fall in the
# default partition (no partition covers that time).  No other delivered message is
# older than a day (the canaries are gone).

ok(wait_sql($node, q{SELECT count(*) = 0 FROM outbox.history WHERE payload ? 'canary'}, 30),
	'no canary left');
sql($node, q{
	DO $$
	BEGIN
	  EXECUTE format('CREATE TABLE outbox.history_two_days_ago PARTITION OF outbox.history FOR VALUES FROM (%L) TO (%L)',
	                 now() - interval '2 days 1 hour', now() - interval '2 days' + interval '1 hour');
	END $$;
	CREATE INDEX ON outbox.history_two_days_ago (id);
	INSERT INTO outbox.history (id, endpoint, payload, attempts, created_at, sent_at)
	SELECT 700000000 + g, 'paused', jsonb_build_object('bulk', g), 1,
	       now() - interval '2 days', now() - interval '2 days'
	  FROM generate_series(1, 2500) g;
	INSERT INTO outbox.history_counts (partition, endpoint, sent)
	VALUES ('outbox.history_two_days_ago', 'paused', 2500);
	INSERT INTO outbox.history (id, endpoint, payload, attempts, created_at, sent_at)
	SELECT 710000000 + g, 'paused', jsonb_build_object('bulk_default', g), 1,
	       now() - interval '36 hours', now() - interval '36 hours'
	  FROM generate_series(1, 500) g;});
is( sql($node, q{SELECT tableoid::regclass::text || '=' || count(*) FROM outbox.history
           WHERE payload ? 'bulk' OR payload ? 'bulk_default' GROUP BY tableoid ORDER BY 1}),
	"outbox.history_default=500\noutbox.history_two_days_ago=2500",
	'2,500 messages sent two days ago in their partition, 500 sent 36 hours ago in the default partition');
my $bulk_count = sub {
	probe(q{SELECT count(*) FILTER (WHERE payload ? 'bulk') || '/' || count(*) FILTER (WHERE payload ? 'bulk_default')
	          FROM outbox.history WHERE endpoint = 'paused'});
};
ok(housekeeping_round(), 'sent_retention 3d: a housekeeping round ran');
is($bulk_count->(), '2500/500', 'sent_retention 3d keeps the 3,000 messages sent up to two days ago');
is(sql($node, q{SELECT to_regclass('outbox.history_two_days_ago') IS NOT NULL}), 't', '... and their partition');
is(sql($node, q{SELECT sent FROM outbox.endpoint_stats WHERE endpoint = 'paused'}), '3000',
	'endpoint_stats counts them as sent (retained)');

my $t_reload = time;
ok(reload_conf($node, 'pg_outbox.sent_retention' => '1d'), 'sent_retention = 1d reloaded');
my @samples;
ok( wait_until(
		sub {
			my $n = $bulk_count->();
			push @samples, $n if !@samples || $samples[-1] ne $n;
			return $n eq '0/0';
		},
		60,
		'the 3,000 expired messages removed'),
	'sent_retention 1d: the worker removes all 3,000 expired messages from the history');
my $took = time - $t_reload;
note(sprintf('counts seen (partition/default): %s; zero %.3f s after the reload', join(' -> ', @samples), $took));
is_deeply([ grep { !m{^(2500/500|0/0)$} } @samples ], [],
	'every count seen is 2500/500 or 0/0: the partition went whole, with the default partition\'s rows, in one round');
is(sql($node, q{SELECT to_regclass('outbox.history_two_days_ago') IS NULL}), 't',
	'the expired partition was dropped');
is(sql($node, q{SELECT count(*) FROM outbox.history_counts WHERE partition::text = 'outbox.history_two_days_ago'}), '0',
	'... and its count went with it');
is(sql($node, q{SELECT sent FROM outbox.endpoint_stats WHERE endpoint = 'paused'}), '0',
	'endpoint_stats no longer counts them');
ok(housekeeping_round(), 'sent_retention 1d: another housekeeping round ran');
cmp_ok(sql($node, q{SELECT count(*) FROM outbox._history_partitions()}), '>', 0,
	'the worker\'s own partitions (for now and ahead) are still there');

# ---------------------------------------------------------------------------
# 4. The claim skips rows locked by another transaction (as FOR UPDATE SKIP LOCKED would).
#    X is enqueued before Y, so a claim that waited for locks would wait on X and
#    deliver nothing.

endpoint($node, $recv, 'locked', '/hooks/locked');
sql($node, q{SELECT outbox.pause_endpoint('locked')});
my $x = sql($node, q{SELECT outbox.enqueue('locked', '{"which": "x"}')});
my $y = sql($node, q{SELECT outbox.enqueue('locked', '{"which": "y"}')});
cmp_ok($x, '<', $y, 'X is older than Y');
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN');
is($locker->query_safe("SELECT id FROM outbox.messages WHERE id = $x FOR UPDATE"), $x,
	'another transaction locks X');
sql($node, q{SELECT outbox.resume_endpoint('locked')});
ok(wait_until(sub { exists $recv->answered_2xx('/hooks/locked')->{"$W$y"} }, 30, 'Y answered'),
	'Y is delivered (answered 2xx) while X is locked');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($y)", 30),
	'... and Y is sent')
  or diag('the worker meanwhile: '
	  . sql($node, q{SELECT concat_ws(' ', state, wait_event_type, wait_event, query) FROM pg_stat_activity
	           WHERE backend_type = 'pg_outbox worker'}));
is_deeply([ grep { $_->{headers}{'webhook-id'} eq "$W$x" } @{ $recv->requests(path => '/hooks/locked') } ], [],
	'X was never sent while locked');
is(sql($node, "SELECT status || '/' || attempts FROM outbox.message($x)"), 'pending/0',
	'X stays pending with no attempt while locked');

$locker->query_safe('ROLLBACK');
$locker->quit;
ok(wait_until(sub { exists $recv->answered_2xx('/hooks/locked')->{"$W$x"} }, 30, 'X answered'),
	'once the lock is released, X is delivered');
ok(wait_sql($node, "SELECT status = 'sent' AND attempts = 1 FROM outbox.message($x)", 30),
	'... sent after one attempt');

# 4b. The claim writes no row lock (outbox._claimable stands for FOR UPDATE SKIP LOCKED),
#     so it must still leave alone a row another transaction is changing or deleting:
#     an operator's open UPDATE of a payload (the old version is never sent, the new
#     one is, once), and an open DELETE (the row is never sent). Z is enqueued after
#     both: once Z is sent, the claim has walked past them.

sql($node, q{SELECT outbox.pause_endpoint('locked')});
my $fix = sql($node, q{SELECT outbox.enqueue('locked', '{"which": "before fix"}')});
my $gone = sql($node, q{SELECT outbox.enqueue('locked', '{"which": "deleted"}')});
my $z = sql($node, q{SELECT outbox.enqueue('locked', '{"which": "z"}')});
is(sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'locked'}), '3', 'three messages wait');
my $operator = $node->background_psql('postgres');
$operator->query_safe('BEGIN');
$operator->query_safe(qq{UPDATE outbox.messages SET payload = '{"which": "after fix"}' WHERE id = $fix});
$operator->query_safe(qq{DELETE FROM outbox.messages WHERE id = $gone});
sql($node, q{SELECT outbox.resume_endpoint('locked')});
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($z)", 30), 'Z, enqueued after both, is sent');
my @sent_ids = map { $_->{headers}{'webhook-id'} } @{ $recv->requests(path => '/hooks/locked') };
is_deeply([ grep { $_ eq "$W$fix" || $_ eq "$W$gone" } @sent_ids ], [],
	'neither the row being updated nor the row being deleted was sent meanwhile');
$operator->query_safe('COMMIT');
$operator->quit;
ok(wait_until(sub { exists $recv->answered_2xx('/hooks/locked')->{"$W$fix"} }, 30, 'fixed message answered'),
	'once the UPDATE commits, the message is delivered');
my @fixed = grep { $_->{headers}{'webhook-id'} eq "$W$fix" } @{ $recv->requests(path => '/hooks/locked') };
is(scalar(@fixed), 1, '... once');
like($fixed[0]{body}, qr/after fix/, '... with the payload as updated, never the old one');
sleep 1;
is_deeply([ grep { $_->{headers}{'webhook-id'} eq "$W$gone" } @{ $recv->requests(path => '/hooks/locked') } ], [],
	'the deleted message was never sent');

# 4c. The settle finds a sent message where the claim read its row (its ctid), and by its
#     id when it is not there: an operator's UPDATE of a message whose request is in
#     flight moves the row; the answer still takes it out of the queue into the history,
#     once, and it is not sent again.

$recv->add_rule(path => '/hooks/changed', delay_ms => 3000, times => 1);
endpoint($node, $recv, 'changed', '/hooks/changed');
my $changed = sql($node, q{SELECT outbox.enqueue('changed', '{"which": "changed in flight"}')});
ok($recv->wait_requests('/hooks/changed', 1), 'the request of the message to change is at the receiver');
sql($node, qq{UPDATE outbox.messages SET headers = '{"x-changed": "yes"}' WHERE id = $changed});
ok(wait_sql($node, "SELECT status = 'sent' AND attempts = 1 FROM outbox.message($changed)", 30),
	'the message changed while in flight is sent after one attempt');
is(sql($node, "SELECT count(*) FROM outbox.messages WHERE id = $changed"), '0', '... its row left the queue');
sleep 2;
is(scalar @{ $recv->requests(path => '/hooks/changed') }, 1, '... and it was not sent again');

# 4d. The settle passes each key whose head it took out of the queue to the worker's
#     succession as the claim read it (a message being delivered keeps its key: t/052),
#     the keys of the rows it found where the claim read them as well as those of the
#     rows it then found by id. Two keyed messages of an ordered endpoint are answered
#     while the worker is busy settling a third message (answered 2 s before them, its
#     settle made to take 3 s by a trigger on the history), so that one settle moves
#     both; one of the two was changed while in flight. Each key's next message, enqueued
#     meanwhile, must be sent next.

$recv->add_rule(path => '/hooks/keyed', delay_ms => 4000, times => 2);
$recv->add_rule(path => '/hooks/slow', delay_ms => 2000, times => 1);
endpoint($node, $recv, 'keyed', '/hooks/keyed', ordered => 'true');
endpoint($node, $recv, 'slow', '/hooks/slow');
sql($node, q{
	CREATE FUNCTION slow_history() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
	    IF NEW.endpoint = 'slow' THEN PERFORM pg_sleep(3); END IF;
	    RETURN NULL;
	END $$;
	CREATE TRIGGER slow_history AFTER INSERT ON outbox.history FOR EACH ROW EXECUTE FUNCTION slow_history()});
my ($stays, $changes) = split /\|/, sql($node, q{
	WITH a AS (SELECT outbox.enqueue('keyed', '{"which": "stays"}', ordering_key => 'a') AS id),
	     b AS (SELECT outbox.enqueue('keyed', '{"which": "changed"}', ordering_key => 'b') AS id)
	SELECT a.id || '|' || b.id FROM a, b});
ok($recv->wait_requests('/hooks/keyed', 2), 'the requests of both keys are at the receiver');
sql($node, q{SELECT outbox.enqueue('slow', '{"which": "settled slowly"}')});
my $next_a = sql($node, q{SELECT outbox.enqueue('keyed', '{"which": "next of a"}', ordering_key => 'a')});
my $next_b = sql($node, q{SELECT outbox.enqueue('keyed', '{"which": "next of b"}', ordering_key => 'b')});
sql($node, qq{UPDATE outbox.messages SET headers = '{"x-changed": "yes"}' WHERE id = $changes});
ok(wait_sql($node, "SELECT s.status = 'sent' AND c.status = 'sent' FROM outbox.message($stays) s, outbox.message($changes) c", 30),
	'both messages are sent');
is(sql($node, "SELECT count(DISTINCT sent_at) FROM outbox.history WHERE id IN ($stays, $changes)"), '1',
	'... by one settle');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($next_a)", 30),
	"... the next message of the key whose row was where the claim read it is sent");
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($next_b)", 30),
	'... and that of the key whose row was changed in flight');
is(scalar @{ $recv->requests(path => '/hooks/keyed') }, 4, '... one request each');
sql($node, 'DROP TRIGGER slow_history ON outbox.history; DROP FUNCTION slow_history()');

# ---------------------------------------------------------------------------
# End of section 1: the first request of the lease message ends (the receiver closes
# it after 15 s, the endpoint's 20 s timeout not reached), unanswered: a retryable
# failure.  Only then may the message go again, as attempt 2, and it is answered 200.

ok(wait_until(sub { defined $recv->requests(path => '/hooks/lease')->[0]{answered_at} }, 40, 'first lease request ends'),
	'the hung first request of the lease message has ended');
ok(!defined $recv->requests(path => '/hooks/lease')->[0]{answered}, '... unanswered');
my $first_end = $recv->requests(path => '/hooks/lease')->[0]{answered_at};
note(sprintf('the first request hung %.3f s', $first_end - $first->{time}));
ok($recv->wait_requests('/hooks/lease', 2), 'a second request arrives after the first has ended');
my @lease_reqs = @{ $recv->requests(path => '/hooks/lease') };
is(scalar(grep { $_->{time} < $first_end } @lease_reqs), 1,
	'exactly one request was sent while the first one hung (one copy in flight)');
my $second = $lease_reqs[1];
is($second->{headers}{'webhook-id'}, "$W$lease_id", '... the second has the same webhook-id');
is($second->{headers}{'outbox-attempt'}, '2', '... as attempt 2');
cmp_ok($second->{time}, '>=', $first_end, '... and arrived after the first request had ended');
ok( wait_sql($node, "SELECT status = 'sent' AND attempts = 2 FROM outbox.message($lease_id)", 30),
	'the second request is answered 200: the message is sent after 2 attempts');
ok(exists $recv->answered_2xx('/hooks/lease')->{"$W$lease_id"},
	'... the receiver answered it 2xx');
ok(housekeeping_round(), 'a housekeeping round ran after it');
is(sql($node, "SELECT status || '/' || attempts FROM outbox.message($lease_id)"), 'sent/2',
	'the message stays sent after 2 attempts');
is(scalar(@{ $recv->requests(path => '/hooks/lease') }), 2, '... with two requests in all');
is(sql($node, "SELECT count(*) FROM outbox.claims WHERE $lease_id = ANY (message_ids)"), '0', '... and no claim left');
is(sql($node, "SELECT count(*) FROM dlq.dead_letters WHERE message_id = $lease_id"), '0',
	'... and dead-letters nothing');

is(wait_for_worker($node), $pid_start, 'one worker for the whole file');
my @bad = grep { /PANIC|terminated by signal/ } split /\n/, slurp_file($node->logfile);
ok(!@bad, 'no PANIC, no crash in the server log') or diag(join "\n", @bad);

$probe->quit;
$node->stop;
$recv->stop;
done_testing();
