#!/usr/bin/perl
# The circuit breaker's probes, seen from the receiver (docs/delivery.md, "Circuit breaker"):
#  - "After a cool-down, exactly one probe message is sent. The cool-down starts at
#    backoff_base, doubles with every failed probe, and is capped at backoff_max."
#    The receiver answers 503 to everything, so every probe reaches it and fails:
#    once the circuit has opened, the requests come one at a time, never two within
#    backoff_base/2 of each other, and no more of them than the cool-downs allow;
#    a probe that fails is followed by the next one when its cool-down ends, also when
#    the failed probe's own retry is due much later (Retry-After: 60).
#  - "A successful probe closes the circuit, and the waiting messages flow again at
#    once."  The receiver then answers 200: all the waiting messages are answered
#    well before the poll interval (30 s here) could have found them.
# (t/060 covers the outage itself, at a closed port where probes are invisible.)
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $THRESHOLD  = 3;
my $BASE_S     = 0.2;     # pg_outbox.backoff_base
my $MAX_S      = 1.6;     # pg_outbox.backoff_max
my $MSGS       = 50;
my $PROBES     = 5;       # failed probes observed before the receiver recovers
my $PATH       = '/hooks/probe';

# max_concurrency = 1: the requests of the first claim go out one after the other, so
# the circuit opens on the answer to the THRESHOLD-th request and every later request
# is a probe (the requests still queued are given back, docs/delivery.md).  With many in flight
# at once, the failures that open the circuit would be mixed with late answers.
# poll_interval = 30 s: the probes and the recovery must come from the breaker's own
# timing and from the close, never from the poll.
my $node = new_outbox_node(
	'probe',
	'pg_outbox.poll_interval'     => '30s',
	'pg_outbox.breaker_threshold' => $THRESHOLD,
	'pg_outbox.backoff_base'      => ($BASE_S * 1000) . 'ms',
	'pg_outbox.backoff_max'       => ($MAX_S * 1000) . 'ms',
	'pg_outbox.max_attempts'      => '1000',
	'pg_outbox.max_concurrency'   => '1');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');

my $recv = start_receiver();
$recv->add_rule(path => $PATH, status => 503);    # no "times": every request fails

sql($node, sprintf(q{SELECT outbox.create_endpoint('probe', url => '%s')}, $recv->url($PATH)));

# The receiver's records of the path, in arrival order.
sub reqs
{
	return [ sort { $a->{seq} <=> $b->{seq} } @{ $recv->requests(path => $PATH) } ];
}

# How many cool-downs fit, back to back, in $w seconds: c_i = min(base * 2^(i-1), max).
# Between the arrivals of two consecutive probes lies at least one whole cool-down
# (it starts when the worker records the previous failure, after that request
# arrived), and the cool-downs of successive probes are the successive c_i.  So the
# probes that arrive within $w seconds after the circuit opened are at most the
# number of these cool-downs that fit; one more is allowed for slack.
sub cooldowns_fitting
{
	my ($w) = @_;
	my ($k, $sum, $c) = (0, 0, $BASE_S);
	while ($sum + $c <= $w + 1e-9)
	{
		$sum += $c;
		$k++;
		$c = $c * 2 > $MAX_S ? $MAX_S : $c * 2;
	}
	return $k;
}

