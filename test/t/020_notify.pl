#!/usr/bin/perl
# NOTIFY delivery (docs/delivery.md, "NOTIFY"): an endpoint with a channel is delivered with
# pg_notify(channel, envelope) in the transaction that marks the message sent (it
# leaves the queue, outbox.messages, for the history, outbox.history),
# envelope {"id":…, "event_type":…, "payload":…}.  A LISTENing session receives
# each committed message exactly once and a rolled-back one never; an envelope
# of 8000 bytes or more (PostgreSQL's limit) is dead-lettered PAYLOAD_TOO_LARGE,
# one byte less is delivered.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $node = new_outbox_node('notify', 'pg_outbox.breaker_threshold' => '1000');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $json = JSON::PP->new->utf8->canonical;

sql($node, q{SELECT outbox.create_endpoint('orders_feed', channel => 'orders')});
sql($node, q{SELECT outbox.create_endpoint('other_feed', channel => 'other')});

# A session that LISTENs.  psql prints the notifications that arrived after each
# command it runs; they are collected here, in arrival order.
my $listener = listen_for_notifications($node, 'orders');
my @notes;    # what has arrived: { channel, payload (raw text), pid, envelope (decoded or undef) }

sub wait_notifications { my $ok = $listener->wait(@_); poll_notifications($listener, \@notes); return $ok }

# ---------------------------------------------------------------------------
# 1. Committed messages arrive once each, with the envelope; a rolled-back one never.

my @ids;
push @ids, sql($node, q{SELECT outbox.enqueue('orders_feed', '{"order_id": 1, "total": 9.99}', event_type => 'order.created')});
my $rolled = sql($node, q{
	BEGIN;
	SELECT outbox.enqueue('orders_feed', '{"order_id": 666, "fate": "rolled back"}', event_type => 'order.created');
	ROLLBACK;});
# Several in one transaction, and one without an event type.
push @ids, split /\n/, sql($node, q{
	BEGIN;
	SELECT outbox.enqueue('orders_feed', '{"order_id": 2, "tags": ["a", "b"]}', event_type => 'order."paid"\\');
	SELECT outbox.enqueue('orders_feed', '{"order_id": 3, "note": "caf\u00e9 \"q\""}');
	COMMIT;});
# A message for another channel this session does not listen to.
my $other = sql($node, q{SELECT outbox.enqueue('other_feed', '{"elsewhere": true}', event_type => 'x')});
is(scalar(@ids), 3, 'three committed messages enqueued');

ok(wait_notifications(3), 'three notifications received');
ok( wait_until(
		sub {
			states($node, @ids, $other) eq join(',', ('sent/1') x 4);
		}),
	'the messages are marked sent (outbox.message(): sent, one attempt each)');
is(sql($node, sprintf('SELECT count(*) FROM outbox.messages WHERE id IN (%s)', join(',', @ids, $other))), '0',
	'... and have left the queue');
# An observation window, not a synchronisation: anything more that could still come
# (a duplicate, the rolled-back one) has had several poll intervals.
sleep(1.5);
poll_notifications($listener, \@notes);
is(scalar(@notes), 3, 'exactly three notifications (no duplicate, nothing rolled back)');
is_deeply([ map { $_->{channel} } @notes ], [ ('orders') x 3 ], 'all on channel "orders"');
ok(!(grep { !defined $_->{envelope} } @notes), 'every payload is valid JSON');

