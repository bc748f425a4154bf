#!/usr/bin/perl
# Crash recovery: the at-least-once guarantee under the worst the server can suffer.
#
#  (a) 2,000 committed messages (plus rolled-back ones) drain to a slow receiver and
#      the worker is killed with SIGKILL mid-drain: the postmaster reinitializes,
#      the worker comes back, every committed message arrives, nothing else does.
#  (b) the same with an immediate server shutdown mid-drain and a restart.
#  (c) SIGKILL while a request hangs: the claimed message is delivered after the
#      restart, once with a 200.
#  (d) a message during whose every attempt the worker dies ends in the DLQ once its
#      max_attempts are spent, never sent again.
#
# Each scenario has its own endpoint and receiver path.  Duplicates are allowed
# (at-least-once) and only reported; a lost message, a rolled-back one that
# arrives, or a message not ending as 'sent' (out of the queue, outbox.messages, and
# into the history, outbox.history) fails the test.
#
# Evidence comes from outside the extension: a message counts as delivered only
# when the receiver finished writing a 2xx to a still-connected worker (its
# "answered" record; a request cut off by the crash is not delivered), and the
# crash is proven to land mid-drain: the receiver answers each request after
# 200 ms, the crash comes only while it holds requests, and afterwards its log
# must show requests that had arrived before the crash and were never answered
# to the crashed worker, and committed messages whose 2xx had not been given yet.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $COMMITTED_TX = 20;     # committed transactions of ...
my $PER_TX       = 100;    # ... this many messages each = 2,000
my $ROLLED_TX    = 3;      # rolled-back transactions interleaved with them
my $DRAIN_S      = $PostgreSQL::Test::Utils::timeout_default;    # bound on the wait for a full drain

my $node = new_outbox_node(
	'crash',
	'pg_outbox.breaker_threshold' => 100000,
	'restart_after_crash'         => 'on');
my $recv = start_receiver();

$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $W = webhook_prefix($node);    # webhook-id = $W<id> (docs/delivery.md, Webhook id)
for my $s (qw(a b c))
{
	my $url = $recv->url("/hooks/$s");
	$node->safe_psql('postgres',
		"SELECT outbox.create_endpoint('crash_$s', url => '$url')");
}

# ---------------------------------------------------------------------------
# helpers

# Waits (bounded) until the server accepts connections and a worker other than
# $old_pid runs.

# Enqueues $COMMITTED_TX committed transactions of $PER_TX messages to endpoint
# crash_$s, with $ROLLED_TX rolled-back transactions of $PER_TX interleaved.
# Returns (\%committed_ids, \%rolled_back_ids).
sub enqueue_all
{
	my ($s) = @_;
	my (%committed, %rolled);
	my $every = int($COMMITTED_TX / ($ROLLED_TX + 1)) || 1;
	my $rolled_done = 0;
	for my $tx (1 .. $COMMITTED_TX)
	{
		my $ids = $node->safe_psql('postgres', qq{
			BEGIN;
			SELECT string_agg(outbox.enqueue('crash_$s',
			           jsonb_build_object('scenario', '$s', 'tx', $tx, 'n', g, 'fate', 'committed'),
			           event_type => 'crash.test')::text, ',')
			  FROM generate_series(1, $PER_TX) g;
			COMMIT;});
		$committed{$_} = 1 for split /,/, $ids;
		if ($tx % $every == 0 && $rolled_done < $ROLLED_TX)
		{
			$rolled_done++;
			$ids = $node->safe_psql('postgres', qq{
				BEGIN;
				SELECT string_agg(outbox.enqueue('crash_$s',
				           jsonb_build_object('scenario', '$s', 'tx', -$tx, 'n', g, 'fate', 'rolled_back'),
				           event_type => 'crash.test')::text, ',')
				  FROM generate_series(1, $PER_TX) g;
				ROLLBACK;});
			$rolled{$_} = 1 for split /,/, $ids;
		}
	}
	return (\%committed, \%rolled);
}

sub received_on
{
	my ($path) = @_;
	return $recv->stats->{by_path}{$path} // 0;
}

# The endpoint's queue is empty and its history holds $n messages, each once.
sub all_sent
{
	my ($s, $n) = @_;
	my $row = $node->safe_psql('postgres', qq{
		SELECT NOT EXISTS (SELECT FROM outbox.messages WHERE endpoint = 'crash_$s')
		   AND (SELECT count(*) = $n AND count(DISTINCT id) = $n
		          FROM outbox.history WHERE endpoint = 'crash_$s')});
	return $row eq 't';
}

