#!/usr/bin/perl
# Pull endpoints (docs/delivery.md, Pull endpoints), with real reader processes:
#  - 4 readers take 10,000 messages at once: each message is read exactly once (no id
#    twice, the acks total 10,000), and the worker pushes none of them;
#  - a reader killed (pg_terminate_backend) with messages in hand loses none: they come
#    back after their visibility, on attempt 2; one killed inside its transaction never
#    took them;
#  - nack with retries ends in the DLQ after max_attempts with the consumer's error
#    (RETRY_EXHAUSTED); nack permanent ends there at once (REJECTED_BY_CONSUMER);
#  - an ordered pull endpoint yields one head per key, in commit order;
#  - read(wait => '5s') returns well under a second after another session commits an
#    enqueue (woken at commit, not by polling);
#  - a restart and a crash (immediate stop) in the middle of reading lose nothing;
#  - examples/pull-consumer/ runs as its least-privileged role.
use strict;
use warnings;

use Cwd qw(abs_path);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use IPC::Run ();
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

my $node = new_outbox_node(
	'pull',
	'pg_outbox.backoff_base' => '20ms',
	'pg_outbox.backoff_max'  => '100ms');
sql($node, 'CREATE EXTENSION pg_outbox');
sql($node, q{SELECT outbox.create_endpoint('work', pull => true)});
sql($node, 'CREATE TABLE seen (id bigint, reader int)');
sql($node, 'CREATE TABLE acked (reader int, n bigint)');

# A reader process: psql running a loop that reads up to 50 messages (committed), notes
# them, acknowledges them (committed), until the endpoint's queue is empty.
sub start_reader
{
	my ($reader, $endpoint, $visibility) = @_;
	my $loop = <<'SQL';
DO $$
DECLARE
    ids bigint[];
BEGIN
    LOOP
        SELECT array_agg(r.id) INTO ids FROM outbox.read('ENDPOINT', max => 50, visibility => 'VISIBILITY', wait => '300ms') r;
        COMMIT;
        IF ids IS NULL THEN
            EXIT WHEN NOT EXISTS (SELECT FROM outbox.messages m WHERE m.endpoint = 'ENDPOINT');
            CONTINUE;
        END IF;
        INSERT INTO seen (id, reader) SELECT unnest(ids), READER;
        INSERT INTO acked (reader, n) VALUES (READER, outbox.ack('ENDPOINT', ids));
        COMMIT;
    END LOOP;
END
$$;
SQL
	$loop =~ s/ENDPOINT/$endpoint/g;
	$loop =~ s/VISIBILITY/$visibility/g;
	$loop =~ s/READER/$reader/g;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ $node->installed_command('psql'), '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c', $loop ],
		'<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(300));
	return { h => $h, out => \$out, err => \$err };
}

sub finish_reader
{
	my ($r) = @_;
	my $ok = eval { $r->{h}->finish; 1 };
	return $ok && $r->{h}->result == 0 ? '' : (${ $r->{err} } || $@ || 'failed');
}

# Reads and acknowledges everything of the endpoint until its queue is empty (one
# session); returns how many it acknowledged.
sub drain
{
	my ($endpoint) = @_;
	sql($node, 'TRUNCATE seen, acked');
	my $r = start_reader(9, $endpoint, '30s');
	my $err = finish_reader($r);
	diag("drain: $err") if $err ne '';
	return sql($node, 'SELECT coalesce(sum(n), 0) FROM acked');
}

###############################################################################
# 1. Four readers, 10,000 messages: each read exactly once.
###############################################################################
sql($node, q{SELECT outbox.enqueue('work', jsonb_build_object('n', g)) FROM generate_series(1, 10000) g});
my $t0 = time;
my @readers = map { start_reader($_, 'work', '60s') } 1 .. 4;
my @errors = grep { $_ ne '' } map { finish_reader($_) } @readers;
note(sprintf('4 readers took 10,000 messages in %.1f s', time - $t0));
is(join("\n", @errors), '', 'the four readers ran without error');
is(sql($node, 'SELECT sum(n) FROM acked'), '10000', 'the acks total 10,000');
is(sql($node, 'SELECT count(*) || \' \' || count(DISTINCT id) FROM seen'), '10000 10000',
	'10,000 messages read, no id twice');