###############################################################################
# 1. The receiver fails everything: the circuit opens after THRESHOLD failures.
###############################################################################
sql($node, "SELECT count(outbox.enqueue('probe', jsonb_build_object('n', g), event_type => 'test.probe'))
      FROM generate_series(1, $MSGS) g");

ok(wait_until(sub { breaker_state($node, 'probe') ne 'closed' }, 30, 'circuit opens'),
	'the circuit opens (endpoint_stats.breaker_state is no longer closed)');
ok(wait_until(sub { log_count($node, qr/circuit for endpoint "probe" opened/) >= 1 }, 30, 'opened logged'),
	'the opening is logged (circuit for endpoint "probe" opened)');

###############################################################################
# 2. #87: after each cool-down, exactly one probe.
###############################################################################
# Synchronise on the receiver: wait until PROBES probes (requests after the first
# THRESHOLD) have arrived.  With the cool-downs 0.2, 0.4, 0.8, 1.6, 1.6 s that takes
# about 4.6 s: the window observed is the circuit's first seconds open.
ok( wait_until(sub { @{ reqs() } >= $THRESHOLD + $PROBES }, 60, "$PROBES probes"),
	"$PROBES probes reach the receiver while it fails");
my $t_end = time();
my $r = reqs();
my $state_in_window = breaker_state($node, 'probe');
like($state_in_window, qr/^(open|half_open)$/, "the circuit is still open after $PROBES failed probes ($state_in_window)");

my @burst  = @$r[ 0 .. $THRESHOLD - 1 ];
my @probes = @$r[ $THRESHOLD .. $#$r ];
note sprintf('requests: %s', join ' ', map { sprintf('%.3f', $_->{time} - $r->[0]{time}) } @$r);

is( scalar(grep { ($_->{headers}{'outbox-attempt'} // '') eq '1' && ($_->{answered} // '') eq '503' } @burst),
	$THRESHOLD, "the first $THRESHOLD requests are first attempts, answered 503");

# From the request whose failure opened the circuit on, no two requests are closer
# than backoff_base/2 (every cool-down is at least backoff_base): a second message
# sent with a probe, or a queued request not given back, would come within
# milliseconds of another one.
my @close;
for my $i ($THRESHOLD - 1 .. $#$r - 1)
{
	my $gap = $r->[ $i + 1 ]{time} - $r->[$i]{time};
	push @close, sprintf('#%d->#%d %.3f s', $i + 1, $i + 2, $gap) if $gap < $BASE_S / 2;
}
is(scalar(@close), 0, sprintf('every request after the circuit opened is a lone probe (no two within %.0f ms)',
	1000 * $BASE_S / 2))
  or diag "requests too close: @close";

# The probes arrived within W seconds after the request whose answer opened the
# circuit: at most as many as there are cool-downs fitting in W, plus one.
my $w = $t_end - $burst[-1]{time};
my $allowed = cooldowns_fitting($w) + 1;
cmp_ok(scalar(@probes), '<=', $allowed,
	sprintf('%d probes in the %.2f s after the circuit opened: at most the %d cool-downs that fit, plus one',
		scalar(@probes), $w, $allowed - 1));

# The cool-down doubles: the gap before each probe is at least its cool-down
# (0.2, 0.4, 0.8, 1.6, 1.6 s), minus 50 ms for rounding (the worker counts in whole
# milliseconds).  A lower bound only: a loaded machine makes the gaps longer.
my @short;
{
	my $c = $BASE_S;
	for my $i ($THRESHOLD .. $#$r)
	{
		my $gap = $r->[$i]{time} - $r->[ $i - 1 ]{time};
		push @short, sprintf('probe %d: %.3f s < %.1f s', $i - $THRESHOLD + 1, $gap, $c) if $gap < $c - 0.05;
		$c = $c * 2 > $MAX_S ? $MAX_S : $c * 2;
	}
}
is(scalar(@short), 0, 'each probe waits out at least its cool-down (backoff_base, doubling with every failed probe)')
  or diag "@short";

my %probe_ids = map { ($_->{headers}{'webhook-id'} // '') => 1 } @probes;
note sprintf('%d probes carried %d distinct messages', scalar(@probes), scalar(keys %probe_ids));

# Attempts spent are counted from the claim on: a queue row records the attempts that
# settled, and the worker's claim (outbox.claims) the attempt a message in flight is
# on.  Together they equal the requests the receiver saw, give or take the one probe
# that may be claimed but not yet arrived.  The queued requests cancelled when the
# circuit opened spent none.
my $attempts = sql($node, q{
	SELECT sum(greatest(m.attempts, (SELECT max(u.attempt) FROM outbox.claims c
	                                  CROSS JOIN LATERAL unnest(c.message_ids, c.attempts) AS u(id, attempt)
	                                  WHERE u.id = m.id)))
	  FROM outbox.messages m WHERE m.endpoint = 'probe'});
my $seen = scalar @{ reqs() };
ok($attempts >= $seen && $attempts <= $seen + 1,
	"attempts spent ($attempts) = requests received ($seen), give or take a probe under way");
is( sql($node, q{SELECT (SELECT count(*) FROM outbox.messages WHERE endpoint = 'probe') || '/'
	           || (SELECT count(*) FROM outbox.history WHERE endpoint = 'probe')}),
	"$MSGS/0", 'every message still waits in the outbox (none in the history)');

###############################################################################
# 3. #90: the receiver recovers; the next probe closes the circuit and the waiting
#    messages flow at once.
###############################################################################
$recv->clear_rules;    # from now on every request is answered 200
my $t_clear = time();
my $bound = $MAX_S + 15;
# The next probe comes within one cool-down (at most backoff_max); then everything
# must be answered at once.  15 s of margin for a loaded machine, and still half the
# 30 s poll interval: a worker that waited for its poll after the close would fail.
ok( wait_until(sub { scalar(keys %{ $recv->answered_2xx($PATH) }) >= $MSGS }, $bound, 'all answered 2xx'),
	sprintf('all %d messages answered 2xx within backoff_max + 15 s (%.1f s) of the recovery', $MSGS, $bound))
  or diag sql($node, q{SELECT s.status, count(*) FROM outbox.messages m, outbox.message(m.id) s
	             WHERE m.endpoint = 'probe' GROUP BY 1});
my $ok2xx = $recv->answered_2xx($PATH);
my @t2xx = sort { $a <=> $b } values %$ok2xx;
if (@t2xx)
{
	note sprintf('first 2xx %.3f s after the recovery, last %.3f s after it (%.3f s after the first)',
		$t2xx[0] - $t_clear, $t2xx[-1] - $t_clear, $t2xx[-1] - $t2xx[0]);
}
ok(wait_sql($node, q{SELECT breaker_state = 'closed' FROM outbox.endpoint_stats WHERE endpoint = 'probe'}, 30),
	'breaker_state is closed again');
ok( wait_sql($node,
		qq{SELECT count(*) = $MSGS AND count(DISTINCT id) = $MSGS FROM outbox.history WHERE endpoint = 'probe'}, 30),
	"all $MSGS messages are marked sent (moved to the history)");
is(sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'probe'}), '0', '... and the queue is empty');
is(sql($node, q{SELECT breaker_failures FROM outbox.endpoint_stats WHERE endpoint = 'probe'}), '0', 'breaker_failures reset');
ok(wait_until(sub { log_count($node, qr/circuit for endpoint "probe" closed/) >= 1 }, 10, 'closed logged'),
	'the closing is logged');
is(log_count($node, qr/circuit for endpoint "probe" closed/), 1, 'exactly one "closed" line');
is(sql($node, 'SELECT count(*) FROM dlq.dead_letters'), '0', 'no dead letters');

###############################################################################
# 4. The next probe comes at the end of the cool-down, not at the failed probe's own
#    retry (Retry-After: 60, honoured with backoff_max at 60 s) nor at the poll (30 s).
#    Nothing else wakes the worker: nothing is committed, no request waits to start.
###############################################################################
ok(reload_conf($node, 'pg_outbox.backoff_max' => '60s'), 'backoff_max 60 s');
my $LATE = '/hooks/late';
$recv->add_rule(path => $LATE, status => 503, retry_after => '60');
sql($node, sprintf(q{SELECT outbox.create_endpoint('late', url => '%s')}, $recv->url($LATE)));
sql($node, q{SELECT count(outbox.enqueue('late', jsonb_build_object('n', g))) FROM generate_series(1, 10) g});
# THRESHOLD failures open the circuit; then probes after 0.2 and 0.4 s of cool-down.
ok(wait_until(sub { @{ $recv->requests(path => $LATE) } >= $THRESHOLD + 2 }, 15, 'two probes'),
	'two probes follow the opening within 15 s, each at the end of its cool-down');
my @late = sort { $a <=> $b } map { $_->{time} } @{ $recv->requests(path => $LATE) };
note sprintf('late: requests at %s s', join ' ', map { sprintf('%.3f', $_ - $late[0]) } @late);

$recv->stop;
$node->stop;
done_testing();
