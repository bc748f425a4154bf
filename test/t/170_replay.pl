#!/usr/bin/perl
# Replay (docs/delivery.md, Replay), judged from what the receiver got:
#  - a window of an endpoint's delivered messages is sent again: exactly the messages
#    delivered in it, each with its original webhook-id (an idempotency key, or
#    msg_<instance>_<id>) and body, and nothing delivered outside it;
#  - on an ordered endpoint the replayed key's messages arrive in their original order;
#  - a window that starts before the history is refused, saying where it starts; with
#    pg_outbox.sent_retention = 0 there is nothing to replay (55000);
#  - a restart while replayed messages are being delivered loses none of them;
#  - a replay rolled back queues nothing; one committed by COMMIT PREPARED (which wakes
#    no one) is queued all the same;
#  - on an ordered endpoint a replay takes its place in its keys' commit order at its
#    commit: a message committed to the key after it goes out after the replayed ones,
#    even when the worker moves nothing in between (pg_outbox.enabled off);
#  - 100,000 retained messages are replayed by one statement (the rate is printed), and
#    the worker moves them into the queue in batches: a crash in the middle of that loses
#    none and queues none twice, and they keep their original order; on an ordered
#    endpoint the statement queues them itself, one head per key, each key in its
#    original order;
#  - two replays of overlapping windows at once both succeed, each message queued once.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

my $node = new_outbox_node(
	'replay',
	'pg_outbox.sent_retention' => '1h',
	'pg_outbox.backoff_base'   => '20ms',
	'pg_outbox.backoff_max'    => '100ms',
	'max_prepared_transactions' => '2');
sql($node, 'CREATE EXTENSION pg_outbox');
wait_for_worker($node);
my $recv = start_receiver();
endpoint($node, $recv, 'plain',   '/hooks/plain');
endpoint($node, $recv, 'ordered', '/hooks/ordered', ordered => 'true');
ok(wait_sql($node, 'SELECT count(*) > 0 FROM outbox._history_partitions()'), 'the worker made history partitions');

sub delivered
{
	return wait_sql($node,
		'SELECT NOT EXISTS (SELECT FROM outbox.messages) AND NOT EXISTS (SELECT FROM outbox.replay_queue)');
}

# {n => [webhook-ids in arrival order]} and the n's in arrival order, at a path.
sub arrivals
{
	my ($path) = @_;
	my (%ids, @order);
	for my $r (@{ $recv->requests(path => $path) })
	{
		my ($n) = $r->{body} =~ /"n":\s*(\d+)/;
		push @{ $ids{$n} }, $r->{headers}{'webhook-id'};
		push @order, $n;
	}
	return (\%ids, \@order);
}

# 1. Deliveries before, in and after the window.
sql($node, q{SELECT outbox.enqueue('plain', '{"n": 0}')});
ok(delivered(), 'one message before the window delivered');
my $t0 = sql($node, 'SELECT clock_timestamp()');
sql($node, q{
	SELECT outbox.enqueue('plain', jsonb_build_object('n', n),
	                      idempotency_key => CASE WHEN n % 2 = 0 THEN 'key-' || n END)
	  FROM generate_series(1, 10) n});
sql($node, q{
	SELECT outbox.enqueue('ordered', jsonb_build_object('n', n), ordering_key => 'k')
	  FROM generate_series(1, 10) n});
ok(delivered(), 'the window\'s messages delivered');
my $t1 = sql($node, 'SELECT clock_timestamp()');
sql($node, q{SELECT outbox.enqueue('plain', jsonb_build_object('n', n)) FROM generate_series(11, 15) n});
ok(delivered(), 'messages after the window delivered');
my ($first_ids) = arrivals('/hooks/plain');
my ($first_ordered, $first_order) = arrivals('/hooks/ordered');
is(join(',', @$first_order), join(',', 1 .. 10), 'ordered: first delivery in order');

# 2. Replay of the window: exactly its 10 messages, with their webhook-ids.
is(sql($node, "SELECT outbox.replay('plain', '$t0', '$t1')"), 10, 'replay queued the window\'s 10 messages');
ok($recv->wait_requests('/hooks/plain', 26), 'the receiver got them');
ok(delivered(), 'replayed messages delivered');
my ($ids) = arrivals('/hooks/plain');
is(scalar(grep { @{ $ids->{$_} } == 2 } 1 .. 10), 10, 'each message of the window arrived a second time');
is(scalar(grep { @{ $ids->{$_} } == 1 } 0, 11 .. 15), 6, 'nothing outside the window came again');
is(scalar(grep { $ids->{$_}[0] eq $ids->{$_}[1] } 1 .. 10), 10, 'each with its original webhook-id');
is(scalar(grep { $ids->{$_}[0] eq "key-$_" } 2, 4, 6, 8, 10), 5, '(the idempotency key where it had one)');

