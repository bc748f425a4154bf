#!/usr/bin/perl
# Results written together (docs/delivery.md, "Settle"; src/core/settle_timing.hpp).
# While results come in fast, the worker writes plain deliveries' results at most 5 ms
# late, many in one transaction. Meanwhile their messages are still in the queue, due,
# and claims go on:
#
#  1. a drain whose answers each carry 50 results (a batching endpoint: every write is
#     "fast"), beside a plain endpoint: every message reaches the receiver exactly once
#     (no claim took a message whose result was waiting), and each is in the history
#     once;
#  2. the server crashing (immediate stop) in the middle of such a drain loses nothing:
#     every message reaches the receiver (at least once) and ends in the history once;
#  3. a clean stop (pg_ctl stop -m fast: SIGTERM) in the middle of such a drain sends
#     nothing twice: the worker writes the results waiting, takes back the requests not
#     started and waits for those started to be answered before it exits.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $node = new_outbox_node('settle_batching', 'pg_outbox.breaker_threshold' => '1000');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $recv = start_receiver();
my $json = JSON::PP->new->utf8;
my $W    = webhook_prefix($node);    # webhook-id = $W<id> (docs/delivery.md, Webhook id)

endpoint($node, $recv, 'batched', '/batched', batch_size => 50, concurrency => 16);
endpoint($node, $recv, 'plain',   '/plain');

# Element id => how many requests carried it (a batch's elements, a plain request's
# webhook-id), for the requests the receiver answered 2xx.
sub received
{
	my %n;
	for my $r (@{ $recv->requests() })
	{
		next unless ($r->{answered} // 0) =~ /^2/;
		if ($r->{path} eq '/batched') { $n{ $_->{id} }++ for @{ $json->decode($r->{body}) } }
		else                           { $n{ $r->{headers}{'webhook-id'} }++ }
	}
	return \%n;
}

sub enqueue_both
{
	my ($n, $tag) = @_;
	sql($node, qq{SELECT outbox.pause_endpoint('batched'), outbox.pause_endpoint('plain')});
	sql($node, qq{INSERT INTO outbox.messages (endpoint, payload)
	               SELECT CASE WHEN g % 5 = 0 THEN 'plain' ELSE 'batched' END, jsonb_build_object('tag', '$tag', 'n', g)
	                 FROM generate_series(1, $n) g});
	sql($node, qq{SELECT outbox.resume_endpoint('batched'), outbox.resume_endpoint('plain')});
}

# ---------------------------------------------------------------------------
# 1. Exactly once, although results wait while claims go on.

enqueue_both(10000, 'once');
ok(wait_sql($node, q{SELECT count(*) = 0 FROM outbox.messages}, 120), 'the drain of 10,000 ended');
my $got = received();
is(sql($node, q{SELECT count(DISTINCT id) FROM outbox.history}), '10000', 'every message is in the history');
my @twice = grep { $got->{$_} > 1 } keys %$got;
is(scalar(keys %$got), 10000, 'the receiver got 10,000 distinct messages');
is(scalar(@twice), 0, '... none of them twice') or diag("e.g. @twice[0 .. ($#twice < 4 ? $#twice : 4)]");
is(sql($node, q{SELECT count(*) FROM outbox.history WHERE attempts <> 1}), '0', 'each on its first attempt');

# Drains 10,000 messages tagged $tag and stops the server ($mode) once the drain is under
# way; after the restart, waits for the end of the drain and checks that nothing was
# lost. Returns what the receiver got and the webhook-ids of the tag's messages.
sub drain_across_a_stop
{
	my ($tag, $mode) = @_;
	$recv->reset;
	enqueue_both(10000, $tag);
	ok(wait_until(sub { scalar(@{ $recv->requests(path => '/batched') }) >= 40 }, 60), "$tag: the drain is under way");
	$node->stop($mode);
	$node->start;
	ok(wait_sql($node, q{SELECT count(*) = 0 FROM outbox.messages}, 120), "$tag: after the $mode stop, the drain ended");
	is(sql($node, qq{SELECT count(*) FROM outbox.history WHERE payload->>'tag' = '$tag'}), '10000',
		"$tag: every message of it is in the history, once");
	my @ids = map { "$W$_" } split /\n/, sql($node, qq{SELECT id FROM outbox.history WHERE payload->>'tag' = '$tag'});
	my $got = received();
	is(scalar(grep { !$got->{$_} } @ids), 0, "$tag: the receiver got every one of them");
	return ($got, @ids);
}

# ---------------------------------------------------------------------------
# 2. A crash while results wait: some are received twice (those in flight at the crash).

my ($got_crash, @crash) = drain_across_a_stop('crash', 'immediate');
note sprintf('%d of 10,000 were received twice', scalar(grep { $got_crash->{$_} > 1 } @crash));

# ---------------------------------------------------------------------------
# 3. A clean stop while results wait and requests are in flight: none twice.

my ($got_stop, @stopped) = drain_across_a_stop('stop', 'fast');
my @again = grep { $got_stop->{$_} > 1 } @stopped;
is(scalar(@again), 0, 'stop: none of them twice') or diag(scalar(@again) . ' received twice');
is(sql($node, q{SELECT count(*) FROM outbox.history WHERE payload->>'tag' = 'stop' AND attempts <> 1}), '0',
	'stop: each on its first attempt (a request taken back unstarted does not count one)');

$recv->stop;
my @bad = grep { /PANIC|terminated by signal/ } split /\n/, slurp_file($node->logfile);
ok(!@bad, 'no PANIC, no crash in the server log') or diag(join "\n", @bad);
$node->stop;
done_testing();
