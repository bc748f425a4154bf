#!/usr/bin/perl
# The attempt log, outbox.attempts (docs/operations.md, "The attempt log"):
#   1. a message the receiver answers 503, 503, then 200 has its three attempts logged,
#      numbered 1..3, with their status, a duration, the time they started, and the
#      first 1 KiB of each failed answer; outbox.message() counts them; a transport
#      error is logged with curl's text and no status; a request whose message an
#      operator deleted meanwhile is logged too;
#   2. a NOTIFY delivery is logged (no status, no duration);
#   3. a request cut short by the worker's crash is logged by the next worker as its
#      outcome unknown, then the delivery after the restart as attempt 2;
#   4. pg_outbox.attempt_retention = 0 logs nothing; negative is refused;
#   5. retention drops whole partitions: a partition past it goes with its rows, the
#      default partition's old rows are deleted, the worker's own partitions stay.
# Evidence of what was sent comes from the receiver's records.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes;

my $node = new_outbox_node('attempts',
	'pg_outbox.backoff_base' => '100ms',
	'pg_outbox.backoff_max'  => '200ms',
	'restart_after_crash'    => 'on');
my $recv = start_receiver();
sql($node, 'CREATE EXTENSION pg_outbox');
wait_for_worker($node);
my $W = webhook_prefix($node);
ok(wait_sql($node, q{SELECT count(*) >= 3 FROM outbox._partitions('outbox.attempts') WHERE to_at > now()}),
	'the worker makes the attempt log\'s partitions for now and ahead');

sub attempts_of
{
	my ($id) = @_;
	return sql($node, qq{SELECT string_agg(concat_ws('|', attempt, coalesce(http_status::text, '-'),
	                                                  coalesce(error, '-'), endpoint), ',' ORDER BY attempt)
	                       FROM outbox.attempts WHERE message_id = $id});
}

