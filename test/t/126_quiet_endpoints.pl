#!/usr/bin/perl
# Quiet endpoints (docs/delivery.md, "Claim"; src/core/quiet_endpoints.hpp). While one
# endpoint drains, holding its share of the claimed work, the worker claims again after
# each of its results; an idle HTTP endpoint that such a claim found with nothing to take
# is left out of the claims that follow, and a claim with nothing else to take is not run.
# None of its messages may wait for that. With the poll interval at 30 s, during a slow
# drain of another endpoint:
#
#  1. the idle endpoints' part of the queue is not walked after every result: the claim
#     index is scanned less than once per result of the busy endpoint (before: once per
#     idle endpoint at every result);
#  2. an ordered key's next message goes once its head is answered, not at the poll:
#     the head's result ends its endpoint's quiet;
#  3. a message with a deliver_at 2 s ahead goes at that time (the quiet ends when
#     something of the endpoint's comes due);
#  4. a retry the receiver asked for in 2 s (503, Retry-After) goes at that time;
#  5. a message committed for a quiet endpoint goes at once (a commit's wake ends
#     every quiet);
#  6. with nothing else going on, a quiet endpoint's due time still wakes the worker,
#     after claims that left the endpoint out (6), and when no claim ran at all (7);
#  8. so does a NOTIFY message's, which the claims leave to the NOTIFY round;
#  9. a commit's wake during the worker's pause after an error is kept for the NOTIFY
#     round;
# 10. a retry makes room for another endpoint's message at once;
# 11. results make room when the byte budget held messages back: a backlog larger than
#     pg_outbox.max_inflight_bytes drains with nothing else to wake the worker.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $node = new_outbox_node(
	'quiet_endpoints',
	'pg_outbox.poll_interval'     => '30s',
	'pg_outbox.backoff_max'       => '1min',
	'pg_outbox.breaker_threshold' => '1000');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $recv = start_receiver();

endpoint($node, $recv, 'busy', '/busy', concurrency => 8);
endpoint($node, $recv, $_, "/$_") for qw(later flaky fresh idle1 idle2);
endpoint($node, $recv, 'ordered', '/ordered', ordered => 'true');
$recv->add_rule(path => '/busy',    status => 200, delay_ms => 50);    # 160 a second: a drain of ~20 s
$recv->add_rule(path => '/ordered', status => 200, delay_ms => 500);

