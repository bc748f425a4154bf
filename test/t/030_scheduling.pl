#!/usr/bin/perl
# When messages go out (docs/delivery.md, "Scheduled delivery", "Retries and backoff"; docs/operations.md, "Configuration"):
#
#  - a paused endpoint delivers nothing, everything after resume_endpoint;
#  - deliver_at: never before that time;
#  - pg_outbox.enabled = off (reload) stops delivery, on resumes it;
#  - SIGHUP re-reads batch_size and max_concurrency in the running worker (same
#    pid): observed through the rows in flight and the requests in flight;
#  - a delivered message leaves the queue (outbox.messages) for the history
#    (outbox.history); sent_retention = 0 keeps no history; outbox.purge() deletes
#    retained sent messages older than an interval; the worker purges by
#    sent_retention itself, dropping whole history partitions.
#
# Where a message stands is read with outbox.message(id), wherever its row lives.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use List::Util qw(max min);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $node = new_outbox_node(
	'scheduling',
	'pg_outbox.backoff_base'      => '50ms',
	'pg_outbox.backoff_max'       => '1s',
	'pg_outbox.breaker_threshold' => '1000');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $W = webhook_prefix($node);    # webhook-id = $W<id> (docs/delivery.md, Webhook id)
my $recv = start_receiver();

# Where the messages stand, wherever their rows live now (outbox.message(): the queue,
# the history or the DLQ): "N:S", N the number of the ids that have a row, S their
# distinct "status/attempts", e.g. "5:pending/0".
sub states_of
{
	return sql($node, sprintf(q{SELECT count(*) || ':' || coalesce(string_agg(DISTINCT s.status || '/' || s.attempts, ','), '')
	                       FROM unnest('{%s}'::bigint[]) AS i(id) CROSS JOIN LATERAL outbox.message(i.id) s},
			join(',', @_)));
}

