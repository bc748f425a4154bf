#!/usr/bin/perl
# Publish and subscribe (docs/delivery.md, Publish and subscribe), judged from what the
# receiver and a pull reader got:
#  - one transaction publishes 20 events to four subscribers (two healthy HTTP
#    endpoints, one ordered; one always answering 500 with max_attempts 2; a pull
#    endpoint): each healthy one gets each event exactly once, with one webhook-id per
#    event, the same at all of them (and in the pull reader's hands); the ordered one
#    gets them in publish order; the failing one dead-letters its own 20 and nobody
#    else's;
#  - an event type nobody subscribed to reaches nobody, and metrics() counts it;
#  - a subscription added later is seen by a session that published before (its cached
#    subscribers are forgotten at the subscribing commit);
#  - a restart in the middle of delivering a publish loses nothing.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_outbox_node(
	'publish',
	'pg_outbox.backoff_base'      => '20ms',
	'pg_outbox.backoff_max'       => '100ms',
	'pg_outbox.breaker_threshold' => '1000');
sql($node, 'CREATE EXTENSION pg_outbox');
wait_for_worker($node);
my $recv = start_receiver();
$recv->add_rule(path => '/hooks/failing', status => 500);

endpoint($node, $recv, 'alpha',   '/hooks/alpha');
endpoint($node, $recv, 'beta',    '/hooks/beta', ordered => 'true');
endpoint($node, $recv, 'failing', '/hooks/failing', max_attempts => 2);
sql($node, q{SELECT outbox.create_endpoint('reader', pull => true)});
sql($node, q{SELECT outbox.subscribe('alpha', ARRAY['order.created', 'order.paid'])});
sql($node, q{SELECT outbox.subscribe('beta', ARRAY['order.*'])});
sql($node, q{SELECT outbox.subscribe('failing', ARRAY['order.*'])});
sql($node, q{SELECT outbox.subscribe('reader', ARRAY['order.created'])});

sub unmatched
{
	my ($n) = sql($node, 'SELECT outbox.metrics()') =~ /^pg_outbox_publishes_unmatched_total (\d+)$/m;
	return $n;
}
is(unmatched(), 0, 'no unmatched publish yet');

# 1. One transaction, 20 events, 4 deliveries each.
my $made = sql($node, q{
	SELECT sum(outbox.publish('order.created', jsonb_build_object('n', n), ordering_key => 'k'))
	  FROM generate_series(1, 20) n});
is($made, 80, 'publish made one delivery per subscriber: 4 x 20');

ok($recv->wait_requests('/hooks/alpha', 20), 'alpha got 20 requests');
ok($recv->wait_requests('/hooks/beta',  20), 'beta got 20 requests');
ok(wait_sql($node, q{SELECT count(*) = 20 FROM dlq.dead_letters WHERE endpoint = 'failing'}),
	'failing dead-lettered its 20');

# The webhook-id of each event at an endpoint: {n => [webhook-ids]}.
sub ids_by_event
{
	my ($path) = @_;
	my %by;
	for my $r (@{ $recv->requests(path => $path) })
	{
		my ($n) = $r->{body} =~ /"n":\s*(\d+)/;
		push @{ $by{$n} }, $r->{headers}{'webhook-id'};
	}
	return \%by;
}
my $alpha = ids_by_event('/hooks/alpha');
my $beta  = ids_by_event('/hooks/beta');
is(scalar(keys %$alpha), 20, 'alpha: 20 events');
is(scalar(grep { @{ $alpha->{$_} } == 1 } keys %$alpha), 20, 'alpha: each event exactly once');
is(scalar(grep { @{ $beta->{$_} } == 1 } keys %$beta), 20, 'beta: each event exactly once');
is(scalar(grep { defined $beta->{$_} && $alpha->{$_}[0] eq $beta->{$_}[0] } keys %$alpha),
	20, 'each event has the same webhook-id at alpha and beta');
my %distinct = map { $alpha->{$_}[0] => 1 } keys %$alpha;
is(scalar(keys %distinct), 20, 'one webhook-id per event, 20 in all');
is(join(',', map { my ($n) = $_->{body} =~ /"n":\s*(\d+)/; $n } @{ $recv->requests(path => '/hooks/beta') }),
	join(',', 1 .. 20), 'ordered beta got the events in publish order');