is(sql($node, 'SELECT count(DISTINCT reader) FROM seen'), '4', 'every reader took some');
note('per reader: ' . sql($node, q{SELECT string_agg(reader || ':' || c, ' ' ORDER BY reader)
	FROM (SELECT reader, count(*) c FROM seen GROUP BY reader) s}));
is(sql($node, q{SELECT count(*) || ' ' || count(*) FILTER (WHERE attempts = 1 AND last_http_status IS NULL)
	FROM outbox.history WHERE endpoint = 'work'}), '10000 10000',
	'all 10,000 are in the history, on their first attempt, with no HTTP status');
is(sql($node, q{SELECT count(*) FROM outbox._delivery_counters() WHERE endpoint = 'work'}), '0',
	'the worker counted none of them as its own deliveries');
is(sql($node, q{SELECT count(*) FROM outbox.messages}), '0', 'the queue is empty');

###############################################################################
# 2. A reader killed with messages in hand loses none of them.
###############################################################################
sql($node, q{SELECT outbox.enqueue('work', jsonb_build_object('k', g)) FROM generate_series(1, 20) g});
my $victim = $node->background_psql('postgres', on_error_stop => 0);
my $vpid = $victim->query_safe('SELECT pg_backend_pid()');
is($victim->query_safe(q{SELECT count(*) FROM outbox.read('work', max => 20, visibility => '3s')}), '20',
	'the victim holds 20 messages');
sql($node, "SELECT pg_terminate_backend($vpid, 30000)");
eval { $victim->quit };
is(sql($node, q{SELECT count(*) FROM outbox.read('work', max => 100)}), '0',
	'killed: its messages stay invisible until their visibility passes');
is(sql($node, q{SELECT string_agg(status, ',') FROM (SELECT DISTINCT s.status FROM outbox.messages m,
	LATERAL outbox.message(m.id) s) x}), 'in_flight', '... and count as in flight');
sleep(3.2);
is(sql($node, q{SELECT count(*) || ' ' || min(attempt) || ' ' || max(attempt)
	FROM outbox.read('work', max => 100, wait => '5s')}), '20 2 2',
	'after the visibility all 20 come back, on attempt 2');
is(sql($node, q{SELECT outbox.ack('work', array_agg(id)) FROM outbox.messages WHERE endpoint = 'work'}), '20',
	'... and are acknowledged');

# Killed inside its transaction: the read is rolled back, the messages were never taken.
sql($node, q{SELECT outbox.enqueue('work', jsonb_build_object('t', g)) FROM generate_series(1, 5) g});
$victim = $node->background_psql('postgres', on_error_stop => 0);
$vpid = $victim->query_safe('SELECT pg_backend_pid()');
$victim->query_safe('BEGIN');
is($victim->query_safe(q{SELECT count(*) FROM outbox.read('work', max => 5, visibility => '1h')}), '5',
	'a victim in a transaction holds 5');
sql($node, "SELECT pg_terminate_backend($vpid, 30000)");
eval { $victim->quit };
is(sql($node, q{SELECT count(*) || ' ' || max(attempt) FROM outbox.read('work', max => 10)}), '5 1',
	'killed before its commit: the 5 are readable at once, still on attempt 1');
sql($node, q{SELECT outbox.ack('work', array_agg(id)) FROM outbox.messages WHERE endpoint = 'work'});

###############################################################################
# 3. nack: retries then RETRY_EXHAUSTED with the consumer's error; permanent at once.
###############################################################################
sql($node, q{SELECT outbox.create_endpoint('flaky', pull => true, max_attempts => 3)});
my $flaky = sql($node, q{SELECT outbox.enqueue('flaky', '{"doc": "broken.pdf"}')});
my @attempts;
for my $try (1 .. 3)
{
	my $got = sql($node, q{SELECT id || ' ' || attempt FROM outbox.read('flaky', wait => '5s')});
	push @attempts, $got;
	sql($node, "SELECT outbox.nack('flaky', $flaky, 'parse error on try $try')");
}
is(join(',', @attempts), "$flaky 1,$flaky 2,$flaky 3", 'read three times (after the backoff), attempts 1 to 3');
is(sql($node, qq{SELECT reason_code || '|' || error_message || '|' || attempts FROM dlq.dead_letters
	WHERE message_id = $flaky}), 'RETRY_EXHAUSTED|parse error on try 3|3',
	'then dead: RETRY_EXHAUSTED with the consumer\'s last error');