# When the first request of a path (at or after receiver record $since) arrived.
sub arrivals
{
	my ($path, $since) = @_;
	return map { $_->{time} } @{ $recv->requests(path => $path, since => $since // 0) };
}

# The first request of 'later' after receiver record $since, $t0 the time of the commit
# that made it due in $due_s seconds: it arrived, not before then, and well before the
# 30 s poll ($why: what else could have sent it late).
sub later_arrives_at_its_time
{
	my ($since, $t0, $due_s, $why) = @_;
	ok(wait_until(sub { arrivals('/later', $since) >= 1 }, 15), "the message due in $due_s s arrived");
	my ($at) = arrivals('/later', $since);
	cmp_ok(($at // 0) - $t0, '>=', $due_s - 0.5, '... not before its deliver_at');
	cmp_ok(($at // 99 + $t0) - $t0, '<', $due_s + 3, "... at its time, $why");
}

sub claim_index_scans
{
	return sql($node, q{SELECT pg_stat_force_next_flush(); SELECT idx_scan FROM pg_stat_user_indexes
	                     WHERE indexrelname = 'messages_claim_idx'});
}

sql($node, q{SELECT outbox.pause_endpoint('busy')});
sql($node, q{INSERT INTO outbox.messages (endpoint, payload) SELECT 'busy', jsonb_build_object('n', g)
               FROM generate_series(1, 3000) g});
sql($node, q{SELECT outbox.resume_endpoint('busy')});
ok($recv->wait_requests('/busy', 50, 30), 'the drain is under way');

# ---------------------------------------------------------------------------
# 1. The idle endpoints are not claimed at every result of the busy one.

my $scans0  = claim_index_scans();
my $busy0   = scalar @{ $recv->requests(path => '/busy') };
sleep 3;
my $scans  = claim_index_scans() - $scans0;
my $busy   = scalar @{ $recv->requests(path => '/busy') } - $busy0;
note "in 3 s of the drain: $busy requests, $scans scans of the claim index";
cmp_ok($busy, '>=', 100, 'the busy endpoint kept being answered');
# Before: every result of the busy one was followed by a claim of the six idle endpoints
# (2,713 scans for 488 results); since, 73 for 480.
cmp_ok($scans, '<', $busy / 2, 'the claim index was scanned less than once per result of the busy endpoint, '
	  . 'not once per idle endpoint at every result');

# ---------------------------------------------------------------------------
# 2. An ordered key: each message goes once the one before it is answered.

my $since = $recv->requests()->[-1]{seq};
my $t0 = time();
sql($node, q{BEGIN;
	SELECT outbox.enqueue('ordered', '{"n": 1}', ordering_key => 'k');
	SELECT outbox.enqueue('ordered', '{"n": 2}', ordering_key => 'k');
	SELECT outbox.enqueue('ordered', '{"n": 3}', ordering_key => 'k');
	COMMIT});
ok(wait_until(sub { arrivals('/ordered', $since) >= 3 }, 15), "the key's three messages arrived");
my @ordered = @{ $recv->requests(path => '/ordered', since => $since) };
is(join(',', map { $_->{body} =~ /"n": ?(\d+)/ ? $1 : '?' } @ordered), '1,2,3', '... in order');
cmp_ok(($ordered[-1]{time} // 99 + $t0) - $t0, '<', 6,
	'... each as soon as the one before was answered (0.5 s each), not at the 30 s poll');

# ---------------------------------------------------------------------------
# 3. deliver_at 2 s ahead.

$since = $recv->requests()->[-1]{seq};
$t0 = time();
sql($node, q{SELECT outbox.enqueue('later', '{}', deliver_at => now() + interval '2 s')});
later_arrives_at_its_time($since, $t0, 2, 'not at the 30 s poll');

# ---------------------------------------------------------------------------
# 4. A retry the receiver asked for in 2 s.

$recv->add_rule(path => '/flaky', status => 503, retry_after => '2', times => 1);
$since = $recv->requests()->[-1]{seq};
sql($node, q{SELECT outbox.enqueue('flaky', '{}')});
ok(wait_until(sub { arrivals('/flaky', $since) >= 2 }, 15), 'the retried message arrived again');
my @flaky = arrivals('/flaky', $since);
cmp_ok(($flaky[1] // 0) - ($flaky[0] // 0), '>=', 1.5, '... not before its Retry-After');
cmp_ok(($flaky[1] // 99) - ($flaky[0] // 0), '<', 6, '... at its time, not at the 30 s poll');

# ---------------------------------------------------------------------------
# 5. A commit for a quiet endpoint.

$since = $recv->requests()->[-1]{seq};
$t0 = time();
sql($node, q{SELECT outbox.enqueue('fresh', '{}')});
ok(wait_until(sub { arrivals('/fresh', $since) >= 1 }, 15), 'a message committed for a quiet endpoint arrived');
my ($fresh_at) = arrivals('/fresh', $since);
cmp_ok(($fresh_at // 99 + $t0) - $t0, '<', 3, '... at once');

ok(scalar(arrivals('/busy')) < 3000 || sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'busy'}) > 0,
	'the busy endpoint was still draining through all of it')
  or diag('the drain ended early: the sections above did not run beside it');
ok(wait_sql($node, q{SELECT count(*) = 0 FROM outbox.messages}, 90), 'everything was delivered');

# ---------------------------------------------------------------------------
# 6. A quiet endpoint's due time outlives the claims that leave it out: 'later' is found
# with nothing due yet beside a request to 'slow'; the claim after slow's answer (1 s)
# leaves quiet 'later' out, and must still wake the worker at later's due time (3 s),
# with nothing else to wake it.

endpoint($node, $recv, 'slow', '/slow');
$recv->add_rule(path => '/slow', status => 200, delay_ms => 1000, times => 1);
$since = $recv->requests()->[-1]{seq};
$t0 = time();
sql($node, q{BEGIN;
	SELECT outbox.enqueue('slow', '{}');
	SELECT outbox.enqueue('later', '{"at": 3}', deliver_at => now() + interval '3 s');
	COMMIT});
later_arrives_at_its_time($since, $t0, 3, 'although the claims after it left its endpoint out');

# ---------------------------------------------------------------------------
# 7. The same when no claim runs at all: 'hold' (one connection) holds its share of ten
# messages, answered after 2 s, then 8 s; 'later' is due in 3 s. At the first answer
# nothing can be claimed (hold holds its share, later is quiet), so no claim runs, and
# the worker must still look again at later's due time, not at the next answer.

endpoint($node, $recv, 'hold', '/hold', concurrency => 1);
$recv->add_rule(path => '/hold', status => 200, delay_ms => 2000, times => 1);
$recv->add_rule(path => '/hold', status => 200, delay_ms => 8000, times => 1);
$since = $recv->requests()->[-1]{seq};
$t0 = time();
sql($node, q{BEGIN;
	SELECT outbox.enqueue('hold', jsonb_build_object('n', g)) FROM generate_series(1, 10) g;
	SELECT outbox.enqueue('later', '{"at": 3}', deliver_at => now() + interval '3 s');
	COMMIT});
later_arrives_at_its_time($since, $t0, 3, 'not at the next answer (10 s)');
ok(wait_sql($node, q{SELECT count(*) = 0 FROM outbox.messages}, 60), "hold's messages were delivered");
is(sql($node, q{SELECT count(*) FROM dlq.dead_letters}), '0', 'nothing dead-lettered');

# ---------------------------------------------------------------------------
# 8. A NOTIFY message due in 3 s, beside one due now: the claims leave NOTIFY endpoints'
# due times to their round, which goes quiet until then; the worker must wake at that
# time, not at the 30 s poll.

sql($node, q{SELECT outbox.create_endpoint('feed', channel => 'feed')});
my ($now_id, $later_id) = split /\n/, sql($node, q{BEGIN;
	SELECT outbox.enqueue('feed', '{"at": 0}');
	SELECT outbox.enqueue('feed', '{"at": 3}', deliver_at => now() + interval '3 s');
	COMMIT});
ok(wait_sql($node, "SELECT count(*) = 2 FROM outbox.history WHERE id IN ($now_id, $later_id)", 15),
	'both NOTIFY messages were notified');
my $late = sql($node, "SELECT extract(epoch FROM sent_at - created_at) FROM outbox.history WHERE id = $later_id");
cmp_ok($late, '>=', 2.5, '... the later one not before its deliver_at');
cmp_ok($late, '<', 6, '... and at its time, not at the poll');

# ---------------------------------------------------------------------------
# 9. A commit's wake that comes while the worker pauses after an error is kept for the
# NOTIFY round: feed is quiet again (its round found nothing), the worker's wait is
# cancelled (an error: it pauses 200 ms), and a message is committed for feed at once,
# within the pause. It must go after the pause, not at the 30 s poll.

ok(wait_until(sub { sql($node, q{SELECT state FROM outbox.worker_status()}) eq 'idle' }, 15), 'the worker is idle');
sleep 1;
my $errors_before = () = slurp_file($node->logfile) =~ /canceling statement due to user request/g;
my (undef, $woken_id) = split /\n/,
  sql($node, q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker';
	SELECT outbox.enqueue('feed', '{"woken": true}')});
ok(wait_sql($node, "SELECT count(*) = 1 FROM outbox.history WHERE id = $woken_id", 15),
	'the message committed during the pause was notified');
cmp_ok(sql($node, "SELECT extract(epoch FROM sent_at - created_at) FROM outbox.history WHERE id = $woken_id"),
	'<', 5, '... after the pause, not at the poll');
my $errors_after = () = slurp_file($node->logfile) =~ /canceling statement due to user request/g;
is($errors_after - $errors_before, 1, '(the worker did pause on the cancel)');

# ---------------------------------------------------------------------------
# 10. A retry makes room. With batch_size 3 and max_concurrency 3 the worker keeps up to
# 6 messages claimed (3 a claim) and claims again once fewer than 3 are held for
# endpoints that may take more.
# 'trio' holds 3 in one claim, less than its share (6): a message committed for 'next'
# is not claimed. The first of trio's answers, 2 s later, is a 503 to be retried in 20 s;
# the others come after 15 s. The retry leaves the worker's hands in a claim not yet
# finished (a finished claim, or an endpoint that held its share, makes room by
# themselves): next's message goes then, not at the other answers (14.95 s when the
# retry made no room).

ok(reload_conf($node, 'pg_outbox.batch_size' => '3', 'pg_outbox.max_concurrency' => '3'),
	'batch_size 3, max_concurrency 3');
endpoint($node, $recv, $_, "/$_") for qw(trio next);
$recv->add_rule(path => '/trio', status => 503, retry_after => '20', delay_ms => 2000, times => 1);
$recv->add_rule(path => '/trio', status => 200, delay_ms => 15000, times => 2);
sql($node, q{SELECT outbox.enqueue('trio', jsonb_build_object('n', g)) FROM generate_series(1, 3) g});
ok(wait_until(sub { arrivals('/trio') >= 3 }, 10), "trio's three requests are in flight");
my $t_next = time;
sql($node, q{SELECT outbox.enqueue('next', '{}')});
ok(wait_until(sub { arrivals('/next') >= 1 }, 30), "next's message arrived");
my ($next_at) = arrivals('/next');
note(sprintf('next arrived %.2f s after its commit', ($next_at // 0) - $t_next));
cmp_ok(($next_at // 99 + $t_next) - $t_next, '<', 8, '... once the retry made room, not at the 15 s answer or the poll');
ok(reload_conf($node, 'pg_outbox.batch_size' => undef, 'pg_outbox.max_concurrency' => undef),
	'batch_size and max_concurrency back');

# ---------------------------------------------------------------------------
# 11. The byte budget. With max_inflight_bytes at 1 MB, 16 payloads of 300 kB are claimed
# four at a time at most: a claim stops at the budget, or finds none left and claims
# nothing. Each answer takes 300 ms. Nothing is committed meanwhile and the poll is 30 s
# away: only the results' room can call the claims that follow (before 892a0a3 every
# settle called one; a claim that stopped at the budget must still be followed).

ok(reload_conf($node, 'pg_outbox.max_inflight_bytes' => '1MB'), 'max_inflight_bytes 1MB');
endpoint($node, $recv, 'bulky', '/bulky');
$recv->add_rule(path => '/bulky', status => 200, delay_ms => 300);
my $t_bulky = time;
sql($node, q{SELECT outbox.enqueue('bulky', jsonb_build_object('n', g, 'blob', repeat('x', 300000)))
               FROM generate_series(1, 16) g});
ok(wait_until(sub { arrivals('/bulky') >= 16 }, 20), 'the 16 payloads of 300 kB arrived, well before the poll');
note(sprintf('the last arrived %.2f s after the commit', ((sort { $a <=> $b } arrivals('/bulky'))[-1] // 0) - $t_bulky));
ok(reload_conf($node, 'pg_outbox.max_inflight_bytes' => undef), 'max_inflight_bytes back');

$recv->stop;
my @bad = grep { /PANIC|terminated by signal/ } split /\n/, slurp_file($node->logfile);
ok(!@bad, 'no PANIC, no crash in the server log') or diag(join "\n", @bad);
$node->stop;
done_testing();
