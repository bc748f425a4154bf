#!/usr/bin/perl
# What changes for requests that wait in the worker (docs/delivery.md, "Endpoint concurrency",
# "Rate limit", "Endpoint changes"): a rate limit of 2 per second keeps most of each batch
# queued in the worker, and then
#
#  1. alter_endpoint(url => ...) : every request not yet started goes to the new URL;
#     each message arrives exactly once, at one of the two;
#  2. pause_endpoint: nothing more starts; resume_endpoint: the rest arrive;
#  3. alter_endpoint(secret => ...): requests started after the change are signed with
#     the new secret only;
#  4. webhook-timestamp and webhook-signature are made when a request is sent, not when
#     it was queued: a request that waited 4 s carries a timestamp within a second of
#     its arrival, and its signature verifies;
#  5. breaker liveness: a half-open probe that cannot be sent (a plain-INSERT row with a
#     header that is not a string) is dead-lettered and the next probe goes: the
#     breaker closes and every valid message arrives.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $node = new_outbox_node('changes');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $W = webhook_prefix($node);    # webhook-id = $W<id> (docs/delivery.md, Webhook id)
my $recv = start_receiver();

sub enqueue_many
{
	my ($endpoint, $n) = @_;
	return split /,/, sql($node, qq{SELECT string_agg(outbox.enqueue('$endpoint', jsonb_build_object('n', g))::text, ',')
		FROM generate_series(1, $n) g});
}

sub reqs { return @{ $recv->requests(path => $_[0]) } }

my $S1 = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
my $S2 = 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0';

# ---------------------------------------------------------------------------
# 1. A new URL reaches the queued requests.

