#!/usr/bin/perl
# NOTIFY atomicity (docs/delivery.md, "NOTIFY": "pg_notify(channel, envelope) runs in the
# transaction that marks the message sent").  A trigger makes exactly the statement
# that marks a message sent (the one that takes it out of the queue, outbox.messages,
# into the history) fail (an error like a full disk).  If pg_notify ran in a
# transaction of its own, the listener would receive the notifications although no
# message ever became sent; because it runs in the transaction that fails, nothing
# arrives while the failure lasts.  Once the failure stops, every message is
# notified exactly once and marked sent.
#
# How the worker delivers NOTIFY messages (src/pg/worker_parking.cpp notify_round,
# deliver_notify; src/pg/outbox_store.cpp claim, settle): one transaction reads the
# due rows (no claims row for NOTIFY), queues pg_notify for each, and settles them
# (DELETE from the queue, INSERT into outbox.history, one statement) before it
# commits.  The trigger below is written for any DELETE of a queue row, so that it
# catches a settle however it is written (into the history, or with
# sent_retention = 0 a plain delete); no message is dead-lettered in this file, so
# nothing else deletes a queue row while the flag is on.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $N = 5;    # messages enqueued while the settle fails

my $node = new_outbox_node('notify_atomic', 'pg_outbox.breaker_threshold' => '1000');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');

sql($node, q{SELECT outbox.create_endpoint('feed', channel => 'atomic_feed')});

# The injected failure, installed by the superuser: a BEFORE DELETE row trigger that
# raises disk_full on the statement that takes a message out of the queue (marks it
# sent), while the flag says so.
sql($node, q{
	CREATE TABLE public.fault_flag (fail_settle boolean NOT NULL);
	INSERT INTO public.fault_flag VALUES (false);
	CREATE FUNCTION public.fault_inject() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
	  IF (SELECT fail_settle FROM public.fault_flag) THEN
	    RAISE EXCEPTION 'injected settle failure (notify atomicity)' USING ERRCODE = 'disk_full';
	  END IF;
	  RETURN OLD;
	END $$;
	CREATE TRIGGER fault_inject BEFORE DELETE ON outbox.messages FOR EACH ROW
	  EXECUTE FUNCTION public.fault_inject();});

# A session that LISTENs.  psql prints the notifications that arrived after each
# command it runs; they are collected here, in arrival order.
my $listener = listen_for_notifications($node, 'atomic_feed');
my @notes;    # what has arrived: { channel, payload (raw text), pid, envelope (decoded or undef) }

# ---------------------------------------------------------------------------
# 0. Sanity: with the flag off, the trigger is harmless and a message is notified.
my $first = sql($node, q{SELECT outbox.enqueue('feed', '{"n": 0}', event_type => 'atomic.test')});
ok(wait_until(sub { poll_notifications($listener, \@notes) >= 1 }, 30, 'the first notification'),
	'flag off: the first message is notified');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($first)", 30),
	'flag off: the first message is marked sent');