my $failing = ids_by_event('/hooks/failing');
is(scalar(grep { @{ $failing->{$_} } == 2 && $failing->{$_}[0] eq $alpha->{$_}[0] } keys %$alpha),
	20, 'failing: each event tried twice, with the event\'s webhook-id');
is(sql($node, q{SELECT count(*) FROM dlq.dead_letters WHERE endpoint <> 'failing'}), 0,
	'no other subscriber dead-lettered anything');
is(sql($node, q{SELECT string_agg(DISTINCT reason_code, ',') FROM dlq.dead_letters}), 'RETRY_EXHAUSTED',
	'failing exhausted its attempts');

my $read = sql($node, q{
	SELECT string_agg(r.payload->>'n' || '=' || r.webhook_id, ' ' ORDER BY (r.payload->>'n')::int)
	  FROM outbox.read('reader', max => 100) r});
my $expected = join ' ', map { "$_=$alpha->{$_}[0]" } 1 .. 20;
is($read, $expected, 'the pull reader got the 20 events with the same webhook-ids');

# 2. Nobody subscribed: nothing sent, counted.
is(sql($node, q{SELECT outbox.publish('shipment.sent', '{"n": 99}')}), 0, 'an unsubscribed type: 0 deliveries');
is(sql($node, q{SELECT outbox.publish('order', '{"n": 98}')}), 0, 'the bare prefix is not matched by order.*');
is(unmatched(), 2, 'metrics() counts the unmatched publishes');
sleep 1;
is(scalar(grep { $_->{body} =~ /"n":\s*9[89]/ } @{ $recv->requests() }), 0,
	'no receiver got an unsubscribed event');
is(sql($node, q{SELECT count(*) FROM outbox.messages WHERE payload->>'n' IN ('98', '99')}), 0,
	'nothing queued for them');

# 3. A session that cached the subscribers of a type sees a later subscription.
my $session = $node->background_psql('postgres');
is($session->query_safe(q{SELECT outbox.publish('order.shipped', '{"n": 100}')}), 2, 'before: beta and failing');
sql($node, q{SELECT outbox.subscribe('alpha', ARRAY['order.shipped'])});
is($session->query_safe(q{SELECT outbox.publish('order.shipped', '{"n": 101}')}), 3,
	'after subscribe commits, the same session delivers to alpha too');
sql($node, q{SELECT outbox.unsubscribe('alpha', ARRAY['order.shipped'])});
is($session->query_safe(q{SELECT outbox.publish('order.shipped', '{"n": 102}')}), 2, 'after unsubscribe: beta and failing');
$session->quit;
ok($recv->wait_requests('/hooks/alpha', 21), 'alpha got the one event of order.shipped');

# 4. A restart in the middle of delivering: nothing lost.
$recv->add_rule(path => '/hooks/alpha', status => 200, delay_ms => 100, times => 10);
sql($node, q{
	SELECT sum(outbox.publish('order.paid', jsonb_build_object('n', n), ordering_key => 'r'))
	  FROM generate_series(201, 230) n});
$recv->wait_requests('/hooks/alpha', 23);
$node->restart;
ok(wait_sql($node, q{SELECT NOT EXISTS (SELECT FROM outbox.messages WHERE endpoint IN ('alpha', 'beta'))}),
	'every delivery of the 30 events settled after the restart');
my $after_alpha = ids_by_event('/hooks/alpha');
my $after_beta  = ids_by_event('/hooks/beta');
is(scalar(grep { defined $after_alpha->{$_} && defined $after_beta->{$_} } 201 .. 230), 30,
	'alpha and beta each got all 30 events');
is(scalar(grep { $after_alpha->{$_}[0] eq $after_beta->{$_}[0] } 201 .. 230), 30,
	'with the same webhook-id at both');
my @beta_order;
my %seen;
for my $r (@{ $recv->requests(path => '/hooks/beta') })
{
	my ($n) = $r->{body} =~ /"n":\s*(\d+)/;
	push @beta_order, $n if $n >= 201 && !$seen{$n}++;
}
is(join(',', @beta_order), join(',', 201 .. 230), 'beta still got them in publish order');

done_testing();