my $rejected = sql($node, q{SELECT outbox.enqueue('flaky', '{"doc": "virus.exe"}')});
is(sql($node, q{SELECT id FROM outbox.read('flaky')}), $rejected, 'the next one read');
sql($node, qq{SELECT outbox.nack('flaky', $rejected, 'not a document', permanent => true)});
is(sql($node, qq{SELECT reason_code || '|' || error_message || '|' || attempts FROM dlq.dead_letters
	WHERE message_id = $rejected}), 'REJECTED_BY_CONSUMER|not a document|1',
	'nack permanent: REJECTED_BY_CONSUMER at once');
my $requeued = sql($node, qq{SELECT dlq.requeue(id) FROM dlq.dead_letters WHERE message_id = $rejected});
is(sql($node, q{SELECT id || ' ' || attempt || ' ' || (payload->>'doc') FROM outbox.read('flaky', wait => '5s')}),
	"$requeued 1 virus.exe", 'dlq.requeue puts it back for the readers, with fresh attempts');

###############################################################################
# 4. Ordered: one head per key, in commit order.
###############################################################################
sql($node, q{SELECT outbox.create_endpoint('orders', pull => true, ordered => true)});
# The first INSERT commits last: commit order differs from id order.
my $slow = $node->background_psql('postgres');
$slow->query_safe('BEGIN');
my $late = $slow->query_safe(q{SELECT outbox.enqueue('orders', '{"step": "late"}', ordering_key => 'k0')});
my $early = sql($node, q{SELECT outbox.enqueue('orders', '{"step": "early"}', ordering_key => 'k0')});
$slow->query_safe('COMMIT');
$slow->quit;
ok($late < $early, 'k0: the message committed last has the smaller id');
for my $i (1 .. 5)
{
	sql($node, qq{SELECT outbox.enqueue('orders', jsonb_build_object('step', $i), ordering_key => 'k' || k)
		FROM generate_series(1, 3) k});
}
my (%order, $twice);
for my $round (1 .. 20)
{
	my $batch = sql($node, q{SELECT string_agg(ordering_key || '=' || (payload->>'step'), ' ')
		FROM outbox.read('orders', max => 100)});
	last if $batch eq '';
	my %keys;
	for my $item (split / /, $batch)
	{
		my ($k, $step) = split /=/, $item;
		$twice = 1 if $keys{$k}++;
		push @{ $order{$k} }, $step;
	}
	sql($node, q{SELECT outbox.ack('orders', array_agg(m.id)) FROM outbox.messages m, outbox.message(m.id) s
		WHERE m.endpoint = 'orders' AND s.status = 'in_flight'});
}
ok(!$twice, 'no read returned two messages of one key');
is(join(',', @{ $order{k0} }), 'early,late', 'k0 in commit order, not id order');
is(join(' ', map { join(',', @{ $order{"k$_"} }) } 1 .. 3), '1,2,3,4,5 1,2,3,4,5 1,2,3,4,5',
	'k1..k3 each in commit order');

###############################################################################
# 5. wait: woken at the commit of an enqueue.
###############################################################################
my ($wout, $werr) = ('', '');
my $waiter = IPC::Run::start(
	[ $node->installed_command('psql'), '-XAtq', '-d', $node->connstr('postgres'), '-c',
	  q{SELECT r.id || ' ' || extract(epoch FROM clock_timestamp()) || ' ' || extract(epoch FROM now())
	      FROM outbox.read('work', wait => '5s') r} ],
	'<', \undef, '>', \$wout, '2>', \$werr, IPC::Run::timeout(60));
ok(wait_sql($node, q{SELECT EXISTS (SELECT FROM pg_stat_activity
	WHERE query LIKE '%outbox.read(''work'', wait%' AND wait_event_type = 'Extension' AND pid <> pg_backend_pid())}),
	'the reader sleeps (wait event Extension)');
sleep(0.5);
my ($id, $committed) = split /\s+/, sql($node, q{BEGIN;
	SELECT outbox.enqueue('work', '{"wake": true}');
	SELECT extract(epoch FROM clock_timestamp());
	COMMIT;});