is(($notes[0]{envelope} // {})->{id}, $first, 'flag off: the notification carries its id');
my $wpid = worker_pid($node);

# ---------------------------------------------------------------------------
# 1. The settle fails: the worker's transaction that would mark the messages sent
#    rolls back again and again, and no notification leaves it.
sql($node, 'UPDATE public.fault_flag SET fail_settle = true');
my $log_offset = -s $node->logfile;
my @ids;
push @ids, split /\n/, sql($node, join '',
	map { "SELECT outbox.enqueue('feed', '{\"n\": $_}', event_type => 'atomic.test');" } 1 .. 3);
push @ids, sql($node, "SELECT outbox.enqueue('feed', '{\"n\": $_}', event_type => 'atomic.test')") for 4 .. $N;
is(scalar(@ids), $N, "$N messages enqueued while the settle fails");

sub settle_errors
{
	my @m = log_since($node, $log_offset) =~ /endpoint "feed" is (?:still )?held up: injected settle failure \(notify atomicity\)/g;
	return scalar @m;
}

# The observation window of the negative assertion: until the worker has logged three
# failed settles (the endpoint is parked and tried again after 1 s, then 2 s), polling
# the listener all along.  A pg_notify committed in a transaction of its own before
# the failing one would have reached the listener by the third failure.
ok( wait_until(sub { poll_notifications($listener, \@notes); settle_errors() >= 3 }, 60, 'three failed settles'),
	'the worker logged at least 3 failed settles (endpoint "feed" is held up: injected settle failure)');
my $errors_seen = settle_errors();
note "failed settles logged while the flag was on: $errors_seen";
poll_notifications($listener, \@notes);
is(scalar(@notes), 1, 'no notification arrives while the transaction that marks the messages sent fails')
  or diag explain [ map { $_->{payload} } @notes[ 1 .. $#notes ] ];
is(states($node, @ids), join(',', ('pending/0') x $N),
	'none of the messages is marked sent while the settle fails (outbox.message(): pending)');
is( sql($node, sprintf("SELECT count(*) || '/' || max(attempts) FROM outbox.messages WHERE id IN (%s)", join ',', @ids)),
	"$N/0", 'the failed attempts rolled back with their transaction (all still queued, attempts still 0)');
is(sql($node, 'SELECT count(*) FROM outbox.history WHERE id IN (' . join(',', @ids) . ')'), '0',
	'... and none of them reached the history');

# ---------------------------------------------------------------------------
# 2. The failure stops: each message is notified exactly once and marked sent.
sql($node, 'UPDATE public.fault_flag SET fail_settle = false');
# The worker is in its error backoff (at most 6.4 s after a long streak).
ok( wait_until(sub { states($node, @ids) eq join(',', ('sent/1') x $N) }, 60, "$N messages sent"),
	"after the failure stops, the $N messages are marked sent");
is(sql($node, sprintf('SELECT count(*) FROM outbox.messages WHERE id IN (%s)', join ',', @ids)), '0',
	'... and have left the queue');
ok(wait_until(sub { poll_notifications($listener, \@notes) >= 1 + $N }, 30, "$N more notifications"),
	"$N notifications arrive after the failure stops");
# Duplicates could only come from a transaction that already committed (the rows are
# sent); this short, bounded window lets any straggler reach the listener.
ok(!wait_until(sub { poll_notifications($listener, \@notes) > 1 + $N }, 1), 'no straggler arrives within the window');
is(scalar(@notes), 1 + $N, 'no more notifications than messages');
my %count;
$count{ ($_->{envelope} // {})->{id} // 'undef' }++ for @notes[ 1 .. $#notes ];
is_deeply(\%count, { map { $_ => 1 } @ids }, 'each message is notified exactly once, by its id');
is_deeply([ map { $_->{pid} } @notes ], [ ($wpid) x @notes ], 'every notification comes from the worker');
is_deeply([ map { $_->{channel} } @notes ], [ ('atomic_feed') x @notes ], 'all on channel "atomic_feed"');
is( sql($node, sprintf("SELECT string_agg(attempts::text, ',' ORDER BY id) FROM outbox.history WHERE id IN (%s)",
			join ',', @ids)),
	join(',', ('1') x $N), 'one attempt each (the failed ones were rolled back)');
is(sql($node, 'SELECT count(*) FROM dlq.dead_letters'), '0', 'no dead letters');
is(worker_pid($node), $wpid, 'the worker survived its errors (same pid)');
# The counters count what committed: the rolled-back NOTIFY transactions count nothing.
is(sql($node, q{SELECT sent FROM outbox.worker_status()}), sql($node, q{SELECT count(*) FROM outbox.history}),
	'worker_status().sent counts each notified message once (none of the rolled-back tries)');

my @bad = grep { /PANIC|terminated by signal/ } split /\n/, slurp_file($node->logfile);
ok(!@bad, 'no PANIC, no crash in the server log') or diag(join "\n", @bad);

$listener->quit;
sql($node, q{DROP TRIGGER fault_inject ON outbox.messages; DROP FUNCTION public.fault_inject();
	DROP TABLE public.fault_flag;});
$node->stop;
done_testing();
