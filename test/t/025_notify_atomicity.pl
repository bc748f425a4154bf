#!/usr/bin/perl
# NOTIFY atomicity (README "NOTIFY": "pg_notify(channel, envelope) runs in the
# transaction that marks the message sent").  A trigger makes exactly the statement
# that marks a message sent fail (an error like a full disk).  If pg_notify ran in a
# transaction of its own, the listener would receive the notifications although no
# message ever became sent; because it runs in the transaction that fails, nothing
# arrives while the failure lasts.  Once the failure stops, every message is
# notified exactly once and marked sent.
#
# How the worker delivers NOTIFY messages (src/pg/worker.cpp claim_and_deliver,
# deliver_notify; src/pg/outbox_store.cpp claim, settle): one transaction claims the
# rows (UPDATE pending -> in_flight), queues pg_notify for each, and settles them
# (UPDATE in_flight -> sent) before it commits.  So the row does go through in_flight,
# inside that one transaction.  The trigger below is nevertheless written for any
# UPDATE that makes a row 'sent' (from whatever status), so that a worker that marked
# NOTIFY rows sent straight from pending would be caught by it too.
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

sub sql { return $node->safe_psql('postgres', $_[0]) }

sql(q{SELECT outbox.create_endpoint('feed', channel => 'atomic_feed')});

# The injected failure, installed by the superuser: a BEFORE UPDATE row trigger that
# raises disk_full on the statement that marks a message sent, while the flag says so.
sql(q{
	CREATE TABLE public.fault_flag (fail_settle boolean NOT NULL);
	INSERT INTO public.fault_flag VALUES (false);
	CREATE FUNCTION public.fault_inject() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
	  IF (SELECT fail_settle FROM public.fault_flag) THEN
	    RAISE EXCEPTION 'injected settle failure (notify atomicity)' USING ERRCODE = 'disk_full';
	  END IF;
	  RETURN NEW;
	END $$;
	CREATE TRIGGER fault_inject BEFORE UPDATE ON outbox.messages FOR EACH ROW
	  WHEN (NEW.status = 'sent' AND OLD.status IS DISTINCT FROM 'sent')
	  EXECUTE FUNCTION public.fault_inject();});

# A session that LISTENs.  psql prints the notifications that arrived after each
# command it runs; they are collected here, in arrival order.
my $listener = listen_for_notifications($node, 'atomic_feed');
my @notes;    # what has arrived: { channel, payload (raw text), pid, envelope (decoded or undef) }

sub poll_notifications { my $n = $listener->poll; @notes = @{ $listener->notes }; return $n }

sub log_since
{
	my ($offset) = @_;
	my $log = slurp_file($node->logfile);
	return substr($log, $offset);
}

# ---------------------------------------------------------------------------
# 0. Sanity: with the flag off, the trigger is harmless and a message is notified.
my $first = sql(q{SELECT outbox.enqueue('feed', '{"n": 0}', event_type => 'atomic.test')});
ok(wait_until(sub { poll_notifications() >= 1 }, 30, 'the first notification'),
	'flag off: the first message is notified');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.messages WHERE id = $first", 30),
	'flag off: the first message is marked sent');