# 3. An ordered endpoint: the replayed key in its original order.
is(sql($node, "SELECT outbox.replay('ordered', '$t0')"), 10, 'replay of the ordered endpoint');
ok($recv->wait_requests('/hooks/ordered', 20), 'the receiver got them');
my ($ordered_ids, $ordered_order) = arrivals('/hooks/ordered');
is(join(',', @$ordered_order[10 .. 19]), join(',', 1 .. 10), 'replayed in the original order');
is(scalar(grep { $ordered_ids->{$_}[0] eq $ordered_ids->{$_}[1] } 1 .. 10), 10, 'with the original webhook-ids');

# 4. Refused windows.
my ($rc, $out, $err) = $node->psql('postgres', q{SELECT outbox.replay('plain', now() - interval '2 hours')});
like($err, qr/the window starts before the history: it goes back to \d{4}-/, 'a window before the history is refused');
my $start = sql($node, 'SELECT outbox._history_start() > now() - interval \'1 hour 1 second\'');
is($start, 't', 'the history starts no earlier than the retention');
sql($node, q{ALTER SYSTEM SET pg_outbox.sent_retention = 0});
sql($node, q{SELECT pg_reload_conf()});
ok(wait_sql($node, q{SELECT current_setting('pg_outbox.sent_retention') = '0'}), 'retention 0');
($rc, $out, $err) = $node->psql('postgres', qq{SELECT outbox.replay('plain', '$t0')},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/55000: no history to replay: pg_outbox.sent_retention is 0/, 'no history kept: refused (55000)');
sql($node, q{ALTER SYSTEM RESET pg_outbox.sent_retention});
sql($node, q{SELECT pg_reload_conf()});
ok(wait_sql($node, q{SELECT current_setting('pg_outbox.sent_retention') = '1h'}), 'retention back');

# 5. A restart while the replayed messages go out: none lost.
$recv->add_rule(path => '/hooks/plain', status => 200, delay_ms => 200, times => 5);
is(sql($node, "SELECT outbox.replay('plain', '$t0', '$t1')"), 10, 'replayed again');
$recv->wait_requests('/hooks/plain', 28);
$node->restart;
ok(delivered(), 'all delivered after the restart');
($ids) = arrivals('/hooks/plain');
is(scalar(grep { @{ $ids->{$_} } >= 3 && $ids->{$_}[2] eq $ids->{$_}[0] } 1 .. 10), 10,
	'every replayed message arrived, with its webhook-id');

# 6. A replay rolled back queues nothing; one committed by COMMIT PREPARED is queued.
my $before = scalar @{ $recv->requests(path => '/hooks/plain') };
sql($node, "BEGIN; SELECT outbox.replay('plain', '$t0', '$t1'); ROLLBACK");
sleep 1.5;
is(sql($node, 'SELECT count(*) FROM outbox.replay_queue'), 0, 'a replay rolled back left nothing to move');
is(scalar @{ $recv->requests(path => '/hooks/plain') }, $before, 'and nothing was sent');
sql($node, "BEGIN; SELECT outbox.replay('plain', '$t0', '$t1'); PREPARE TRANSACTION 'replay'");
sql($node, "COMMIT PREPARED 'replay'");
ok($recv->wait_requests('/hooks/plain', $before + 10), 'a replay committed by COMMIT PREPARED was sent');
ok(delivered(), 'and nothing is left of it');