sql($node, sprintf(q{SELECT outbox.create_endpoint('mover', url => '%s', rate_limit => 2)}, $recv->url('/hooks/old')));
my @moved = enqueue_many('mover', 10);
ok($recv->wait_requests('/hooks/old', 2, 10), 'two requests went to the old URL');
my $t_alter = time;
sql($node, sprintf(q{SELECT outbox.alter_endpoint('mover', url => '%s')}, $recv->url('/hooks/new')));
ok(wait_sql($node, "SELECT count(*) = 0 FROM outbox.messages WHERE endpoint = 'mover'", 30), 'all delivered');
my @late_old = grep { $_->{time} > $t_alter + 0.5 } reqs('/hooks/old');
is(scalar @late_old, 0, 'nothing went to the old URL after the change (requests already queued included)');
my %seen;
$seen{ $_->{headers}{'webhook-id'} }++ for reqs('/hooks/old'), reqs('/hooks/new');
is(scalar(grep { ($seen{"$W$_"} // 0) == 1 } @moved), 10, 'each message arrived exactly once, old URL or new');
cmp_ok(scalar(reqs('/hooks/new')), '>=', 6, '... most at the new URL');

# ---------------------------------------------------------------------------
# 2. A pause reaches the queued requests.

sql($node, sprintf(q{SELECT outbox.create_endpoint('pausing', url => '%s', rate_limit => 2)}, $recv->url('/hooks/pausing')));
my @paused = enqueue_many('pausing', 10);
ok($recv->wait_requests('/hooks/pausing', 2, 10), 'two requests before the pause');
sql($node, q{SELECT outbox.pause_endpoint('pausing')});
my $at_pause = scalar reqs('/hooks/pausing');
sleep(2.5);    # five intervals of the rate limit: queued requests would have started
my $after = scalar reqs('/hooks/pausing');
cmp_ok($after - $at_pause, '<=', 1, 'after pause_endpoint nothing more starts (one already starting at most)');
is(sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'pausing'}), 10 - $after,
	'the rest wait in the queue');
is( sql($node, q{SELECT string_agg(DISTINCT s.status, ',') FROM outbox.messages m, outbox.message(m.id) s
		   WHERE m.endpoint = 'pausing'}),
	'pending', '... pending (outbox.message): taken back, they are in no claim any more');
is(sql($node, q{SELECT count(*) FROM outbox.claims c, outbox.messages m WHERE m.endpoint = 'pausing' AND m.id = ANY (c.message_ids)}),
	0, '... and no outbox.claims row lists them (a restart counts no attempt for them)');
sql($node, q{SELECT outbox.resume_endpoint('pausing')});
ok(wait_sql($node, "SELECT count(*) = 0 FROM outbox.messages WHERE endpoint = 'pausing'", 30),
	'after resume_endpoint the rest arrive');
my %p;
$p{ $_->{headers}{'webhook-id'} }++ for reqs('/hooks/pausing');
is(scalar(grep { ($p{"$W$_"} // 0) == 1 } @paused), 10, '... each exactly once');

# ---------------------------------------------------------------------------
# 3. A new secret reaches the queued requests.

sql($node, sprintf(q{SELECT outbox.create_endpoint('signer', url => '%s', rate_limit => 2, secret => '%s')},
		$recv->url('/hooks/signer'), $S1));
enqueue_many('signer', 8);
ok($recv->wait_requests('/hooks/signer', 2, 10), 'two requests signed with the first secret');
my $t_secret = time;
sql($node, qq{SELECT outbox.alter_endpoint('signer', secret => '$S2')});
ok(wait_sql($node, "SELECT count(*) = 0 FROM outbox.messages WHERE endpoint = 'signer'", 30), 'all delivered');
my @after_change = grep { $_->{time} > $t_secret + 0.5 } reqs('/hooks/signer');
cmp_ok(scalar @after_change, '>=', 4, 'requests after the change: ' . scalar @after_change);
is(scalar(grep { verify_webhook_signature($S2, $_->{headers}, $_->{body}) } @after_change), scalar @after_change,
	'... every one signed with the new secret');
is(scalar(grep { verify_webhook_signature($S1, $_->{headers}, $_->{body}) } @after_change), 0,
	'... none with the old one');

# ---------------------------------------------------------------------------
# 4. Timestamp and signature made at send time.

sql($node, sprintf(q{SELECT outbox.create_endpoint('stamped', url => '%s', rate_limit => 1, secret => '%s')},
		$recv->url('/hooks/stamped'), $S1));
enqueue_many('stamped', 5);    # claimed together; the last starts about 4 s later
ok(wait_sql($node, "SELECT count(*) = 0 FROM outbox.messages WHERE endpoint = 'stamped'", 30), 'all delivered');
my @st = sort { $a->{time} <=> $b->{time} } reqs('/hooks/stamped');
is(scalar @st, 5, 'five requests');
cmp_ok($st[-1]{time} - $st[0]{time}, '>=', 3.5, '... the last about 4 s after the first (rate limit 1)');
my @stale = grep { abs($_->{time} - $_->{headers}{'webhook-timestamp'}) > 1.5 } @st;
is(scalar @stale, 0, 'every webhook-timestamp is within a second of the arrival')
  or diag(join ', ', map { sprintf '%.1f vs %s', $_->{time}, $_->{headers}{'webhook-timestamp'} } @st);
is(scalar(grep { verify_webhook_signature($S1, $_->{headers}, $_->{body}) } @st), 5,
	'... and every signature verifies over that timestamp');

# ---------------------------------------------------------------------------
# 5. A probe that cannot be sent still gives the breaker a result.

$recv->add_rule(path => '/hooks/flaky', status => 503);
sql($node, sprintf(q{SELECT outbox.create_endpoint('flaky', url => '%s')}, $recv->url('/hooks/flaky')));
my @flaky = enqueue_many('flaky', 12);
ok(wait_sql($node, q{SELECT breaker_state = 'open' FROM outbox.endpoints WHERE name = 'flaky'}, 60),
	'ten 503s open the circuit');
# The valid messages wait 5 s; a row written by a plain INSERT with a header that is
# not a string is due now: it is the next probe, and it cannot be sent.
sql($node, q{UPDATE outbox.messages SET next_attempt_at = now() + interval '5 s' WHERE endpoint = 'flaky'});
my $bad = sql($node, q{INSERT INTO outbox.messages (endpoint, payload, headers) VALUES ('flaky', '{}', '{"X-Bad": 1}') RETURNING id});
$recv->clear_rules;
ok(wait_sql($node, "SELECT count(*) = 1 FROM dlq.dead_letters WHERE message_id = $bad AND reason_code = 'INVALID_MESSAGE'", 30),
	'the invalid probe is dead-lettered');
ok(wait_sql($node, q{SELECT breaker_state = 'closed' FROM outbox.endpoints WHERE name = 'flaky'}, 60),
	'the breaker does not stay half-open: the next probe goes, and closes it');
ok(wait_sql($node, "SELECT count(*) = 0 FROM outbox.messages WHERE endpoint = 'flaky'", 60),
	'every valid message is delivered');
is(scalar(grep { $recv->answered_2xx('/hooks/flaky')->{"$W$_"} } @flaky), 12, '... each with a 2xx');

$node->stop;
$recv->stop;
done_testing();
