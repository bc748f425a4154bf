# The per-endpoint circuit breaker (docs/delivery.md, "Circuit breaker"): an outage of the
# receiver does not turn into a retry storm or a DLQ full of healthy messages; the
# open circuit survives a worker restart; delivery resumes once a probe succeeds;
# and a broken endpoint does not slow a healthy one.
#
# The queue (outbox.messages) holds the undelivered messages; a delivered one moves to
# outbox.history (sent_retention keeps its default of a day).  A queue row's attempts
# are those recorded; an attempt in flight is recorded in the worker's claim
# (outbox.claims) until it settles, and a request the open circuit cancelled before it
# started records nothing.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

my $OUTAGE_S    = 20;      # how long the receiver stays down
my $DOWN_MSGS   = 1000;
my $HEALTHY_MSGS = 500;

my $node = new_outbox_node(
	'breaker',
	'pg_outbox.breaker_threshold' => '5',
	'pg_outbox.backoff_base'      => '500ms',
	'pg_outbox.backoff_max'       => '4s',
	'pg_outbox.max_concurrency'   => '64');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');

# The receiver of endpoint "down": started to get a port, then stopped, so that
# every connection is refused (such attempts never reach a receiver: they are
# counted in the database).  The port stays held by a socket that does not listen
# (stop_listening), so nothing else can take it before the receiver comes back.
my $down = start_receiver();
my $down_port = $down->port;
$down->stop_listening;
ok(!$down->running, "receiver of \"down\" stopped (port $down_port refuses connections)");

my $ok_recv = start_receiver();

$node->safe_psql(
	'postgres', sprintf(
		q{SELECT outbox.create_endpoint('down', url => '%s', max_attempts => 5);
		  SELECT outbox.create_endpoint('healthy', url => '%s', max_attempts => 5);
		  SELECT outbox.create_endpoint('broken', url => 'http://127.0.0.1:1/hooks/broken',
		                                max_attempts => 5);},
		"http://127.0.0.1:$down_port/hooks/down", $ok_recv->url('/hooks/healthy')));

# The messages of an endpoint, queued or delivered, each with the attempts it has
# spent: the queue row's recorded attempts, or the attempt a claim has it on while it
# is in flight; a delivered message's attempts from the history.
sub spent_sql
{
	my ($endpoint) = @_;
	return qq{(SELECT m.id, greatest(m.attempts, max(c.attempt)) AS attempts
	             FROM outbox.messages m
	             LEFT JOIN (SELECT u.id, u.attempt FROM outbox.claims cl
	                         CROSS JOIN LATERAL unnest(cl.message_ids, cl.attempts) AS u(id, attempt)) c
	                    ON c.id = m.id
	            WHERE m.endpoint = '$endpoint' GROUP BY m.id, m.attempts
	           UNION ALL
	           SELECT h.id, h.attempts FROM outbox.history h WHERE h.endpoint = '$endpoint') spent};
}

sub attempts_of
{
	my ($endpoint) = @_;
	return sql($node, 'SELECT coalesce(sum(attempts), 0) FROM ' . spent_sql($endpoint));
}

sub enqueue_sql
{
	my ($endpoint, $n, $tag) = @_;
	return "SELECT count(outbox.enqueue('$endpoint', jsonb_build_object('n', g, 'tag', '$tag'),
	                                    event_type => 'test.breaker'))
	          FROM generate_series(1, $n) g;";
}

