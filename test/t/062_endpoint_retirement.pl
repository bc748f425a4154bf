# Endpoints that retire themselves (docs/operations.md, "Endpoints that retire themselves";
# docs/delivery.md, "Outcomes"):
#   1. an endpoint whose receiver answers nothing but 500 for pg_outbox.disable_after is
#      paused with reason FAILING, shown by endpoint_stats and metrics(), announced once on
#      NOTIFY channel pg_outbox_events and logged once; a server restart between its
#      failures does not reset when it started failing; its message waits, and is
#      delivered after resume_endpoint, which clears the reason;
#      an open circuit counts as failing between answers too;
#   2. a 410 Gone pauses the endpoint at once (GONE): nothing is lost, the message that
#      got it (its attempt not counted) and the ones enqueued meanwhile are delivered
#      after the resume;
#   3. "webhook-delivery: abort" dead-letters exactly that message as ABORTED_BY_RECEIVER,
#      whatever the status, and the endpoint's other messages go on;
#   4. an operator's resume wins over a pause the worker decided from an answer before it;
#   5. a negative disable_after is refused.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use JSON::PP ();

my $DISABLE_AFTER_S = 6;

my $node = new_outbox_node(
	'retirement',
	'pg_outbox.disable_after'     => "${DISABLE_AFTER_S}s",
	'pg_outbox.breaker_threshold' => '3',
	'pg_outbox.backoff_base'      => '200ms',
	'pg_outbox.backoff_max'       => '1s');
sql($node, 'CREATE EXTENSION pg_outbox');
my $recv = start_receiver();
my $json = JSON::PP->new->utf8;