# 7. Commit order across a replay: the message committed to the key after the replay
#    goes out after the replayed ones. The worker delivers and moves nothing while
#    pg_outbox.enabled is off: with the keyed messages left for it to move after the
#    commit, the new one, the key's head meanwhile, went first.
endpoint($node, $recv, 'seq', '/hooks/seq', ordered => 'true');
my $t_seq = sql($node, 'SELECT clock_timestamp()');
sql($node, q{SELECT outbox.enqueue('seq', jsonb_build_object('n', n), ordering_key => 'k') FROM generate_series(1, 5) n});
ok($recv->wait_requests('/hooks/seq', 5) && delivered(), 'five keyed messages delivered');
ok(reload_conf($node, 'pg_outbox.enabled' => 'off'), 'delivery off');
is(sql($node, "SELECT outbox.replay('seq', '$t_seq')"), 5, 'the five replayed');
sql($node, q{SELECT outbox.enqueue('seq', '{"n": 6}', ordering_key => 'k')});
ok(reload_conf($node, 'pg_outbox.enabled' => undef), 'a sixth committed to the key, then delivery on');
ok($recv->wait_requests('/hooks/seq', 11) && delivered(), 'the receiver got them');
my (undef, $seq_order) = arrivals('/hooks/seq');
is(join(',', @$seq_order[5 .. $#$seq_order]), '1,2,3,4,5,6', 'the replayed ones first, in order, then the sixth');

# 8. 100,000 retained messages in one statement; a crash while the worker moves them
# into the queue.
sql($node, q{SELECT outbox.create_endpoint('bulk', url => 'http://127.0.0.1:1/never')});
sql($node, q{SELECT outbox.pause_endpoint('bulk')});
# The rows are sent within the history partition current now, and both replays (this
# one and section 9's) start at its beginning: a partition that begins meanwhile (they
# are 15 minutes wide here) must not move the replays' start past the rows.
my $from = sql($node, q{SELECT max(from_at) FROM outbox._history_partitions() WHERE from_at <= now()});
sql($node, qq{
	INSERT INTO outbox.history (id, endpoint, event_type, payload, ordering_key, attempts, last_http_status,
	                            created_at, sent_at)
	SELECT 10000000 + n, 'bulk', 'order.created', jsonb_build_object('n', n, 'pad', repeat('x', 100)),
	       'k' || (n % 100), 1, 200, now(), greatest(now() - interval '1 second' * (n % 60), '$from'::timestamptz)
	  FROM generate_series(1, 100000) n});
my $session = $node->background_psql('postgres');
$session->query_safe('BEGIN');
my $t = time;
is($session->query_safe(
		qq{SELECT outbox.replay('bulk', '$from'::timestamptz)}),
	100000, '100,000 replayed in one statement');
my $t_statement = time;
$session->query_safe('COMMIT');
my $t_commit = time;
$session->quit;
ok(wait_sql($node, q{SELECT count(*) BETWEEN 1 AND 99000 FROM outbox.replay_queue}, 60),
	'the worker is moving them into the queue');
$node->stop('immediate');
$node->start;
ok(wait_sql($node, q{SELECT NOT EXISTS (SELECT FROM outbox.replay_queue)}, 180), 'all moved after the crash');
my $t_moved = time;
diag(sprintf('replay of 100,000 messages: the statement %.2f s (%.0f messages/s), its commit %.2f s, '
	  . 'moved into the queue by the worker (across a crash) %.1f s later',
	$t_statement - $t, 100000 / ($t_statement - $t), $t_commit - $t_statement, $t_moved - $t_commit));
is(sql($node, q{SELECT count(*) || ' ' || count(DISTINCT idempotency_key) FROM outbox.messages WHERE endpoint = 'bulk'}),
	'100000 100000', 'each queued once');
# The order in which they were queued (for a key of an ordered endpoint: its head, then
# by ordering_seq; else by id) against their delivery order: the rows out of place.
sub out_of_order
{
	my ($per_key) = @_;
	my ($part, $queued) = $per_key ? ('PARTITION BY m.ordering_key', 'm.ordering_seq NULLS FIRST') : ('', 'm.id');
	return sql($node, qq{
		SELECT count(*) FROM (
		  SELECT row_number() OVER ($part ORDER BY $queued) AS queued,
		         row_number() OVER ($part ORDER BY h.sent_at, h.id) AS delivered
		    FROM outbox._instance() i
		    JOIN outbox.history h ON true
		    JOIN outbox.messages m ON m.idempotency_key = 'msg_' || i.id || '_' || h.id
		   WHERE m.endpoint = 'bulk' AND h.endpoint = 'bulk') o
		 WHERE queued <> delivered});
}
is(out_of_order(0), 0, 'in their original order');

# 9. The same on an ordered endpoint: the statement queues them, in their keys' order.
sql($node, q{DELETE FROM outbox.messages WHERE endpoint = 'bulk'});
sql($node, q{SELECT outbox.alter_endpoint('bulk', ordered => true)});
$session = $node->background_psql('postgres');
$session->query_safe('BEGIN');
$t = time;
is($session->query_safe(
		qq{SELECT outbox.replay('bulk', '$from'::timestamptz)}),
	100000, 'ordered: 100,000 replayed in one statement');
$t_statement = time;
is($session->query_safe(q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'bulk'}), 100000,
	'ordered: queued by the statement itself, before its commit');
$session->query_safe('COMMIT');
$t_commit = time;
$session->quit;
diag(sprintf('replay of 100,000 messages of an ordered endpoint: the statement %.2f s (%.0f messages/s), '
	  . 'its commit (the keys\' order) %.2f s',
	$t_statement - $t, 100000 / ($t_statement - $t), $t_commit - $t_statement));
is(sql($node, q{SELECT count(*) FROM outbox.replay_queue}), 0, 'ordered: none left for the worker to move');
is(sql($node, q{SELECT count(*) || ' ' || count(DISTINCT idempotency_key) FROM outbox.messages WHERE endpoint = 'bulk'}),
	'100000 100000', 'ordered: each queued once');
is(sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'bulk' AND ordering_seq IS NULL}), 100,
	'ordered: one head per key, the others behind it');