$waiter->finish;
my ($got, $returned, $started) = split / /, $wout;
is($got, $id, 'the waiting reader got the message committed meanwhile');
my $latency = ($returned // 99) - $committed;
note(sprintf('read returned %.3f s after the enqueue (%.3f s after it started)', $latency,
	($returned // 99) - ($started // 0)));
ok($latency < 1, 'read(wait => 5s) returned well under a second after the commit');
ok(($returned // 99) - ($started // 0) < 4.5, '... not at the end of its wait');
sql($node, qq{SELECT outbox.ack('work', ARRAY[$id])});

# A rolled-back enqueue wakes nobody.
my $t_start = time;
my $rolled = $node->background_psql('postgres');
($wout, $werr) = ('', '');
$waiter = IPC::Run::start(
	[ $node->installed_command('psql'), '-XAtq', '-d', $node->connstr('postgres'), '-c',
	  q{SELECT count(*) FROM outbox.read('work', wait => '1500ms')} ],
	'<', \undef, '>', \$wout, '2>', \$werr, IPC::Run::timeout(60));
sleep(0.3);
$rolled->query_safe(q{BEGIN; SELECT outbox.enqueue('work', '{"rolled": true}'); ROLLBACK;});
$rolled->quit;
$waiter->finish;
is($wout =~ s/\s+//gr, '0', 'a rolled-back enqueue gives the reader nothing');
ok(time - $t_start >= 1.4, '... and the reader waited its full time');

# A cancel ends the wait at once (statement_timeout here).
sql($node, q{SELECT outbox.create_endpoint('idle', pull => true)});
my ($crc, $cout, $cerr) = (0, '', '');
my $c0 = time;
$crc = $node->psql('postgres', q{SET statement_timeout = '300ms'; SELECT * FROM outbox.read('idle', wait => '30s')},
	stdout => \$cout, stderr => \$cerr);
my $cancelled_after = time - $c0;
like($cerr, qr/canceling statement due to statement timeout/, 'statement_timeout cancels a waiting read');
ok($cancelled_after < 5, sprintf('... at once (%.2f s), not at the end of its 30 s wait', $cancelled_after));

###############################################################################
# 6. A restart and a crash in the middle lose nothing.
###############################################################################
for my $how ('fast', 'immediate')
{
	sql($node, q{SELECT outbox.enqueue('work', jsonb_build_object('r', g)) FROM generate_series(1, 1000) g});
	# 300 read (held for 2 s), 100 of them acknowledged, then the stop.
	my $held = sql($node, q{SELECT array_agg(id) FROM outbox.read('work', max => 300, visibility => '2s')});
	is(sql($node, qq{SELECT outbox.ack('work', ('$held'::bigint[])[1:100])}), '100', "$how: 100 acknowledged");
	$node->stop($how);
	$node->start;
	my $after = drain('work');
	is($after, '900', "$how stop: the other 900 (200 of them held before) are read and acknowledged after the start");
	is(sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'work'}), '0', "$how stop: nothing left in the queue");
	sql($node, 'TRUNCATE seen, acked');
}
is(sql($node, q{SELECT count(*) FROM outbox.history WHERE endpoint = 'work' AND payload ? 'r'}), '2000',
	'the 2,000 messages of both rounds are in the history, each once');

###############################################################################
# 7. endpoint_stats and metrics count held messages as in flight.
###############################################################################
sql($node, q{SELECT outbox.enqueue('work', '{}') FROM generate_series(1, 3)});
sql($node, q{SELECT count(*) FROM outbox.read('work', max => 2)});
is(sql($node, q{SELECT pending || ' ' || in_flight || ' ' || (oldest_pending_age IS NOT NULL)
	FROM outbox.endpoint_stats WHERE endpoint = 'work'}), '1 2 true', 'endpoint_stats: 1 pending, 2 in flight');
like(sql($node, 'SELECT outbox.metrics()'), qr/pg_outbox_messages\{endpoint="work",status="in_flight"\} 2/,
	'metrics: 2 in flight');

# max_pending: the worker counts a pull endpoint's queue, which acknowledgements shrink.
sql($node, q{SELECT outbox.create_endpoint('capped', pull => true, max_pending => 3)});
sql($node, q{SELECT outbox.enqueue('capped', '{}') FROM generate_series(1, 3)});
my ($prc, $pout, $perr) = (0, '', '');
$prc = $node->psql('postgres', q{SELECT outbox.enqueue('capped', '{}')}, stdout => \$pout, stderr => \$perr);
like($perr, qr/max_pending/, 'max_pending: a fourth message is refused');
is(sql($node, q{SELECT outbox.ack('capped', array_agg(id)) FROM outbox.read('capped', max => 3)}), '3',
	'... the three are read and acknowledged');
ok(wait_until(sub {
		return $node->psql('postgres', q{SELECT outbox.enqueue('capped', '{}')}, stdout => \$pout, stderr => \$perr) == 0;
	}, 30, 'enqueue to capped'), '... then there is room again (the worker counted the queue again)');

###############################################################################
# 8. examples/pull-consumer/: the upload flow, processed by a worker of the application.
###############################################################################
my $EXAMPLE = abs_path("$FindBin::RealBin/../../examples/pull-consumer");
my $PYTHON  = '/usr/bin/python3';
sql($node, 'CREATE ROLE uploads_app LOGIN');
sql($node, 'CREATE ROLE parser_app LOGIN');
{
	open my $fh, '<', "$EXAMPLE/setup.sql" or die "examples/pull-consumer/setup.sql: $!";
	local $/;
	my $setup = <$fh>;
	$node->safe_psql('postgres', $setup,
		extra_params => [ '-v', 'producer=uploads_app', '-v', 'consumer=parser_app' ]);
}
is( sql($node, q{SELECT has_function_privilege('parser_app',
	         'outbox.enqueue(text, jsonb, text, jsonb, text, text, timestamptz)', 'EXECUTE')
	     OR has_table_privilege('parser_app', 'outbox.messages', 'SELECT')
	     OR has_function_privilege('uploads_app', 'outbox.read(text, int, interval, interval)', 'EXECUTE')
	     OR has_table_privilege('uploads_app', 'outbox.messages', 'SELECT')}),
	'f', 'example setup: the worker cannot enqueue or read the queue; the web role cannot read');

sub run_example
{
	my ($user, @args) = @_;
	my ($out, $err) = ('', '');
	local %ENV = (%ENV, PGHOST => $node->host, PGPORT => $node->port, PGDATABASE => 'postgres',
		PGUSER => $user);
	delete $ENV{$_} for qw(PGPASSWORD PGSERVICE DATABASE_URL);
	my $ok = eval {
		IPC::Run::run([ $PYTHON, "$EXAMPLE/pull_consumer.py", @args ], '<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout(120));
		1;
	};
	return ($ok ? $? >> 8 : -1, $out, $err . ($@ // ''));
}

my ($rc, $out, $err) = run_example('uploads_app', 'upload', '--uploads', '8', '--corrupt-every', '4');
is($rc, 0, 'example: 8 uploads saved') or diag($err);
($rc, $out, $err) = run_example('uploads_app', 'work', '--idle-exit', '1');
isnt($rc, 0, 'example: the web role cannot work the queue');
like($err, qr/permission denied/, '... permission denied');
($rc, $out, $err) = run_example('parser_app', 'work', '--idle-exit', '3');
is($rc, 0, 'example: the worker ran') or diag($err);
note($out);
like($out, qr/^6 done, 6 refused$/m, 'the worker did 6 and refused the 2 corrupt files 3 times each');
is(sql($node, q{SELECT count(*) FILTER (WHERE status = 'done') || ' ' || count(*) FROM tasks}), '6 8',
	'6 tasks done (the 2 corrupt ones not)');
is( sql($node, q{SELECT string_agg(reason_code || '|' || error_message || '|' || attempts, E'\n' ORDER BY message_id)
	FROM dlq.dead_letters WHERE endpoint = 'parser'}),
	"RETRY_EXHAUSTED|cannot parse corrupt-004.pdf: not a PDF|3\nRETRY_EXHAUSTED|cannot parse corrupt-008.pdf: not a PDF|3",
	'the 2 corrupt files are in the DLQ after 3 attempts, with the worker\'s error');
is(sql($node, q{SELECT count(*) FROM outbox.history WHERE endpoint = 'parser'}), '6',
	'the 6 done are in the history');
is(sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'parser'}), '0', 'nothing left for parser');

my @bad = grep { /PANIC|terminated by signal/ } split /\n/, slurp_file($node->logfile);
ok(!@bad, 'no PANIC, no crash in the server log') or diag(join "\n", @bad);
$node->stop;
done_testing();