sub stats
{
	my ($endpoint) = @_;
	return sql($node,
		"SELECT paused, coalesce(paused_reason, '-'), failing_since IS NOT NULL
		   FROM outbox.endpoint_stats WHERE endpoint = '$endpoint'");
}

sub events_of
{
	my ($listener, $endpoint) = @_;
	$listener->poll;
	return grep { $_->{channel} eq 'pg_outbox_events' && ($_->{envelope}{endpoint} // '') eq $endpoint }
	  @{ $listener->notes };
}

# ---------------------------------------------------------------------------
# 1. Nothing but failures for disable_after.
$recv->add_rule(path => '/hooks/dead', status => 500);
endpoint($node, $recv, 'dead', '/hooks/dead', max_attempts => 1000);    # never exhausted here
my $d1 = sql($node, q{SELECT outbox.enqueue('dead', '{"n": 1}')});
ok(wait_sql($node, q{SELECT failing_since IS NOT NULL FROM outbox.endpoint_stats WHERE endpoint = 'dead'}),
	'the failing endpoint records when it started failing');
my $since = sql($node, q{SELECT failing_since FROM outbox.endpoints WHERE name = 'dead'});
is(stats('dead'), 'f|-|t', '... and is not paused yet');

$node->restart;
wait_for_worker($node);
is(sql($node, q{SELECT failing_since FROM outbox.endpoints WHERE name = 'dead'}), $since,
	'a server restart keeps failing_since');
my $listener = listen_for_notifications($node, 'pg_outbox_events');
my $requests_before = scalar @{ $recv->requests(path => '/hooks/dead') };
ok(wait_sql($node, q{SELECT paused FROM outbox.endpoint_stats WHERE endpoint = 'dead'}, 30),
	"after ${DISABLE_AFTER_S}s of nothing but failures the endpoint is paused");
ok(scalar @{ $recv->requests(path => '/hooks/dead') } > $requests_before,
	'... having failed after the restart as before it');
is(stats('dead'), 't|FAILING|t', '... endpoint_stats shows the reason FAILING');
ok($listener->wait(1, 10), '... a notification on pg_outbox_events');
my @events = events_of($listener, 'dead');
is(scalar @events, 1, '... exactly one for the endpoint');
my $e = $events[0]{envelope} // {};
is(join('|', map { $e->{$_} // '?' } qw(event endpoint reason database)),
	'endpoint_disabled|dead|FAILING|postgres', '... its event, endpoint, reason and database');
is(sql($node, "SELECT '$e->{since}'::timestamptz = '$since'::timestamptz"), 't',
	'... and since: the first failure, from before the restart');
is(sql($node, "SELECT '$e->{paused_at}'::timestamptz - '$since'::timestamptz >= interval '${DISABLE_AFTER_S}s'"),
	't', '... paused_at no sooner than disable_after after it');
like(sql($node, 'SELECT outbox.metrics()'), qr/^pg_outbox_auto_paused\{endpoint="dead",reason="FAILING"\} 1$/m,
	'metrics() shows the endpoint retired for FAILING');
like(sql($node, 'SELECT outbox.metrics()'), qr/^pg_outbox_auto_paused\{endpoint="dead",reason="GONE"\} 0$/m,
	'... and not for GONE');

my $count_paused = scalar @{ $recv->requests(path => '/hooks/dead') };
sleep 2;
is(scalar @{ $recv->requests(path => '/hooks/dead') }, $count_paused, 'the paused endpoint is sent nothing more');
is(log_count($node, qr/endpoint "dead" paused \(FAILING\)/), 1, 'the pause is logged once');
like(states($node, $d1), qr{^pending/}, 'its message is still pending');
is(sql($node, q{SELECT count(*) FROM dlq.dead_letters WHERE endpoint = 'dead'}), '0', '... not dead-lettered');

$recv->clear_rules;
sql($node, q{SELECT outbox.resume_endpoint('dead')});
is(stats('dead'), 'f|-|f', 'resume_endpoint clears the reason and the failing streak');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($d1)"), '... and the message is delivered');
like(sql($node, 'SELECT outbox.metrics()'), qr/^pg_outbox_auto_paused\{endpoint="dead",reason="FAILING"\} 0$/m,
	'... metrics() no longer shows it retired');

# ---------------------------------------------------------------------------
# 1b. An open circuit counts as failing, between answers too: an endpoint that a worker
#     finds with its circuit open (its next probe an hour away) and failing for longer
#     than disable_after, as a restarted server finds one, is paused with no request.
sql($node, q{BEGIN;
             SELECT outbox.create_endpoint('silent', url => '} . $recv->url('/hooks/silent') . q{');
             UPDATE outbox.endpoints SET breaker_state = 'open', breaker_failures = 3,
                    breaker_open_until = now() + interval '1 hour', breaker_cooldown_ms = 3600000,
                    failing_since = now() - interval '1 minute'
              WHERE name = 'silent';
             SELECT outbox.enqueue('silent', '{"n": 1}');
             COMMIT;});
ok(wait_sql($node, q{SELECT paused FROM outbox.endpoint_stats WHERE endpoint = 'silent'}),
	'an endpoint whose circuit is open and failing for longer than disable_after is paused');
is(stats('silent'), 't|FAILING|t', '... for FAILING');
is(scalar @{ $recv->requests(path => '/hooks/silent') }, 0, '... without a request');
ok($listener->wait(2, 10), '... announced on pg_outbox_events');
is(scalar(events_of($listener, 'silent')), 1, '... once');

# ---------------------------------------------------------------------------
# 2. 410 Gone: paused at once, nothing lost.
$recv->add_rule(path => '/hooks/gone', status => 410, times => 1);
endpoint($node, $recv, 'gone', '/hooks/gone');
my $g1 = sql($node, q{SELECT outbox.enqueue('gone', '{"n": 1}')});
ok(wait_sql($node, q{SELECT paused FROM outbox.endpoint_stats WHERE endpoint = 'gone'}), 'a 410 pauses the endpoint');
is(stats('gone'), 't|GONE|t', '... with the reason GONE');
is(scalar @{ $recv->requests(path => '/hooks/gone') }, 1, '... after one request');
is(sql($node, "SELECT status || '/' || attempts || '/' || last_http_status FROM outbox.message($g1)"),
	'pending/0/410', '... the message stays pending, its attempt not counted, the 410 recorded');
my @more = split /\n/, sql($node, q{SELECT outbox.enqueue('gone', jsonb_build_object('n', g)) FROM generate_series(2, 3) g});
ok($listener->wait(3, 10), '... a notification on pg_outbox_events');
my @gone_events = events_of($listener, 'gone');
is(join('|', map { $gone_events[0]{envelope}{$_} // '?' } qw(event endpoint reason)),
	'endpoint_disabled|gone|GONE', '... saying GONE');
sleep 1;
is(scalar @{ $recv->requests(path => '/hooks/gone') }, 1, 'nothing is sent to the gone endpoint meanwhile');
is(log_count($node, qr/endpoint "gone" paused \(GONE\)/), 1, 'the pause is logged once');
is(sql($node, q{SELECT count(*) FROM dlq.dead_letters WHERE endpoint = 'gone'}), '0', 'nothing is dead-lettered');

sql($node, q{SELECT outbox.resume_endpoint('gone')});
ok(wait_sql($node, "SELECT bool_and(s.status = 'sent') FROM unnest('{$g1," . join(',', @more) . "}'::bigint[]) i(id),
                    LATERAL outbox.message(i.id) s"), 'after the resume all three messages are delivered');
is(stats('gone'), 'f|-|f', '... the reason cleared');
my @g1_requests = grep { ($_->{answered} // 0) == 200 && $_->{body} =~ /"n": ?1\b/ }
  @{ $recv->requests(path => '/hooks/gone') };
is(scalar @g1_requests, 1, 'the message that got the 410 was delivered once more');
is($g1_requests[0]{headers}{'outbox-attempt'} // '?', '1', '... as its attempt 1 (the 410 did not count)');

# ---------------------------------------------------------------------------
# 3. webhook-delivery: abort.
$recv->add_rule(path => '/hooks/picky', status => 500, times => 1, headers => { 'Webhook-Delivery' => 'abort' },
	body => 'not this one');
endpoint($node, $recv, 'picky', '/hooks/picky');
my $a1 = sql($node, q{SELECT outbox.enqueue('picky', '{"n": 1}')});
ok(wait_sql($node, "SELECT status = 'dead' FROM outbox.message($a1)"), 'an aborted message is dead at once');
is(sql($node, "SELECT reason_code || '|' || http_status || '|' || attempts || '|' || response_body
                 FROM dlq.dead_letters WHERE message_id = $a1"),
	'ABORTED_BY_RECEIVER|500|1|not this one', '... as ABORTED_BY_RECEIVER after one attempt, whatever the status');
my @others = split /\n/, sql($node, q{SELECT outbox.enqueue('picky', jsonb_build_object('n', g)) FROM generate_series(2, 4) g});
ok(wait_sql($node, "SELECT count(*) = 3 FROM outbox.history WHERE endpoint = 'picky'"),
	'the endpoint\'s other messages are delivered');
is(stats('picky'), 'f|-|f', '... the endpoint neither paused nor failing');
is(sql($node, q{SELECT count(*) FROM dlq.dead_letters WHERE endpoint = 'picky'}), '1', 'exactly one dead letter');
like(sql($node, 'SELECT outbox.metrics()'),
	qr/^pg_outbox_dead_letters\{endpoint="picky",reason_code="ABORTED_BY_RECEIVER"\} 1$/m, '... counted in metrics()');

# ---------------------------------------------------------------------------
# 4. An operator's resume wins over a pause the worker decided before it: the 410 comes
#    while an operator's transaction holds the endpoint's row (the worker's pause waits
#    for the row), and that transaction resumes the endpoint and commits. The endpoint
#    stays resumed, nothing is announced, and the message goes on.
$recv->add_rule(path => '/hooks/race', status => 410, times => 1, delay_ms => 1500);
endpoint($node, $recv, 'race', '/hooks/race');
my $r1 = sql($node, q{SELECT outbox.enqueue('race', '{"n": 1}')});
my $operator = $node->background_psql('postgres');
$operator->query_safe(q{BEGIN; SELECT 1 FROM outbox.endpoints WHERE name = 'race' FOR NO KEY UPDATE});
ok(wait_until(sub { grep { ($_->{answered} // 0) == 410 } @{ $recv->requests(path => '/hooks/race') } },
		30, 'the 410'),
	'the receiver answered 410 while an operator holds the endpoint\'s row');
sleep 1;    # the worker's settles meanwhile find the row busy
is(sql($node, q{SELECT paused FROM outbox.endpoints WHERE name = 'race'}), 'f', '... the pause waits for the row');
$operator->query_safe(q{SELECT outbox.resume_endpoint('race')});
$operator->query_safe('COMMIT');
$operator->quit;
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($r1)"),
	'the operator\'s resume committed after the 410: the message is delivered');
is(stats('race'), 'f|-|f', '... the endpoint was never paused');
is(scalar(events_of($listener, 'race')), 0, '... nothing announced');
is(log_count($node, qr/endpoint "race" paused/), 0, '... nothing logged');

# ---------------------------------------------------------------------------
# 5. Bad input: the GUC machinery refuses a negative disable_after, and 0 is accepted.
my ($rc, $out, $err) = $node->psql('postgres', q{ALTER SYSTEM SET pg_outbox.disable_after = '-1s'});
isnt($rc, 0, 'a negative disable_after is refused');
like($err, qr/-1 s is outside the valid range for parameter "pg_outbox\.disable_after" \(0 \.\. /,
	'... by the GUC range check');
ok(reload_conf($node, 'pg_outbox.disable_after' => '0'), 'disable_after = 0 (never) is accepted');

$listener->quit;
done_testing();