my %by_id = map { (($_->{envelope} // {})->{id} // -1) => $_ } @notes;
is_deeply([ sort { $a <=> $b } keys %by_id ], [ sort { $a <=> $b } @ids ],
	'one notification per committed message id');
ok(!exists $by_id{$rolled}, 'no notification for the rolled-back message');
unlike(join("\n", map { $_->{payload} } @notes), qr/rolled back/,
	'the rolled-back payload never appears');

# Each envelope is exactly id, event_type and the payload as stored.
for my $id (@ids)
{
	my $n = $by_id{$id} or next;
	my ($et, $payload) = split /\|/,
	  sql($node, "SELECT coalesce(event_type, '<null>'), payload::text FROM outbox.history WHERE id = $id"), 2;
	is_deeply(
		[ sort keys %{ $n->{envelope} } ],
		[ 'event_type', 'id', 'payload' ],
		"message $id: envelope has exactly id, event_type, payload");
	is($n->{envelope}{id}, $id, "message $id: envelope id");
	is($n->{envelope}{event_type} // '<null>', $et, "message $id: envelope event_type ($et)");
	is_deeply($n->{envelope}{payload}, $json->decode($payload), "message $id: envelope payload");
	# The text itself is what listeners have always received: a jsonb of the three keys
	# as PostgreSQL prints it (the worker builds it without jsonb).
	is($n->{payload},
		sql($node, "SELECT jsonb_build_object('id', id, 'event_type', event_type, 'payload', payload)::text "
			  . "FROM outbox.history WHERE id = $id"),
		"message $id: the envelope's text as PostgreSQL prints the jsonb");
}
is($by_id{ $ids[2] }{envelope}{payload}{note}, "caf\x{e9} \"q\"",
	'non-ASCII and quotes survive the envelope');
is(sql($node, "SELECT count(*) FROM outbox.message($rolled)"), '0',
	'no outbox row for the rolled-back message (not in the queue, the history or the DLQ)');
is( sql($node, sprintf("SELECT string_agg(attempts::text, ',' ORDER BY id) FROM outbox.history WHERE id IN (%s)",
			join(',', @ids))),
	'1,1,1', 'one attempt each (in the history)');

# The notification comes from the worker's transaction.
my $wpid = worker_pid($node);
is_deeply([ map { $_->{pid} } @notes ], [ ($wpid) x 3 ], 'sent by the pg_outbox worker');

# ---------------------------------------------------------------------------
# 2. The 8000-byte limit: envelope of 7999 bytes delivered, 8000 dead-lettered.
#    The endpoint is paused while the payloads are sized to the exact envelope
#    length (which depends on the id), then resumed.

sql($node, q{SELECT outbox.pause_endpoint('orders_feed')});
my ($fit, $big) = split /\n/, sql($node, q{
	SELECT outbox.enqueue('orders_feed', '{"pad": ""}', event_type => 'size.test');
	SELECT outbox.enqueue('orders_feed', '{"pad": ""}', event_type => 'size.test');});
my %target = ($fit => 7999, $big => 8000);
for my $id ($fit, $big)
{
	sql($node, qq{
		UPDATE outbox.messages m
		   SET payload = jsonb_build_object('pad', repeat('x', $target{$id} - length(
		                     jsonb_build_object('id', m.id, 'event_type', m.event_type,
		                                        'payload', m.payload)::text)))
		 WHERE id = $id});
	is( sql($node, qq{SELECT octet_length(jsonb_build_object('id', id, 'event_type', event_type,
	                                                   'payload', payload)::text)
	             FROM outbox.messages WHERE id = $id}),
		$target{$id}, "message $id: envelope is $target{$id} bytes");
}
sleep(0.5);    # an observation window: a paused endpoint's message would show here
poll_notifications($listener, \@notes);
is(scalar(@notes), 3, 'nothing delivered while the endpoint is paused');
is(states($node, $fit, $big), 'pending/0,pending/0', 'both pending while paused');
sql($node, q{SELECT outbox.resume_endpoint('orders_feed')});

ok(wait_until(sub { sql($node, "SELECT count(*) = 1 FROM dlq.dead_letters WHERE message_id = $big") eq 't' }),
	'8000-byte envelope: dead-lettered');
# dlq.dead_letters.attempts is the number of attempts made (0.3.0): the envelope was
# never handed to pg_notify, so none was (0.2.0 counted one at claim).
is( sql($node, "SELECT concat_ws('|', reason_code, attempts, endpoint, event_type) FROM dlq.dead_letters WHERE message_id = $big"),
	'PAYLOAD_TOO_LARGE|0|orders_feed|size.test',
	'8000-byte envelope: PAYLOAD_TOO_LARGE without an attempt (never notified)');
like(sql($node, "SELECT error_message FROM dlq.dead_letters WHERE message_id = $big"), qr/8000|NOTIFY/i,
	'8000-byte envelope: error_message explains');
is(sql($node, "SELECT count(*) FROM outbox.messages WHERE id = $big"), '0',
	'8000-byte envelope: gone from outbox.messages');
is(sql($node, "SELECT status FROM outbox.message($big)"), 'dead', '8000-byte envelope: outbox.message() says dead');

ok(wait_notifications(4), '7999-byte envelope: notification received');
ok(wait_until(sub { states($node, $fit) eq 'sent/1' }),
	'7999-byte envelope: marked sent (after one attempt)');
sleep(0.5);    # an observation window: a duplicate would show here
poll_notifications($listener, \@notes);
is(scalar(@notes), 4, 'exactly one more notification');
is(length($notes[3]{payload}), 7999, 'the received envelope is 7999 bytes');
is(($notes[3]{envelope} // {})->{id}, $fit, '... and is the message that fits');

# The worker is still there and still delivers after the dead letter.
my $last = sql($node, q{SELECT outbox.enqueue('orders_feed', '{"order_id": 4}', event_type => 'order.created')});
ok(wait_notifications(5), 'delivery goes on after the too-large envelope');
is(($notes[4]{envelope} // {})->{id}, $last, '... with the next message');
is(worker_pid($node), $wpid, 'same worker throughout');

my $counters = sql($node, 'SELECT sent, dead_lettered FROM outbox.worker_status()');
is($counters, '6|1', 'worker_status(): 6 sent (5 on orders, 1 on other), 1 dead-lettered');

# ---------------------------------------------------------------------------
# An ordered NOTIFY endpoint: each key's messages are notified in the key's commit order,
# once each. Once a key's head is notified, the worker claims the key's next message
# itself (src/pg/ordering/successors.cpp), in the same kind of transaction.
sql($node, q{SELECT outbox.create_endpoint('ordered_feed', channel => 'ordered_ch', ordered => true)});
sql($node, q{SELECT outbox.pause_endpoint('ordered_feed')});
my $ordered_listener = listen_for_notifications($node, 'ordered_ch');
my %key_of;       # id -> key
my %committed;    # key -> its ids, in commit order
for my $n (0 .. 29)    # three keys, ten messages each, interleaved, one transaction each
{
	my $key = 'k' . ($n % 3);
	my $id = sql($node, "SELECT outbox.enqueue('ordered_feed', jsonb_build_object('n', $n), ordering_key => '$key')");
	$key_of{$id} = $key;
	push @{ $committed{$key} }, $id;
}
sql($node, q{SELECT outbox.resume_endpoint('ordered_feed')});
ok($ordered_listener->wait(30, 30), 'thirty notifications of the ordered endpoint');
sleep(1);    # an observation window for a duplicate
my @ordered_notes;
poll_notifications($ordered_listener, \@ordered_notes);
my %notified;    # key -> its ids, in notification order
push @{ $notified{ $key_of{ ($_->{envelope} // {})->{id} // -1 } // 'unknown' } }, $_->{envelope}{id} for @ordered_notes;
is(scalar(@ordered_notes), 30, 'exactly thirty: none twice');
is_deeply(\%notified, \%committed, "each key's messages notified in its commit order");
$ordered_listener->quit;

# ---------------------------------------------------------------------------
# While HTTP deliveries keep the worker claiming, a NOTIFY round that found nothing is
# not run again at every claim (src/pg/worker/claim.cpp, notify_round_due), yet a NOTIFY
# message never waits for it: one committed meanwhile is notified at once (the commit's
# wake), one with a deliver_at 2 s ahead at its time, not at the poll interval (30 s
# here).
ok(reload_conf($node, 'pg_outbox.poll_interval' => '30s'), 'poll_interval reloaded to 30 s');
my $recv = start_receiver();
sql($node, sprintf(q{SELECT outbox.create_endpoint('busy', url => '%s')}, $recv->url('/busy')));
sql($node, q{SELECT outbox.pause_endpoint('busy')});
$recv->add_rule(path => '/busy', status => 200, delay_ms => 50);    # a drain of several seconds
sql($node, q{INSERT INTO outbox.messages (endpoint, payload) SELECT 'busy', jsonb_build_object('n', g)
               FROM generate_series(1, 8000) g});
sql($node, q{SELECT outbox.resume_endpoint('busy')});
ok($recv->wait_requests('/busy', 100), 'the HTTP drain is under way');
poll_notifications($listener, \@notes);
my $t_now = time();
my $now_id = sql($node, q{SELECT outbox.enqueue('orders_feed', '{"during": "now"}')});
my $later_id = sql($node, q{SELECT outbox.enqueue('orders_feed', '{"during": "later"}', deliver_at => now() + interval '2 s')});
my $t_later = time();
my %arrived;    # id -> when first seen (the listener's notes are all it has received)
my $deadline = time() + 15;
while (!(defined $arrived{$now_id} && defined $arrived{$later_id}) && time() < $deadline)
{
	$listener->wait(1, 1);
	my @new;
	poll_notifications($listener, \@new);
	$arrived{ ($_->{envelope} // {})->{id} // -1 } //= time() for @new;
}
ok(defined $arrived{$now_id}, 'a NOTIFY message committed during the HTTP drain is notified');
cmp_ok(($arrived{$now_id} // 99) - $t_now, '<', 5, '... within seconds (its commit woke the worker)');
ok(defined $arrived{$later_id}, 'one due 2 s later is notified')
  or diag(sql($node, "SELECT concat_ws(' ', m.status, m.sent_at, clock_timestamp(), q.next_attempt_at, q.ordering_seq) FROM outbox.message($later_id) m LEFT JOIN outbox.messages q ON q.id = m.id"));
cmp_ok(($arrived{$later_id} // 0) - $t_later, '>=', 1.5, '... not before its deliver_at');
cmp_ok(($arrived{$later_id} // 99) - $t_later, '<', 10, '... and at its time, not at the 30 s poll');
note sprintf('during the drain: now after %.2f s, later after %.2f s; %d of 8000 HTTP requests by then',
	($arrived{$now_id} // 99) - $t_now, ($arrived{$later_id} // 99) - $t_later,
	scalar @{ $recv->requests(path => '/busy') });

# Still during the drain: a NOTIFY round that found nothing does not go quiet while the
# worker holds a key's next message (src/pg/worker/notify.cpp, after_notify_round). Here
# the worker takes m2 as key h's next message when m1 is notified, but an operator holds
# m2's row, so the rounds after find nothing. The operator's COMMIT wakes nobody; m2 must
# still be notified at once, not at the poll (30 s).
sql($node, q{SELECT outbox.create_endpoint('held_feed', channel => 'held_ch', ordered => true)});
sql($node, q{SELECT outbox.pause_endpoint('held_feed')});
my $held_listener = listen_for_notifications($node, 'held_ch');
my $m1 = sql($node, q{SELECT outbox.enqueue('held_feed', '{"n": 1}', ordering_key => 'h')});
my $m2 = sql($node, q{SELECT outbox.enqueue('held_feed', '{"n": 2}', ordering_key => 'h')});
my $operator = $node->background_psql('postgres');
$operator->query_safe("BEGIN; SELECT id FROM outbox.messages WHERE id = $m2 FOR UPDATE");
sql($node, q{SELECT outbox.resume_endpoint('held_feed')});
ok($held_listener->wait(1, 10), 'the key\'s head is notified while its next message is held by an operator');
sleep(1);    # rounds that find nothing (m2 is held)
my $t_release = time();
$operator->query_safe('COMMIT');
$operator->quit;
my $released_ok = $held_listener->wait(2, 10);
my $t_m2 = time();
my @held_notes;
poll_notifications($held_listener, \@held_notes);
ok($released_ok, 'its next message is notified after the operator commits');
cmp_ok($t_m2 - $t_release, '<', 5, '... within seconds, not at the 30 s poll');
is(join(',', map { ($_->{envelope} // {})->{id} // '?' } @held_notes), "$m1,$m2", '... in order, once each');
cmp_ok(sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'busy'}), '>', 0,
	'... while the HTTP drain was still going (its claims are what the NOTIFY rounds ride on)');
$held_listener->quit;
ok(wait_sql($node, q{SELECT count(*) = 0 FROM outbox.messages WHERE endpoint = 'busy'}, 60), 'the HTTP drain ends');
$recv->stop;

$listener->quit;

my @bad = grep { /PANIC|terminated by signal/ } split /\n/, slurp_file($node->logfile);
ok(!@bad, 'no PANIC, no crash in the server log') or diag(join "\n", @bad);

$node->stop;
done_testing();