is(out_of_order(1), 0, 'ordered: each key in its original order');

# 10. Two replays of overlapping windows at once, on a pull endpoint (its replays queue
# the messages themselves, under the queue's unique index on webhook-ids). W was
# delivered, then X, then W again (replayed): the window from the start holds W before
# X, the one from after W's first delivery X before W. Run together, the two inserted
# the same webhook-ids in opposite orders: one waited for the other at X, the other at
# W, and one failed (40P01). They now queue one after the other: both succeed, and
# every webhook-id is queued once.
sql($node, q{SELECT outbox.create_endpoint('raced', pull => true)});
sub enqueue_and_ack
{
	my ($group) = @_;
	sql($node,
		qq{SELECT count(outbox.enqueue('raced', jsonb_build_object('g', '$group', 'n', g))) FROM generate_series(1, 2000) g});
	1 while sql($node, q{SELECT outbox.ack('raced', ARRAY(SELECT id FROM outbox.read('raced', 1000)))}) > 0;
}
my $raced_from = sql($node, 'SELECT clock_timestamp()');
enqueue_and_ack('W');
my $after_w = sql($node, 'SELECT clock_timestamp()');
enqueue_and_ack('X');
is(sql($node, qq{SELECT outbox.replay('raced', '$raced_from', '$after_w')}), 2000, 'raced: W replayed once');
1 while sql($node, q{SELECT outbox.ack('raced', ARRAY(SELECT id FROM outbox.read('raced', 1000)))}) > 0;
is(sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'raced'}), 0, 'raced: W delivered again');
for my $round (1 .. 5)
{
	my $gate = $node->background_psql('postgres');
	$gate->query_safe('SELECT pg_advisory_lock(4242)');
	my @replays;
	for my $since ($raced_from, $after_w)
	{
		my $session = $node->background_psql('postgres');
		$session->query_until(qr/waiting/,
			"\\echo waiting\nSELECT pg_advisory_lock_shared(4242), outbox.replay('raced', '$since');\n");
		push @replays, $session;
	}
	ok( wait_sql(
			$node, q{SELECT count(*) = 2 FROM pg_locks WHERE locktype = 'advisory' AND objid = 4242 AND NOT granted}),
		"raced, round $round: both replays wait at the gate");
	$gate->query_safe('SELECT pg_advisory_unlock(4242)');
	my @errors;
	for my $session (@replays)
	{
		# A failed statement ends the session's psql (ON_ERROR_STOP): its error is in stderr.
		eval { $session->query('SELECT 1'); $session->quit; };
		push @errors, $session->{stderr} if $session->{stderr} ne '';
	}
	$gate->quit;
	is(join('', @errors), '', "raced, round $round: both replays succeed");
	is(sql($node, q{SELECT count(*) || ' ' || count(DISTINCT idempotency_key) FROM outbox.messages WHERE endpoint = 'raced'}),
		'4000 4000', "raced, round $round: W and X queued, each once");
	sql($node, q{DELETE FROM outbox.messages WHERE endpoint = 'raced'});
}

done_testing();