# ALTER SYSTEM + pg_reload_conf(), then waits until the worker reports that it
# re-read its configuration (OutboxTest::reload_conf; undef resets a setting).
sub reload_with
{
	my (%set) = @_;
	ok(reload_conf($node, map { ($_ => $set{$_}) } sort keys %set),
		'the worker applied ' . join(', ', map { "$_ = " . ($set{$_} // 'default') } sort keys %set));
}

my $pid_start = worker_pid($node);
like($pid_start, qr/^\d+$/, 'worker running');

# ---------------------------------------------------------------------------
# 1. A paused endpoint keeps accepting messages and delivers none until resumed.

endpoint($node, $recv, 'paused', '/hooks/paused');
sql($node, q{SELECT outbox.pause_endpoint('paused')});
my @paused_ids = split /\n/, sql($node, q{
	SELECT outbox.enqueue('paused', jsonb_build_object('n', g)) FROM generate_series(1, 5) g});
is(scalar(@paused_ids), 5, 'paused endpoint accepts messages');
# A control endpoint proves the worker is busy delivering meanwhile.
endpoint($node, $recv, 'control', '/hooks/control');
sql($node, q{SELECT outbox.enqueue('control', '{"control": 1}')});
ok($recv->wait_requests('/hooks/control', 1), 'another endpoint delivers meanwhile');
sleep(2);    # an observation window: a paused endpoint's message would show here
is(scalar(@{ $recv->requests(path => '/hooks/paused') }), 0, 'nothing sent while paused (2 s)');
is(states_of(@paused_ids), '5:pending/0', 'paused messages stay pending, no attempt spent');
is(sql($node, q{SELECT paused || '/' || pending FROM outbox.endpoint_stats WHERE endpoint = 'paused'}),
	'true/5', 'endpoint_stats shows it paused with 5 pending');

my $t_resume = time;
sql($node, q{SELECT outbox.resume_endpoint('paused')});
ok($recv->wait_requests('/hooks/paused', 5), 'all five delivered after resume_endpoint');
note(sprintf('five paused messages delivered %.3f s after resume', time - $t_resume));
ok(wait_until(sub { states_of(@paused_ids) eq '5:sent/1' }, undef, 'the paused messages sent'),
	'all five sent after one attempt');
is(sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'paused'}), '0', '... and the queue holds none of them');
is_deeply([ sort map { $_->{headers}{'webhook-id'} } @{ $recv->requests(path => '/hooks/paused') } ],
	[ sort map { "$W$_" } @paused_ids ], 'each paused message exactly once');

# ---------------------------------------------------------------------------
# 2. deliver_at: not before that time.

endpoint($node, $recv, 'later', '/hooks/later');
my $later_id = sql($node, q{SELECT outbox.enqueue('later', '{"later": true}',
                                           deliver_at => now() + interval '3 seconds')});
my $deliver_at = sql($node, "SELECT extract(epoch FROM next_attempt_at) FROM outbox.messages WHERE id = $later_id");
my $now_id = sql($node, q{SELECT outbox.enqueue('later', '{"later": false}')});
ok($recv->wait_requests('/hooks/later', 1), 'a message without deliver_at goes at once');
is($recv->requests(path => '/hooks/later')->[0]{headers}{'webhook-id'}, "$W$now_id", '... and it is that one');
# Before deliver_at, judged in one statement on the server's clock: whatever the
# test's own delays, a row seen before its time must still be pending, untouched.
my ($early, $state) = split /\|/, sql($node, "SELECT clock_timestamp() < m.next_attempt_at, s.status || '/' || s.attempts
	FROM outbox.messages m CROSS JOIN LATERAL outbox.message(m.id) s WHERE m.id = $later_id");
is($early, 't', 'checked before deliver_at');
is($state, 'pending/0', 'before deliver_at it is still pending with no attempt');
ok($recv->wait_requests('/hooks/later', 2), 'the deferred message arrives');
my $got = $recv->requests(path => '/hooks/later')->[1];
is($got->{headers}{'webhook-id'}, "$W$later_id", '... the deferred one');
note(sprintf('deliver_at message received %.3f s after deliver_at', $got->{time} - $deliver_at));
ok($got->{time} >= $deliver_at, 'received no earlier than deliver_at');
ok($got->{time} < $deliver_at + 10, 'received soon after deliver_at (the worker wakes for it; its poll would do too)');

# ---------------------------------------------------------------------------
# 3. pg_outbox.enabled = off stops delivery; on resumes it.

endpoint($node, $recv, 'switch', '/hooks/switch');
reload_with('pg_outbox.enabled' => 'off');
ok(wait_sql($node, q{SELECT state = 'disabled' FROM outbox.worker_status()}),
	'worker_status() says disabled');
my @switch_ids = split /\n/, sql($node, q{
	SELECT outbox.enqueue('switch', jsonb_build_object('n', g)) FROM generate_series(1, 3) g});
sleep(1.5);    # an observation window: a delivery while disabled would show here
is(scalar(@{ $recv->requests(path => '/hooks/switch') }), 0, 'nothing delivered while disabled (1.5 s)');
is(states_of(@switch_ids), '3:pending/0', 'messages stay pending while disabled');
reload_with('pg_outbox.enabled' => 'on');
ok($recv->wait_requests('/hooks/switch', 3), 'delivered once enabled again');
ok(wait_until(sub { states_of(@switch_ids) eq '3:sent/1' }, undef, 'the switch messages sent'),
	'all three sent');
isnt(sql($node, 'SELECT state FROM outbox.worker_status()'), 'disabled', 'no longer disabled');
is(worker_pid($node), $pid_start, 'same worker: enabled was re-read without a restart');

# ---------------------------------------------------------------------------
# 4. SIGHUP re-reads batch_size and max_concurrency in the running worker.
#    Every request to /hooks/slow takes 200 ms to answer.
#    Observed: rows in flight (claimed: listed in outbox.claims and still in the queue)
#    at any moment - bounded by the claim size - and requests in flight at the
#    receiver - bounded by max_concurrency.

endpoint($node, $recv, 'slow', '/hooks/slow');
$recv->add_rule(path => '/hooks/slow', status => 200, delay_ms => 200);
my $sampler = $node->background_psql('postgres');

# Enqueues $n messages in one transaction, samples the rows in flight until all
# are sent; returns (max rows in flight, the requests).
sub drain_slow
{
	my ($n, $tag) = @_;
	my $before = @{ $recv->requests(path => '/hooks/slow') };
	sql($node, qq{SELECT outbox.enqueue('slow', jsonb_build_object('tag', '$tag', 'n', g))
	         FROM generate_series(1, $n) g});
	my $max_in_flight = 0;
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	while (time < $deadline)
	{
		my ($in_flight, $sent) = split /\|/, $sampler->query_safe(qq{
			SELECT (SELECT count(*) FROM outbox.messages m
			         WHERE m.endpoint = 'slow' AND m.payload->>'tag' = '$tag'
			           AND EXISTS (SELECT FROM outbox.claims c WHERE m.id = ANY (c.message_ids))),
			       (SELECT count(*) FROM outbox.history h
			         WHERE h.endpoint = 'slow' AND h.payload->>'tag' = '$tag')});
		$max_in_flight = max($max_in_flight, $in_flight);
		last if $sent == $n;
		sleep(0.02);
	}
	my @r = @{ $recv->requests(path => '/hooks/slow') };
	return ($max_in_flight, [ @r[ $before .. $#r ] ]);
}

# Most requests arriving within any 150 ms window (each answer takes 200 ms or more,
# so one connection can carry at most one request per window).
sub max_burst
{
	my @t = sort { $a <=> $b } map { $_->{time} } @_;
	my ($best, $lo) = (0, 0);
	for my $hi (0 .. $#t)
	{
		$lo++ while $t[$hi] - $t[$lo] > 0.15;
		$best = max($best, $hi - $lo + 1);
	}
	return $best;
}

my $pid_before = worker_pid($node);
reload_with('pg_outbox.batch_size' => '1', 'pg_outbox.max_concurrency' => '1');
my ($in_flight_a, $reqs_a) = drain_slow(10, 'a');
is(scalar(@$reqs_a), 10, 'batch_size 1, max_concurrency 1: ten requests');
note("batch_size 1, max_concurrency 1: at most $in_flight_a rows in flight, burst "
	  . max_burst(@$reqs_a));
ok($in_flight_a <= 2, "batch_size 1: never more than 2 rows claimed at once (saw $in_flight_a)");
my @gaps = map { $reqs_a->[$_]{time} - $reqs_a->[ $_ - 1 ]{time} } 1 .. $#$reqs_a;
my $min_gap = @gaps ? min(@gaps) : 0;
note(sprintf('max_concurrency 1: smallest gap between requests %.3f s', $min_gap));
ok($min_gap >= 0.18, 'max_concurrency 1: one request at a time (each waits for the 200 ms answer)');
is(worker_pid($node), $pid_before, 'same worker pid after the reload');

reload_with('pg_outbox.batch_size' => '20', 'pg_outbox.max_concurrency' => '4');
# Answers of 1 s here: the claimed rows stay in flight for seconds, long enough for
# the sampler to see them on a loaded machine.
$recv->clear_rules;
$recv->add_rule(path => '/hooks/slow', status => 200, delay_ms => 1000);
my ($in_flight_b, $reqs_b) = drain_slow(20, 'b');
is(scalar(@$reqs_b), 20, 'batch_size 20, max_concurrency 4: twenty requests');
my $burst_b = max_burst(@$reqs_b);
note("batch_size 20, max_concurrency 4: at most $in_flight_b rows in flight, burst $burst_b");
# (batch_size still 1 would claim one at a time, up to about 2 * max_concurrency / 2.)
ok($in_flight_b >= 10, "batch_size 20: many rows claimed at once (saw $in_flight_b)");
ok($burst_b >= 2, "max_concurrency 4: requests in parallel (burst $burst_b)");
ok($burst_b <= 4, "max_concurrency 4: never more than 4 at once (burst $burst_b)");
is(worker_pid($node), $pid_before, 'same worker pid after the second reload');
ok(wait_sql($node, q{SELECT count(*) = 30 AND count(*) FILTER (WHERE attempts = 1) = 30
                      AND NOT EXISTS (SELECT FROM outbox.messages WHERE endpoint = 'slow')
                      FROM outbox.history WHERE endpoint = 'slow'}),
	'all 30 slow messages sent after one attempt each');
$sampler->quit;
$recv->clear_rules;
reload_with('pg_outbox.batch_size' => undef, 'pg_outbox.max_concurrency' => undef);

# ---------------------------------------------------------------------------
# 5. sent_retention = 0: a delivered message leaves the queue and is kept nowhere.

endpoint($node, $recv, 'ret0', '/hooks/ret0');
reload_with('pg_outbox.sent_retention' => '0');
my @ret0 = split /\n/, sql($node, q{SELECT outbox.enqueue('ret0', jsonb_build_object('n', g)) FROM generate_series(1, 3) g});
ok($recv->wait_requests('/hooks/ret0', 3), 'sent_retention 0: three delivered');
ok(wait_sql($node, q{SELECT NOT EXISTS (SELECT FROM outbox.messages WHERE endpoint = 'ret0')
                      AND NOT EXISTS (SELECT FROM outbox.history WHERE endpoint = 'ret0')}),
	'sent_retention 0: their rows are gone (from the queue, and none in the history)');
is(states_of(@ret0), '0:', 'sent_retention 0: outbox.message() knows none of them');
is(sql($node, q{SELECT count(*) FROM dlq.dead_letters WHERE endpoint = 'ret0'}), '0',
	'sent_retention 0: (not dead-lettered)');
is(scalar(@{ $recv->requests(path => '/hooks/ret0') }), 3, 'sent_retention 0: each delivered once');
is(worker_pid($node), $pid_start, 'same worker pid');

reload_with('pg_outbox.sent_retention' => undef);
my $kept = sql($node, q{SELECT outbox.enqueue('ret0', '{"kept": true}')});
ok($recv->wait_requests('/hooks/ret0', 4), 'default retention again: delivered');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($kept)"),
	'default retention again: the sent row is kept');
is(sql($node, "SELECT count(*) FROM outbox.history WHERE id = $kept"), '1', '... in the history');

# ---------------------------------------------------------------------------
# 6. outbox.purge(): retained sent messages older than the interval are deleted from
#    the history; pending rows never.

# Makes a delivered message look sent $ago before now: its history row's sent_at moves
# back (into the partition that covers that time: the default partition when none
# does), and outbox.history_counts follows it, as the settle would have counted it.
sub sent_ago
{
	my ($id, $ago) = @_;
	sql($node, qq{
		BEGIN;
		CREATE TEMP TABLE aged ON COMMIT DROP AS
		  SELECT tableoid::regclass AS part, endpoint FROM outbox.history WHERE id = $id;
		UPDATE outbox.history SET sent_at = now() - interval '$ago' WHERE id = $id;
		INSERT INTO outbox.history_counts AS hc (partition, endpoint, slot, sent)
		  SELECT a.part, a.endpoint, 0, -1 FROM aged a WHERE a.part <> 'outbox.history_default'::regclass
		  ON CONFLICT (partition, endpoint, slot) DO UPDATE SET sent = hc.sent - 1;
		INSERT INTO outbox.history_counts AS hc (partition, endpoint, slot, sent)
		  SELECT h.tableoid::regclass, h.endpoint, 0, 1 FROM outbox.history h
		   WHERE h.id = $id AND h.tableoid <> 'outbox.history_default'::regclass
		  ON CONFLICT (partition, endpoint, slot) DO UPDATE SET sent = hc.sent + 1;
		COMMIT;});
}

endpoint($node, $recv, 'keep', '/hooks/keep');
endpoint($node, $recv, 'hold', '/hooks/hold');
sql($node, q{SELECT outbox.pause_endpoint('hold')});
my $held = sql($node, q{SELECT outbox.enqueue('hold', '{"held": true}')});
my ($k1, $k2, $k3) = split /\n/, sql($node, q{SELECT outbox.enqueue('keep', jsonb_build_object('n', g)) FROM generate_series(1, 3) g});
ok(wait_sql($node, q{SELECT count(*) = 3 FROM outbox.history WHERE endpoint = 'keep'}),
	'three kept messages sent');
sent_ago($k1, '2 hours');
sent_ago($k2, '30 minutes');
is(sql($node, q{SELECT outbox.purge(interval '1 hour')}), '1', 'purge(1 hour) deletes one row');
is(sql($node, "SELECT string_agg(id::text, ',' ORDER BY id) FROM outbox.history WHERE endpoint = 'keep'"),
	"$k2,$k3", '... the one sent two hours ago');
is(sql($node, "SELECT count(*) FROM outbox.message($k1)"), '0', '... which outbox.message() no longer knows');
is(sql($node, q{SELECT outbox.purge()}), '0', 'purge() with the default retention (1 day) deletes none');
my $all_sent = sql($node, q{SELECT count(*) FROM outbox.history});
cmp_ok($all_sent, '>', 2, "there are $all_sent sent rows");
is(sql($node, q{SELECT outbox.purge(interval '0')}), $all_sent, 'purge(0) deletes every sent row');
is(sql($node, q{SELECT count(*) FROM outbox.history}), '0', 'no sent row left');
is(sql($node, "SELECT status || '/' || attempts FROM outbox.message($held)"), 'pending/0',
	'the pending message of a paused endpoint survives purge');
is(sql($node, "SELECT count(*) FROM outbox.messages WHERE id = $held"), '1', '... in the queue');
my ($rc, $out, $err) = $node->psql('postgres', q{SELECT outbox.purge(interval '-1 hour')});
isnt($rc, 0, 'purge of a negative interval is refused');
like($err, qr/negative/, '... with a clear error');

# The worker purges by sent_retention on its own.
my @auto = split /\n/, sql($node, q{SELECT outbox.enqueue('keep', jsonb_build_object('auto', g)) FROM generate_series(1, 4) g});
ok(wait_sql($node, sprintf(q{SELECT count(*) = 4 FROM outbox.history WHERE id IN (%s)}, join(',', @auto))),
	'four more sent and retained');
my @auto_parts = split /\n/, sql($node, sprintf(q{SELECT DISTINCT tableoid::regclass FROM outbox.history WHERE id IN (%s)},
		join(',', @auto)));
note('the history partitions that hold them: ' . join(', ', @auto_parts));
reload_with('pg_outbox.sent_retention' => '1s');
ok(wait_sql($node, sprintf(q{SELECT count(*) = 0 FROM outbox.history WHERE id IN (%s)}, join(',', @auto))),
	'sent_retention 1s: the worker purged them itself');
is(states_of(@auto), '0:', '... outbox.message() knows none of them');
# They sat in a partition made for the default retention (6 h wide): a shorter retention
# does not wait for its end, the worker trims such a partition row by row, and drops
# whole the 10 s partitions made for the new retention.
is(sql($node, sprintf(q{SELECT count(*) FROM unnest('{%s}'::text[]) AS p(name)
                  JOIN outbox._history_partitions() hp ON hp.partition = to_regclass(p.name)
                 WHERE hp.to_at - hp.from_at > interval '10 s'},
			join(',', map { qq{"$_"} } grep { $_ ne 'outbox.history_default' } @auto_parts))),
	scalar(grep { $_ ne 'outbox.history_default' } @auto_parts),
	'... from the wide partitions of the old retention, trimmed row by row');
ok(wait_sql($node, q{SELECT count(*) = 0 FROM outbox._history_partitions() p
                     WHERE p.from_at > now() AND p.to_at - p.from_at > interval '10 s'}),
	'the empty partitions made ahead for the old retention are dropped');
is(sql($node, "SELECT status || '/' || attempts FROM outbox.message($held)"), 'pending/0',
	'... but not the pending one');
reload_with('pg_outbox.sent_retention' => undef);
is(worker_pid($node), $pid_start, 'one worker for the whole file');

my @bad = grep { /PANIC|terminated by signal/ } split /\n/, slurp_file($node->logfile);
ok(!@bad, 'no PANIC, no crash in the server log') or diag(join "\n", @bad);

$node->stop;
$recv->stop;
done_testing();