# Seconds from the first enqueue to the last sent of one batch (by its tag), once
# the batch is delivered (all of it in the history).
sub drain_seconds
{
	my ($endpoint, $tag) = @_;
	return sql($node, "SELECT round(extract(epoch FROM max(sent_at) - min(created_at))::numeric, 3)
	             FROM outbox.history WHERE endpoint = '$endpoint' AND payload->>'tag' = '$tag'");
}

###############################################################################
# 1. Baseline: the healthy endpoint alone.
###############################################################################
sql($node, enqueue_sql('healthy', $HEALTHY_MSGS, 'alone'));
ok(wait_until(sub { count_sent($node, 'healthy') == $HEALTHY_MSGS }, undef, 'baseline drain'),
	"baseline: $HEALTHY_MSGS messages to the healthy endpoint sent");
my $drain_alone = drain_seconds('healthy', 'alone');

###############################################################################
# 2. Outage of the receiver of "down" for 20 s.
###############################################################################
my $t_outage = Time::HiRes::time();
sql($node, enqueue_sql('down', $DOWN_MSGS, 'outage'));

ok(wait_until(sub { breaker_state($node, 'down') eq 'open' }, undef, 'circuit of "down" opens'),
	'the circuit of "down" opens (outbox.endpoint_stats.breaker_state = open)');
# The requests in flight when the circuit opened end at once (connection refused), and
# their batches' claims go with them: then every attempt spent is recorded on its row
# (a request cancelled by the open circuit, never started, records none).
ok(wait_sql($node, q{SELECT in_flight = 0 FROM outbox.endpoint_stats WHERE endpoint = 'down'}, 30),
	'the requests of "down" in flight when its circuit opened have settled');
my $attempts_at_open = attempts_of('down');
note "attempts spent by \"down\" when its circuit opened: $attempts_at_open";
# Requests claimed but not started when the circuit opens are given back: at most
# the threshold plus what was already in flight (max_concurrency) spent an attempt.
cmp_ok($attempts_at_open, '<=', 5 + 64 + 2,
	"when the circuit opened, only requests already in flight had spent an attempt ($attempts_at_open)")
  or diag 'server log: ', join ' | ',
  slurp_file($node->logfile) =~ /(circuit for endpoint "down" opened\n.*?DETAIL:[^\n]*)/sg;
like(sql($node, 'SELECT outbox.metrics()'), qr/^pg_outbox_circuit_open\{endpoint="down"\} 1$/m,
	'metrics: pg_outbox_circuit_open{endpoint="down"} 1');

# 2a. A second endpoint at a closed port, enqueued in the same transaction as (and
# before) a batch for the healthy endpoint: the healthy batch drains about as fast
# as it did alone.
sql($node, enqueue_sql('broken', $HEALTHY_MSGS, 'broken') . enqueue_sql('healthy', $HEALTHY_MSGS, 'beside_broken'));
ok( wait_until(sub { count_sent($node, 'healthy') == 2 * $HEALTHY_MSGS }, undef, 'drain beside broken'),
	"$HEALTHY_MSGS messages to the healthy endpoint sent while two endpoints are down");
my $drain_beside = drain_seconds('healthy', 'beside_broken');
cmp_ok($drain_beside, '<', 15 + 3 * $drain_alone,
	"healthy drain beside a broken endpoint: ${drain_beside} s (alone: ${drain_alone} s)");
note sprintf('healthy endpoint, %d messages: %.3f s alone (%.0f msgs/s), %.3f s beside the broken '
	  . 'endpoints (%.0f msgs/s)',
	$HEALTHY_MSGS, $drain_alone, $HEALTHY_MSGS / ($drain_alone || 1e-9), $drain_beside,
	$HEALTHY_MSGS / ($drain_beside || 1e-9));
ok(wait_until(sub { breaker_state($node, 'broken') ne 'closed' }, undef, 'broken opens'),
	'the circuit of "broken" opened too');

# 2b. A worker restart while the circuit is open: the new worker reloads the
# breaker from outbox.endpoints instead of starting closed and spending attempts.
my ($old_pid) = sql($node, 'SELECT pid FROM outbox.worker_status()');
my $attempts_before_restart = attempts_of('down');
my $row_before = sql($node, q{SELECT breaker_state || ' ' || breaker_cooldown_ms FROM outbox.endpoints WHERE name = 'down'});
is(sql($node, "SELECT pg_terminate_backend($old_pid)"), 't', "worker (pid $old_pid) terminated");
ok( wait_until(
		sub {
			my $pid = sql($node, 'SELECT pid FROM outbox.worker_status()');
			$pid ne '' && $pid != $old_pid
			  && sql($node, "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid") == 1;
		}, undef,
		'a new worker'),
	'the postmaster started a new worker');
my ($new_pid) = sql($node, 'SELECT pid FROM outbox.worker_status()');
# The new worker is under way (it has looped for a while), then a window of 3 s in
# which a forgotten breaker would spend at least the threshold of attempts.
ok(wait_sql($node, q{SELECT last_loop_at > started_at + interval '0.5 s' FROM outbox.worker_status()}),
	'the new worker is running its loop');
Time::HiRes::sleep(3);
my $attempts_after_restart = attempts_of('down');
my $state_after = breaker_state($node, 'down');
like($state_after, qr/^(open|half_open)$/,
	"after the worker restart the circuit is still $state_after (was: $row_before)");
cmp_ok($attempts_after_restart - $attempts_before_restart, '<=', 4,
	"attempts do not jump across the restart ($attempts_before_restart -> $attempts_after_restart "
	  . "in the 3 s after it)");

# Wait out the rest of the outage.
my $left = $t_outage + $OUTAGE_S - Time::HiRes::time();
Time::HiRes::sleep($left) if $left > 0;

my $outage_attempts = attempts_of('down');
note "delivery attempts for $DOWN_MSGS messages during the ${OUTAGE_S} s outage: $outage_attempts";
cmp_ok($outage_attempts, '<', 200, "no retry storm: $outage_attempts attempts for $DOWN_MSGS messages in ${OUTAGE_S} s");
cmp_ok($outage_attempts, '>=', 5, 'the breaker did see failures (at least the threshold)');
is( sql($node, q{SELECT (SELECT count(*) FROM outbox.messages WHERE endpoint = 'down') || '/'
	           || (SELECT count(*) FROM outbox.history WHERE endpoint = 'down')}),
	"$DOWN_MSGS/0", 'all 1000 messages of "down" are still in the outbox, undelivered');
my $never_tried = sql($node, 'SELECT count(*) FROM ' . spent_sql('down') . ' WHERE attempts = 0');
cmp_ok($never_tried, '>', $DOWN_MSGS - 200, "$never_tried messages never spent an attempt");
cmp_ok(sql($node, 'SELECT max(attempts) FROM ' . spent_sql('down')), '<', 5,
	'no message of "down" came near max_attempts');
is(sql($node, 'SELECT count(*) FROM dlq.dead_letters'), '0', 'no dead letters at all (neither "down" nor "broken")')
  or diag sql($node, 'SELECT endpoint, reason_code, count(*) FROM dlq.dead_letters GROUP BY 1, 2');
like(breaker_state($node, 'down'), qr/^(open|half_open)$/, 'the circuit of "down" is still open at the end of the outage');
is($down->running, 0, 'the receiver of "down" was down all along');

my $opened_lines = log_count($node, qr/circuit for endpoint "down" opened/);
note "server log: $opened_lines 'circuit for endpoint \"down\" opened' lines during the outage";
cmp_ok($opened_lines, '>=', 1, 'the opening is logged');
cmp_ok($opened_lines, '<=', 15, "a small number of 'opened' log lines ($opened_lines), not one per message");
is(log_count($node, qr/circuit for endpoint "down" closed/), 0, 'no "closed" line during the outage');

###############################################################################
# 3. The receiver comes back on the same port: everything is delivered.
###############################################################################
my $t_back = Time::HiRes::time();
$down->restart;
my $attempts_before_back = attempts_of('down');
is($down->port, $down_port, "receiver of \"down\" back on port $down_port");
ok(wait_until(sub { count_sent($node, 'down') == $DOWN_MSGS }, undef, 'all delivered after the outage'),
	"all $DOWN_MSGS messages delivered after the receiver came back")
  or diag sql($node, q{SELECT s.status, s.attempts, count(*) FROM outbox.messages m, outbox.message(m.id) s
	             WHERE m.endpoint = 'down' GROUP BY 1, 2});
my $recovery_s = Time::HiRes::time() - $t_back;
note sprintf('all %d delivered %.2f s after the receiver came back', $DOWN_MSGS, $recovery_s);
ok(wait_until(sub { breaker_state($node, 'down') eq 'closed' }, undef, 'circuit closes'),
	'the circuit of "down" is closed again');
like(sql($node, 'SELECT outbox.metrics()'), qr/^pg_outbox_circuit_open\{endpoint="down"\} 0$/m,
	'metrics: pg_outbox_circuit_open{endpoint="down"} 0');
is(sql($node, q{SELECT breaker_failures FROM outbox.endpoint_stats WHERE endpoint = 'down'}), '0',
	'breaker_failures reset');
ok(wait_until(sub { log_count($node, qr/circuit for endpoint "down" closed/) >= 1 }, undef, 'closed logged'),
	'the closing is logged');
is(log_count($node, qr/circuit for endpoint "down" closed/), 1, 'exactly one "closed" line for "down"');

my $reqs = $down->requests(path => '/hooks/down');
my %ids = map { $_->{headers}{'webhook-id'} => 1 } @$reqs;
is(scalar(@$reqs), $DOWN_MSGS, 'the receiver got each message once (connection-refused attempts never reached it)');
is(scalar(keys %ids), $DOWN_MSGS, '... with distinct webhook-ids');
my $final_attempts = attempts_of('down');
# One successful attempt per message, plus at most a probe or two that was under way
# while the receiver came back.
cmp_ok($final_attempts - $attempts_before_back, '>=', $DOWN_MSGS, 'one successful attempt per message');
cmp_ok($final_attempts - $attempts_before_back, '<=', $DOWN_MSGS + 2,
	"after the outage one more attempt per message ($attempts_before_back -> $final_attempts)");
is(sql($node, 'SELECT count(*) FROM dlq.dead_letters'), '0', 'still no dead letters');

$ok_recv->stop;
$down->stop;
$node->stop;
done_testing();