is(($notes[0]{envelope} // {})->{id}, $first, 'flag off: the notification carries its id');
my $wpid = worker_pid($node);

# ---------------------------------------------------------------------------
# 1. The settle fails: the worker's transaction that would mark the messages sent
#    rolls back again and again, and no notification leaves it.
sql('UPDATE public.fault_flag SET fail_settle = true');
my $log_offset = -s $node->logfile;
my @ids;
push @ids, split /\n/, sql(join '',
	map { "SELECT outbox.enqueue('feed', '{\"n\": $_}', event_type => 'atomic.test');" } 1 .. 3);
push @ids, sql("SELECT outbox.enqueue('feed', '{\"n\": $_}', event_type => 'atomic.test')") for 4 .. $N;
is(scalar(@ids), $N, "$N messages enqueued while the settle fails");

sub settle_errors
{
	my @m = log_since($log_offset) =~ /pg_outbox worker: injected settle failure \(notify atomicity\)/g;
	return scalar @m;
}

# The observation window of the negative assertion: until the worker has logged three
# failed settles (its error backoff is 200, 400, 800 ms, so about a second), polling
# the listener all along.  A pg_notify committed in a transaction of its own before
# the failing one would have reached the listener by the third failure.
ok( wait_until(sub { poll_notifications(); settle_errors() >= 3 }, 60, 'three failed settles'),
	'the worker logged at least 3 failed settles ("pg_outbox worker: injected settle failure")');
my $errors_seen = settle_errors();
note "failed settles logged while the flag was on: $errors_seen";
poll_notifications();
is(scalar(@notes), 1, 'no notification arrives while the transaction that marks the messages sent fails')
  or diag explain [ map { $_->{payload} } @notes[ 1 .. $#notes ] ];
is( sql(sprintf("SELECT count(*) FROM outbox.messages WHERE id IN (%s) AND status = 'sent'", join ',', @ids)),
	'0', 'none of the messages is marked sent while the settle fails');
is( sql(sprintf("SELECT max(attempts) FROM outbox.messages WHERE id IN (%s)", join ',', @ids)),
	'0', 'the failed attempts rolled back with their transaction (attempts still 0)');

# ---------------------------------------------------------------------------
# 2. The failure stops: each message is notified exactly once and marked sent.
sql('UPDATE public.fault_flag SET fail_settle = false');
# The worker is in its error backoff (at most 6.4 s after a long streak).
ok( wait_sql($node,
		sprintf("SELECT count(*) = $N FROM outbox.messages WHERE id IN (%s) AND status = 'sent'", join ',', @ids),
		60),
	"after the failure stops, the $N messages are marked sent");
ok(wait_until(sub { poll_notifications() >= 1 + $N }, 30, "$N more notifications"),
	"$N notifications arrive after the failure stops");
# Duplicates could only come from a transaction that already committed (the rows are
# sent); this short, bounded window lets any straggler reach the listener.
wait_until(sub { poll_notifications() > 1 + $N }, 1);
is(scalar(@notes), 1 + $N, 'no more notifications than messages');
my %count;
$count{ ($_->{envelope} // {})->{id} // 'undef' }++ for @notes[ 1 .. $#notes ];
is_deeply(\%count, { map { $_ => 1 } @ids }, 'each message is notified exactly once, by its id');
is_deeply([ map { $_->{pid} } @notes ], [ ($wpid) x @notes ], 'every notification comes from the worker');
is_deeply([ map { $_->{channel} } @notes ], [ ('atomic_feed') x @notes ], 'all on channel "atomic_feed"');
is( sql(sprintf("SELECT string_agg(attempts::text, ',' ORDER BY id) FROM outbox.messages WHERE id IN (%s)",
			join ',', @ids)),
	join(',', ('1') x $N), 'one attempt each (the failed ones were rolled back)');
is(sql('SELECT count(*) FROM dlq.dead_letters'), '0', 'no dead letters');
is(worker_pid($node), $wpid, 'the worker survived its errors (same pid)');
# The counters count what committed: the rolled-back NOTIFY transactions count nothing.
is(sql(q{SELECT sent FROM outbox.worker_status()}), sql(q{SELECT count(*) FROM outbox.messages WHERE status = 'sent'}),
	'worker_status().sent counts each notified message once (none of the rolled-back tries)');

my @bad = grep { /PANIC|terminated by signal/ } split /\n/, slurp_file($node->logfile);
ok(!@bad, 'no PANIC, no crash in the server log') or diag(join "\n", @bad);

$listener->quit;
sql(q{DROP TRIGGER fault_inject ON outbox.messages; DROP FUNCTION public.fault_inject();
	DROP TABLE public.fault_flag;});
$node->stop;
done_testing();
