# Bounded waits (docs/delivery.md, "Bounded waits"): one endpoint's trouble delays only that
# endpoint.
#
#  1. An operator's open transaction on an endpoint (BEGIN; alter_endpoint(...) left
#     open): its messages and another endpoint's are all delivered while it stays open
#     (the worker saves that endpoint's breaker later, SKIP LOCKED).
#  2. An operator's open transaction that locks an endpoint's messages while they are in
#     flight: their results cannot be written; that endpoint is parked, and a steady
#     stream to another endpoint keeps its latency. Once the lock goes, the parked
#     results are written, each message sent exactly once.
#  3. A NOTIFY endpoint whose channel PostgreSQL refuses: the other NOTIFY endpoint and
#     an HTTP endpoint go on; its own messages wait, and go once the channel is fixed.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

my $node = new_outbox_node(
	'bounded_waits',
	'pg_outbox.backoff_base'      => '100ms',
	'pg_outbox.backoff_max'       => '200ms',
	'pg_outbox.breaker_threshold' => '100000');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $recv = start_receiver();
$recv->add_rule(path => '/hooks/held', status => 200, delay_ms => 1500);

for (qw(x y held))
{
	sql($node, sprintf(q{SELECT outbox.create_endpoint('%s', url => '%s')}, $_, $recv->url("/hooks/$_")));
}
sql($node, q{SELECT outbox.create_endpoint('n_bad', channel => 'n_bad_chan')});
sql($node, q{SELECT outbox.create_endpoint('n_good', channel => 'n_good_chan')});

sub sent
{
	my ($endpoint) = @_;
	return sql($node, "SELECT count(*) FROM outbox.history WHERE endpoint = '$endpoint'");
}

sub enqueue
{
	my ($endpoint, $n) = @_;
	sql($node, join '', map { "SELECT outbox.enqueue('$endpoint', '{\"i\": $_}');" } 1 .. $n);
}

# --- 1. An open alter_endpoint holds the endpoint's row -----------------------------
my $operator = $node->background_psql('postgres');
$operator->query_safe('BEGIN');
$operator->query_safe(q{SELECT outbox.alter_endpoint('x', timeout_ms => 20000)});
enqueue('x', 20);
enqueue('y', 20);
ok(wait_until(sub { sent('x') == 20 && sent('y') == 20 }, 15, '40 sent'),
	'1. with alter_endpoint(x) open, all 20 messages of x and 20 of y are delivered');
$operator->query_safe('ROLLBACK');

# --- 2. An open transaction locks an endpoint's messages in flight --------------------
my $log_offset = -s $node->logfile;
enqueue('held', 3);    # within the first window of 4: all in flight at once
ok($recv->wait_requests('/hooks/held', 3, 30), '2. the 3 requests of "held" reached the receiver');
my $in_flight = $recv->in_flight_at('/hooks/held', Time::HiRes::time());
is($in_flight, 3, '2. all three are in flight (none answered yet) before the lock is taken');
$operator->query_safe('BEGIN');
is($operator->query_safe(q{SELECT count(*) FROM (SELECT FROM outbox.messages WHERE endpoint = 'held' FOR UPDATE) l}),
	3, '2. an operator locks the 3 messages of "held" while their requests run');
sql($node, q{CREATE PROCEDURE public.feed(n int) LANGUAGE plpgsql AS $$
	BEGIN
		FOR i IN 1 .. n LOOP
			PERFORM pg_sleep(0.1);
			COMMIT;    -- the enqueue's transaction starts now: created_at is the enqueue's time
			PERFORM outbox.enqueue('y', jsonb_build_object('feed', i));
			COMMIT;
		END LOOP;
	END $$});
my $y_before = sent('y');
sql($node, 'CALL public.feed(40)');    # 4 s of steady traffic to y while "held" is locked
ok(wait_until(sub { sent('y') == $y_before + 40 }, 10, 'the feed sent'), '2. the 40 messages fed to y are delivered');
my ($median, $max) = split /\|/, sql($node, q{
	SELECT round(extract(epoch FROM percentile_disc(0.5) WITHIN GROUP (ORDER BY sent_at - created_at)) * 1000),
	       round(extract(epoch FROM max(sent_at - created_at)) * 1000)
	  FROM outbox.history WHERE endpoint = 'y' AND payload ? 'feed'});
note "y while held is locked: median $median ms, max $max ms";
cmp_ok($median, '<', 100, "2. y's median latency stays low while held is locked ($median ms)");
cmp_ok($max, '<', 2000, "2. y's slowest message waited less than 2 s ($max ms)");
is(sent('held'), 0, '2. none of held\'s messages is marked sent while they are locked');
like(PostgreSQL::Test::Utils::slurp_file($node->logfile, $log_offset),
	qr/endpoint "held" is held up: canceling statement due to lock timeout/, '2. the log says held is held up, and why');
$operator->query_safe('COMMIT');
ok(wait_until(sub { sent('held') == 3 }, 30, 'held sent'), '2. once the lock goes, held\'s 3 results are written');
is(scalar @{ $recv->requests(path => '/hooks/held') }, 3, '2. each of them was sent once (the results were kept)');

# --- 3. A NOTIFY channel that PostgreSQL refuses -------------------------------------
my $listener = listen_for_notifications($node, 'n_good_chan', 'n_fixed_chan');
# A superuser's direct edit (create_endpoint would refuse it): longer than NAMEDATALEN.
sql($node, sprintf(q{UPDATE outbox.endpoints SET channel = '%s' WHERE name = 'n_bad'}, 'c' x 70));
sql($node, q{SELECT outbox._request_wake()});
$log_offset = -s $node->logfile;
my $y_sent = sent('y');
enqueue('n_bad',  5);
enqueue('n_good', 5);
enqueue('y',      5);
ok($listener->wait(5, 15), '3. the 5 notifications of n_good arrive');
ok(wait_until(sub { sent('y') == $y_sent + 5 }, 15, 'y sent'), '3. the 5 messages of y are delivered');
is(sent('n_bad'), 0, '3. n_bad\'s messages wait');
ok( wait_until(
		sub { PostgreSQL::Test::Utils::slurp_file($node->logfile, $log_offset) =~ /endpoint "n_bad" is held up: channel name too long/ },
		15, 'n_bad parked'),
	'3. the log says n_bad is held up, and why');
sql($node, q{UPDATE outbox.endpoints SET channel = 'n_fixed_chan' WHERE name = 'n_bad'});
sql($node, q{SELECT outbox._request_wake()});
ok($listener->wait(10, 30), '3. once its channel is fixed, n_bad\'s 5 notifications arrive');
is(sent('n_bad'), 5, '3. and its messages are sent');
$listener->quit;
$operator->quit;

$recv->stop;
$node->stop;
done_testing();