# ---------------------------------------------------------------------------
# 1. 503, 503, 200: three attempts.
create_endpoint($node, 'flaky', $recv->url('/hooks/flaky'));
my $long = ('e' x 1000) . ('x' x 1000);    # 2,000 bytes: the log keeps the first 1,024
$recv->add_rule(path => '/hooks/flaky', status => 503, body => $long, times => 2, delay_ms => 20);
my $before = sql($node, 'SELECT clock_timestamp()');
my $id = sql($node, q{SELECT outbox.enqueue('flaky', '{"n": 1}')});
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($id)"), 'the flaky message is delivered in the end');
my $reqs = $recv->requests(path => '/hooks/flaky');
is(join(',', map { $_->{answered} // '-' } @$reqs), '503,503,200', 'the receiver answered 503, 503, 200');
is(join(',', map { $_->{headers}{'webhook-id'} } @$reqs), join(',', ("$W$id") x 3), '... to the same message');
is(attempts_of($id), '1|503|HTTP 503|flaky,2|503|HTTP 503|flaky,3|200|-|flaky',
	'the log has its three attempts, numbered 1..3, with their status and error');
is(sql($node, "SELECT string_agg((duration_ms > 0)::text, ',' ORDER BY attempt) FROM outbox.attempts
          WHERE message_id = $id"), 'true,true,true', 'each with a duration');
is(sql($node, "SELECT string_agg((duration_ms >= 20)::text, ',' ORDER BY attempt) FROM outbox.attempts
          WHERE message_id = $id AND http_status = 503"), 'true,true', '... the 503s at least the receiver\'s 20 ms of delay');
is(sql($node, "SELECT bool_and(attempted_at >= '$before' AND attempted_at <= now())
                      AND array_agg(attempted_at ORDER BY attempt) = array_agg(attempted_at ORDER BY attempted_at)
                 FROM outbox.attempts WHERE message_id = $id"), 't', 'each at the time it started, in order');
is(sql($node, "SELECT string_agg(coalesce(response_body, '-'), ',' ORDER BY attempt) FROM outbox.attempts
          WHERE message_id = $id"), join(',', substr($long, 0, 1024), substr($long, 0, 1024), '-'),
	'the first 1 KiB of each failed answer, none of the delivered one');
is(sql($node, "SELECT attempts || '/' || attempts_logged FROM outbox.message($id)"), '3/3',
	'outbox.message() counts the three attempts logged');
is(sql($node, "SELECT count(*) FROM outbox.attempts_default"), '0',
	'the rows are in the worker\'s time partitions, not the default one');
is(sql($node, q{SELECT p.to_at - p.from_at FROM outbox._partitions('outbox.attempts') p
          WHERE p.from_at <= now() AND p.to_at > now()}),
	'1 day', 'partitions are a day wide for the default retention of 7 days');

# Attempts that settle together keep their own outcomes, whether they share them (logged
# with one value of each for the whole settle) or not (one of each per row): three
# endpoints claimed together answer 200, 503 with a body then 200, and 202. A session
# holds the log's table for 250 ms after they are enqueued (the worker's lock_timeout
# is 500 ms), so that the answers that come back meanwhile are settled together.
create_endpoint($node, "mixed_$_", $recv->url("/hooks/mixed_$_")) for qw(ok busy accepted);
$recv->add_rule(path => '/hooks/mixed_busy', status => 503, body => 'busy now', times => 5);
$recv->add_rule(path => '/hooks/mixed_accepted', status => 202);
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN');
$locker->query_safe('LOCK TABLE outbox.attempts IN SHARE MODE');
my %mixed = map { $_ => [ split /\n/, sql($node, "SELECT outbox.enqueue('mixed_$_', jsonb_build_object('n', g))
	FROM generate_series(1, 5) g") ] } qw(ok busy accepted);
Time::HiRes::sleep(0.25);    # their answers come back meanwhile
$locker->query_safe('COMMIT');
$locker->quit;
ok(wait_sql($node, q{SELECT count(*) = 15 FROM outbox.history WHERE endpoint LIKE 'mixed%'}),
	'the 15 messages of three endpoints are delivered');
for my $expected ([ 'ok', '1|200|-|mixed_ok' ], [ 'busy', '1|503|HTTP 503|mixed_busy,2|200|-|mixed_busy' ],
	[ 'accepted', '1|202|-|mixed_accepted' ])
{
	my ($name, $log) = @$expected;
	is(join(' ', map { attempts_of($_) } @{ $mixed{$name} }), join(' ', ($log) x 5), "each message of mixed_$name: $log");
}
is(sql($node, q{SELECT string_agg(DISTINCT coalesce(response_body, '-'), ',') FROM outbox.attempts
	WHERE endpoint LIKE 'mixed%' AND attempt = 1}), '-,busy now', '... and the body of each failed answer only');

# A transport error: the receiver answers after the endpoint's timeout.
create_endpoint($node, 'slow', $recv->url('/hooks/slow'), timeout_ms => 300);
$recv->add_rule(path => '/hooks/slow', delay_ms => 2000, times => 1);
my $timed_out = sql($node, q{SELECT outbox.enqueue('slow', '{"n": 2}')});
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($timed_out)"),
	'a message whose first request timed out is delivered');
my ($first) = split /,/, attempts_of($timed_out);
like($first, qr/^1\|-\|.*timed out.*\|slow$/, "its first attempt is logged with curl's error and no status ($first)");
is(sql($node, "SELECT round(duration_ms / 100) FROM outbox.attempts WHERE message_id = $timed_out AND attempt = 1"),
	'3', '... and took the timeout, 300 ms');

# A message deleted by an operator while its request is in flight: the receiver got it,
# so its attempt is logged, though nothing is left to move to the history.
create_endpoint($node, 'gone', $recv->url('/hooks/gone'));
$recv->add_rule(path => '/hooks/gone', delay_ms => 1500, times => 1);
my $gone = sql($node, q{SELECT outbox.enqueue('gone', '{"n": 4}')});
ok(wait_until(sub { scalar @{ $recv->requests(path => '/hooks/gone') } >= 1 }, undef, 'the request in flight'),
	'a request is in flight');
is(sql($node, "DELETE FROM outbox.messages WHERE id = $gone RETURNING 1"), '1',
	'... and its message is deleted meanwhile');
ok(wait_sql($node, "SELECT count(*) = 1 FROM outbox.attempts WHERE message_id = $gone"),
	'its attempt is logged once answered');
is(attempts_of($gone), '1|200|-|gone', '... as attempt 1, answered 200');
is(sql($node, "SELECT count(*) FROM outbox.history WHERE id = $gone"), '0', '... and nothing is in the history');

# ---------------------------------------------------------------------------
# 2. NOTIFY.
sql($node, q{SELECT outbox.create_endpoint('feed', channel => 'feed')});
my $listener = listen_for_notifications($node, 'feed');
my $nid = sql($node, q{SELECT outbox.enqueue('feed', '{"n": 3}')});
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($nid)"), 'a NOTIFY message is delivered');
ok(wait_until(sub { $listener->poll; scalar @{ $listener->notes } >= 1 }, undef, 'the notification'),
	'... and its notification arrives');
$listener->quit;
is(attempts_of($nid), '1|-|-|feed', 'its attempt is logged: attempt 1, no status, no error');
is(sql($node, "SELECT (duration_ms IS NULL) || '/' || (attempted_at <= now()) FROM outbox.attempts WHERE message_id = $nid"),
	'true/true', '... not timed (the notification leaves at commit)');

# ---------------------------------------------------------------------------
# 3. The worker dies during a request: the next one logs that attempt, outcome unknown.
create_endpoint($node, 'hang', $recv->url('/hooks/hang'));
$recv->add_rule(path => '/hooks/hang', action => 'hang', times => 1, hang_ms => 60000);
my $hid = sql($node, q{SELECT outbox.enqueue('hang', '{"n": 4}')});
ok($recv->wait_requests('/hooks/hang', 1), 'the first request arrived and hangs');
my $lsn = sql($node, 'SELECT pg_current_wal_insert_lsn()');
ok(wait_sql($node, "SELECT pg_current_wal_flush_lsn() >= '$lsn'"), 'its claim is on disk');
is(sql($node, "SELECT count(*) FROM outbox.attempts WHERE message_id = $hid"), '0', 'nothing is logged while it hangs');
my $old_pid = worker_pid($node);
is(kill('KILL', $old_pid), 1, "SIGKILL to worker $old_pid");
ok(defined wait_for_worker($node, $old_pid), 'a new worker runs');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($hid)"), 'the message is delivered after the restart');
is(attempts_of($hid), '1|-|worker restarted: the outcome is unknown|hang,2|200|-|hang',
	'the crashed attempt is logged as such, the delivery as attempt 2');
is(sql($node, "SELECT string_agg((duration_ms IS NULL)::text, ',' ORDER BY attempt) FROM outbox.attempts
          WHERE message_id = $hid"), 'true,false', '... the crashed one without a duration');
is(sql($node, "SELECT count(*) FROM outbox.attempts WHERE message_id = $id"), '3',
	'the attempts logged before the crash are all still there');

# ---------------------------------------------------------------------------
# 4. attempt_retention = 0: nothing logged. Negative: refused.
my ($rc, $out, $err) = $node->psql('postgres', q{ALTER SYSTEM SET pg_outbox.attempt_retention = '-1'});
isnt($rc, 0, 'a negative attempt_retention is refused');
like($err, qr/-1 .*outside the valid range/, "... by the GUC's bounds ($err)");
ok(reload_conf($node, 'pg_outbox.attempt_retention' => '0'), 'attempt_retention = 0 reloaded');
$recv->add_rule(path => '/hooks/flaky', status => 503, times => 1);
my $off = sql($node, q{SELECT outbox.enqueue('flaky', '{"n": 5}')});
my $noff = sql($node, q{SELECT outbox.enqueue('feed', '{"n": 6}')});
ok(wait_sql($node, "SELECT bool_and(status = 'sent') FROM (SELECT (outbox.message(i)).status FROM unnest(ARRAY[$off, $noff]) i) s"),
	'with the log off, an HTTP message (after a 503) and a NOTIFY message are delivered');
is(scalar(grep { $_->{headers}{'webhook-id'} eq "$W$off" } @{ $recv->requests(path => '/hooks/flaky') }), 2,
	'... the HTTP one in two requests');
is(sql($node, "SELECT count(*) FROM outbox.attempts WHERE message_id IN ($off, $noff)"), '0',
	'... and none of their attempts is logged');
is(sql($node, "SELECT attempts || '/' || attempts_logged FROM outbox.message($off)"), '2/0',
	'outbox.message() says 2 attempts, none logged');

# ---------------------------------------------------------------------------
# 5. Retention drops whole partitions. A partition for two days ago is made here as
#    the worker would have made it then, with 300 attempts; 200 more, a day and a half
#    old, are in the default partition.
ok(reload_conf($node, 'pg_outbox.attempt_retention' => '3d'), 'attempt_retention = 3d reloaded');
sql($node, q{
	DO $$
	BEGIN
	  EXECUTE format('CREATE TABLE outbox.attempts_two_days_ago PARTITION OF outbox.attempts FOR VALUES FROM (%L) TO (%L)',
	                 now() - interval '2 days 1 hour', now() - interval '2 days' + interval '1 hour');
	END $$;
	INSERT INTO outbox.attempts (attempted_at, endpoint, message_id, attempt, http_status, duration_ms)
	SELECT now() - interval '2 days', 'old', 800000000 + g, 1, 200, 1 FROM generate_series(1, 300) g;
	INSERT INTO outbox.attempts (attempted_at, endpoint, message_id, attempt, http_status, duration_ms)
	SELECT now() - interval '36 hours', 'old', 810000000 + g, 1, 200, 1 FROM generate_series(1, 200) g;});
my $old = sub {
	sql($node, q{SELECT count(*) FILTER (WHERE tableoid::regclass::text = 'outbox.attempts_two_days_ago') || '/'
	                    || count(*) FILTER (WHERE tableoid = 'outbox.attempts_default'::regclass)
	               FROM outbox.attempts WHERE endpoint = 'old'});
};
is($old->(), '300/200', '300 attempts two days old in their partition, 200 of 36 hours in the default one');
# A delivery shows a housekeeping round has run since (it runs every second).
my $marker = sql($node, q{SELECT outbox.enqueue('flaky', '{"n": 7}')});
ok(wait_sql($node, "SELECT attempts_logged = 1 FROM outbox.message($marker)"), 'a delivery is logged again');
sleep 2;
is($old->(), '300/200', 'attempt_retention 3d keeps them all');

ok(reload_conf($node, 'pg_outbox.attempt_retention' => '1d'), 'attempt_retention = 1d reloaded');
my @samples;
ok( wait_until(
		sub {
			my $n = $old->();
			push @samples, $n if !@samples || $samples[-1] ne $n;
			return $n eq '0/0';
		},
		30, 'the expired attempts removed'),
	'attempt_retention 1d: the worker removes every expired attempt');
is_deeply([ grep { !m{^(300/200|0/0)$} } @samples ], [],
	'every count seen is 300/200 or 0/0: the partition went whole, with the default partition\'s rows, in one round');
is(sql($node, q{SELECT to_regclass('outbox.attempts_two_days_ago') IS NULL}), 't', 'the expired partition was dropped');
is(sql($node, "SELECT count(*) FROM outbox.attempts WHERE message_id IN ($id, $timed_out, $hid, $nid, $marker)"), '9',
	'the recent attempts stay');
# The current partition (a day wide, for the longer retention) keeps its rows until its
# end; the worker's partitions after it are 6 hours wide, and cover at least three of
# those ahead of now. (From midnight to 6 a.m. UTC the day's partition alone covers that.)
is(sql($node, q{SELECT coalesce(string_agg(DISTINCT (p.to_at - p.from_at)::text, ','), 'none needed yet') || ' / '
                       || (SELECT max(a.to_at) >= now() + interval '18 hours' FROM outbox._partitions('outbox.attempts') a)
                  FROM outbox._partitions('outbox.attempts') p
                 WHERE p.from_at >= (SELECT c.to_at FROM outbox._partitions('outbox.attempts') c
                                      WHERE now() >= c.from_at AND now() < c.to_at)}),
	(sql($node, q{SELECT c.to_at < now() + interval '18 hours' FROM outbox._partitions('outbox.attempts') c
	               WHERE now() >= c.from_at AND now() < c.to_at}) eq 't' ? '06:00:00' : 'none needed yet') . ' / true',
	'the worker\'s partitions ahead are there, 6 hours wide for the shorter retention');

# The history's partitions are the history's: the attempt log's did not disturb them.
cmp_ok(sql($node, q{SELECT count(*) FROM outbox._history_partitions() WHERE to_at > now()}), '>', 0,
	'the history has its own partitions');
is(sql($node, q{SELECT count(*) FROM outbox._history_partitions() p
          WHERE p.partition::text NOT LIKE 'outbox.history\_%'}), '0', '... named for it');

$recv->stop;
$node->stop;
done_testing();