# "status|count" lines of outbox.message() over the given ids (ids without a row are
# not counted).
sub statuses
{
	my ($ids) = @_;
	return $node->safe_psql('postgres', sprintf(q{
		SELECT s.status, count(*) FROM unnest('{%s}'::bigint[]) AS i(id) CROSS JOIN LATERAL outbox.message(i.id) s
		 GROUP BY s.status ORDER BY s.status}, join(',', @$ids)));
}

# The assertions shared by (a) and (b).
sub check_delivery
{
	my ($s, $committed, $rolled, $label) = @_;
	my $n = scalar keys %$committed;

	my $t0 = time;
	ok(wait_until(sub { all_sent($s, $n) }, $DRAIN_S, "$label: all rows sent"),
		"$label: every committed message is marked sent");
	note(sprintf '%s: drained %.1f s after recovery', $label, time - $t0);

	is(statuses([ keys %$committed ]), "sent|$n", "$label: outbox.message() of the committed messages: all $n sent");
	is($node->safe_psql('postgres', "SELECT count(*) FROM outbox.messages WHERE endpoint = 'crash_$s'"),
		'0', "$label: no queue row left for the endpoint");
	is(statuses([ keys %$rolled ]), '', "$label: outbox.message() knows none of the rolled-back messages");
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM dlq.dead_letters WHERE endpoint = 'crash_$s'"),
		'0', "$label: nothing dead-lettered");

	# The history's ids are exactly the committed ones (the rolled-back never existed).
	my %in_table = map { $_ => 1 } split /\n/,
	  $node->safe_psql('postgres',
		"SELECT id FROM outbox.history WHERE endpoint = 'crash_$s' ORDER BY id");
	is_deeply(\%in_table, $committed, "$label: history rows == committed enqueues");

	# The receiver logs an answer just after writing it, so its record of the last
	# answers can trail the rows marked sent: wait for it (bounded) before judging.
	ok(wait_until(sub { my $ok = $recv->answered_2xx("/hooks/$s"); !grep { !$ok->{"$W$_"} } keys %$committed },
			undef, "$label: the receiver's record of every answer"),
		"$label: the receiver recorded a 2xx answer for every committed message");
	my $reqs = $recv->requests(path => "/hooks/$s");
	my (%seen, %requested, @foreign, $rolled_arrived, $rolled_bodies);
	$rolled_arrived = $rolled_bodies = 0;
	for my $r (@$reqs)
	{
		my $wid = $r->{headers}{'webhook-id'} // '';
		$requested{$wid} = 1;
		$seen{$wid}++ if ($r->{answered} // '') =~ /^2\d\d$/;
		if ($wid =~ /^\Q$W\E(\d+)$/ && $rolled->{$1}) { $rolled_arrived++ }
		$rolled_bodies++ if ($r->{body} // '') =~ /rolled_back/;
	}
	my %expected = map { ("$W$_" => 1) } keys %$committed;
	my @lost  = sort grep { !$seen{$_} } keys %expected;
	my @extra = sort grep { !$expected{$_} } keys %requested;
	my $distinct = scalar keys %seen;
	my $dups = 0;
	$dups += $_ - 1 for values %seen;
	my @dup_ids = sort grep { $seen{$_} > 1 } keys %seen;

	# No message may be marked sent before the receiver had given it a 2xx (sent_at is
	# the settle transaction's start, after the answer was read; 1 ms of slack for
	# the two clocks' rounding).
	my $first_ok = $recv->answered_2xx("/hooks/$s");
	my @early;
	for (split /\n/, $node->safe_psql('postgres', qq{
		SELECT id, extract(epoch FROM sent_at) FROM outbox.history
		 WHERE endpoint = 'crash_$s'}))
	{
		my ($id, $sent_at) = split /\|/;
		my $ok_at = $first_ok->{"$W$id"};
		push @early, $id if !defined $ok_at || $sent_at + 0.001 < $ok_at;
	}
	is(scalar @early, 0, "$label: no row was marked sent before the worker had its 2xx")
	  or diag("sent before (or without) a 2xx: @early[0 .. ($#early < 19 ? $#early : 19)]");

	is(scalar @lost, 0, "$label: every committed message's 2xx reached the worker")
	  or diag("lost: @lost[0 .. ($#lost < 19 ? $#lost : 19)]");
	is(scalar @extra, 0, "$label: no webhook-id other than the committed messages'")
	  or diag("unexpected: @extra[0 .. ($#extra < 19 ? $#extra : 19)]");
	is($rolled_arrived, 0, "$label: no rolled-back message id arrived");
	is($rolled_bodies,  0, "$label: no rolled-back payload arrived");
	is($distinct, $n, "$label: distinct webhook-ids answered 2xx == committed");
	note("$label: duplicates (at-least-once): $dups"
		  . (@dup_ids ? " e.g. @dup_ids[0 .. ($#dup_ids < 9 ? $#dup_ids : 9)]" : ''));
	note(sprintf '%s SUMMARY: committed=%d received_distinct=%d requests=%d duplicates=%d lost=%d rolled_back_arrived=%d',
		$label, $n, $distinct, scalar(@$reqs), $dups, scalar(@lost), $rolled_arrived);
	return;
}

# Enqueues to a paused endpoint, resumes it, waits until some messages have their
# 2xx and the receiver holds requests not yet answered (the drain is under way, with
# deliveries in flight), then runs $crash->() at once.  Afterwards the receiver's
# log proves it: requests in flight at the crash, and committed messages without
# their 2xx yet.
sub drain_with_crash
{
	my ($s, $crash, $label) = @_;
	my $path = "/hooks/$s";
	$recv->add_rule(path => $path, delay_ms => 200);
	$node->safe_psql('postgres', "SELECT outbox.pause_endpoint('crash_$s')");
	my ($committed, $rolled) = enqueue_all($s);
	my $n = scalar keys %$committed;
	is($n, $COMMITTED_TX * $PER_TX, "$label: $n messages committed");
	is(scalar keys %$rolled, $ROLLED_TX * $PER_TX,
		"$label: " . ($ROLLED_TX * $PER_TX) . " messages rolled back");

	my $t0 = time;
	$node->safe_psql('postgres', "SELECT outbox.resume_endpoint('crash_$s')");
	ok(wait_until(sub { keys %{ $recv->answered_2xx($path) } >= 150 && $recv->in_flight_at($path, time) > 0 }, undef, "$label: drain under way"),
		"$label: the drain is under way, with requests in flight");
	my $t_crash = time;
	$crash->();
	my $in_flight = $recv->in_flight_at($path, $t_crash);
	my $answered  = grep { $_ <= $t_crash } values %{ $recv->answered_2xx($path) };
	note(sprintf '%s: crashed %.2f s into the drain: %d of %d messages had their 2xx, %d requests in flight',
		$label, $t_crash - $t0, $answered, $n, $in_flight);
	cmp_ok($in_flight, '>', 0, "$label: the crash came with deliveries in flight at the receiver");
	cmp_ok($answered, '<', $n, "$label: the crash came in the middle of the drain");
	return ($committed, $rolled);
}

# ---------------------------------------------------------------------------
# (a) SIGKILL of the worker mid-drain

{
	my $label = '(a) kill -9 worker';
	my $old_pid = worker_pid($node);
	ok(defined $old_pid, "$label: the worker runs (pid " . ($old_pid // '?') . ')');
	my $log_offset = -s $node->logfile;
	my ($committed, $rolled) = drain_with_crash(
		'a',
		sub {
			is(kill('KILL', $old_pid), 1, "$label: SIGKILL sent to worker $old_pid");
		},
		$label);
	my $new_pid = wait_for_worker($node, $old_pid);
	ok(defined $new_pid, "$label: a new worker runs (pid " . ($new_pid // '?') . ')');
	ok($node->log_contains(
			qr/all server processes terminated; reinitializing/, $log_offset),
		"$label: the postmaster went through crash recovery");
	check_delivery('a', $committed, $rolled, $label);
	my $log = slurp_file($node->logfile, $log_offset);
	my ($recovered) = $log =~ /(\d+) claimed messages of a previous worker are pending again/;
	ok(defined $recovered, "$label: the new worker put the dead worker's claims back");
	note("$label: claims put back at worker start: " . ($recovered // 0));
}

# ---------------------------------------------------------------------------
# (b) immediate shutdown mid-drain, then start

{
	my $label = '(b) immediate stop';
	my ($committed, $rolled) = drain_with_crash(
		'b',
		sub {
			$node->stop('immediate');
			$node->start;
		},
		$label);
	ok(defined wait_for_worker($node, undef), "$label: the worker runs again");
	check_delivery('b', $committed, $rolled, $label);
}

# ---------------------------------------------------------------------------
# (c) SIGKILL while a request hangs

{
	my $label = '(c) kill -9 during a hung request';
	$recv->add_rule(path => '/hooks/c', action => 'hang', times => 1, hang_ms => 60000);
	my $id = $node->safe_psql('postgres',
		q{SELECT outbox.enqueue('crash_c', '{"hang": true}', event_type => 'crash.hang')});
	ok(wait_until(sub { received_on('/hooks/c') >= 1 }, undef, "$label: first request"),
		"$label: the first request arrived and hangs");
	is($node->safe_psql('postgres', "SELECT status || '/' || attempts FROM outbox.message($id)"),
		'in_flight/0', "$label: the message is in flight (its queue row: no attempt recorded yet)");
	is($node->safe_psql('postgres', "SELECT attempts[array_position(message_ids, ${id}::bigint)] FROM outbox.claims
		WHERE $id = ANY (message_ids)"), '1', "$label: its claim records attempt 1");
	# The worker commits asynchronously: the claim must be on disk before the crash for
	# the next worker to find it.  Wait (bounded) until the WAL is flushed past it.
	my $lsn = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
	ok(wait_sql($node, "SELECT pg_current_wal_flush_lsn() >= '$lsn'"), "$label: the claim is flushed to disk");
	my $old_pid = worker_pid($node);
	my $log_offset = -s $node->logfile;
	is(kill('KILL', $old_pid), 1, "$label: SIGKILL sent to worker $old_pid");
	ok(defined wait_for_worker($node, $old_pid), "$label: a new worker runs");
	ok(wait_until(sub { all_sent('c', 1) }, undef, "$label: message sent"),
		"$label: the message is delivered after the restart");

	ok(wait_until(sub { $recv->answered_2xx('/hooks/c')->{"$W$id"} }, undef, "$label: the receiver's record"),
		"$label: the receiver recorded its 2xx answer");
	my $reqs = $recv->requests(path => '/hooks/c');
	my @ok = grep { ($_->{answered} // '') eq '200' } @$reqs;
	is(scalar @ok, 1, "$label: delivered with a 200 exactly once");
	is($reqs->[0]{response}, 'hang', "$label: the first request was the hung one");
	ok(!defined $reqs->[0]{answered}, "$label: ... and never answered");
	my %ids = map { ($_->{headers}{'webhook-id'} // '') => 1 } @$reqs;
	is_deeply([ keys %ids ], ["$W$id"], "$label: every attempt carried webhook-id $W$id");
	my ($recovered) = slurp_file($node->logfile, $log_offset)
	  =~ /(\d+) claimed messages of a previous worker are pending again/;
	note("$label: claims put back at worker start: " . ($recovered // 0));
	ok(defined $recovered, "$label: the new worker put the dead worker's claim back");
	my ($status, $attempts, $sent_at) = split /\|/, $node->safe_psql('postgres',
		"SELECT status, attempts, sent_at IS NOT NULL FROM outbox.message($id)");
	is($status, 'sent', "$label: outbox.message() says sent");
	is($sent_at, 't', "$label: sent_at is set");
	my $headers = join(',', map { $_->{headers}{'outbox-attempt'} // '?' } @$reqs);
	note("$label: attempts counted $attempts; requests received " . scalar(@$reqs)
		  . "; outbox-attempt headers: $headers");
	# The new worker recorded the attempt of the claim left behind: the hung request
	# counts, and the delivery after the restart is attempt 2.
	is($headers, '1,2', "$label: the request after the restart is attempt 2");
	is($attempts, '2', "$label: two attempts recorded (the crashed one counts)");
	note(sprintf '%s SUMMARY: committed=1 received_distinct=%d requests=%d delivered_200=%d lost=%d',
		$label, scalar(keys %ids), scalar(@$reqs), scalar(@ok), @ok ? 0 : 1);
}

# ---------------------------------------------------------------------------
# (d) A message that keeps the worker from finishing (every request hangs, the worker
#     is killed during each): its attempts run out across the restarts, and it ends in
#     the DLQ as RETRY_EXHAUSTED instead of being sent for ever.

{
	my $label = '(d) killed during every attempt';
	create_endpoint($node, 'crash_d', $recv->url('/hooks/d'), max_attempts => 2);
	$recv->add_rule(path => '/hooks/d', action => 'hang', hang_ms => 60000);
	my $id = $node->safe_psql('postgres', q{SELECT outbox.enqueue('crash_d', '{"hang": "always"}')});
	for my $attempt (1, 2)
	{
		ok(wait_until(sub { received_on('/hooks/d') >= $attempt }, undef, "$label: request $attempt"),
			"$label: request $attempt arrived and hangs");
		my $lsn = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
		ok(wait_sql($node, "SELECT pg_current_wal_flush_lsn() >= '$lsn'"), "$label: claim $attempt is on disk");
		my $old_pid = worker_pid($node);
		is(kill('KILL', $old_pid), 1, "$label: SIGKILL during attempt $attempt");
		ok(defined wait_for_worker($node, $old_pid), "$label: a new worker runs");
	}
	ok(wait_sql($node, "SELECT status = 'dead' FROM outbox.message($id)"), "$label: the message is dead-lettered");
	is($node->safe_psql('postgres', "SELECT reason_code || '/' || attempts FROM dlq.dead_letters WHERE message_id = $id"),
		'RETRY_EXHAUSTED/2', "$label: RETRY_EXHAUSTED after its 2 attempts");
	is(received_on('/hooks/d'), 2, "$label: no third request was sent");
}

$node->stop;
$recv->stop;
done_testing();
