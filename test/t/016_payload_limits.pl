#!/usr/bin/perl
# Memory bounded in bytes (docs/delivery.md, "Payload limits"):
#   1. outbox.enqueue refuses a payload over pg_outbox.max_payload_size with SQLSTATE
#      54000 and inserts nothing;
#   2. 20 rows of 50 MB written by plain INSERTs among 1,000 small messages: each is
#      dead-lettered PAYLOAD_TOO_LARGE without being read or sent, every small one is
#      delivered, the server never restarts (pg_postmaster_start_time unchanged), the
#      worker never restarts and never holds one of them in memory;
#   3. pg_outbox.max_inflight_bytes bounds what the worker holds: with a 1 MB budget,
#      payloads of 4 MB go out one at a time (a claim takes one when the budget is
#      spent), and all of them arrive.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_outbox_node('payload', 'pg_outbox.backoff_base' => '100ms');
my $recv = start_receiver();
sql($node, 'CREATE EXTENSION pg_outbox');
create_endpoint($node, 'p', $recv->url('/hooks/p'));
my $started = sql($node, 'SELECT pg_postmaster_start_time()');
my $pid = worker_pid($node);

# ---------------------------------------------------------------------------
# 1. enqueue refuses an oversized payload.
my ($rc, $out, $err) = $node->psql('postgres',
	q{SELECT outbox.enqueue('p', jsonb_build_object('blob', repeat('x', 2 * 1024 * 1024)))},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/ERROR:  54000: payload of \d+ bytes exceeds pg_outbox.max_payload_size \(1048576 bytes\)/,
	'enqueue: a 2 MB payload is refused with 54000, naming the limit');
is(sql($node, 'SELECT count(*) FROM outbox.messages'), '0', '... and nothing was inserted');

# ---------------------------------------------------------------------------
# 2. 20 rows of 50 MB among 1,000 small ones.
sql($node, q{SELECT outbox.pause_endpoint('p')});
my @big;
for my $i (1 .. 20)
{
	sql($node, q{SELECT outbox.enqueue('p', jsonb_build_object('n', g)) FROM generate_series(1, 50) g});
	push @big, sql($node, qq{INSERT INTO outbox.messages (endpoint, payload)
	                  VALUES ('p', jsonb_build_object('big', $i, 'blob', repeat(md5('$i'), 50 * 1024 * 1024 / 32)))
	                  RETURNING id});
}
is(sql($node, 'SELECT count(*) FROM outbox.messages WHERE outbox._payload_size(payload) > 50 * 1024 * 1024'), '20',
	'20 payloads of over 50 MB are queued among 1,000 small ones');
sql($node, q{SELECT outbox.resume_endpoint('p')});
ok(wait_until(sub { scalar(keys %{ $recv->answered_2xx('/hooks/p') }) >= 1000 }, 120),
	'every small message is delivered');
ok(wait_sql($node, q{SELECT count(*) = 20 FROM dlq.dead_letters WHERE reason_code = 'PAYLOAD_TOO_LARGE'}),
	'the 20 large ones are dead-lettered PAYLOAD_TOO_LARGE');
is(sql($node, 'SELECT count(*) FROM dlq.dead_letters WHERE message_id IN (' . join(',', @big) . q{)
          AND reason_code = 'PAYLOAD_TOO_LARGE' AND attempts = 0
          AND error_message ~ '^payload of \d+ bytes exceeds pg_outbox.max_payload_size'}),
	'20', '... each with no attempt and the size in its error');
my @requests = @{ $recv->requests(path => '/hooks/p') };
is(scalar(grep { length($_->{body}) > 1024 * 1024 } @requests), 0, 'none of them was sent');
is(scalar(@requests), 1000, 'exactly 1,000 requests: one per small message');
is(sql($node, 'SELECT count(*) FROM outbox.messages'), '0', 'the queue is empty');
is(sql($node, 'SELECT pg_postmaster_start_time()'), $started, 'the server never restarted');
is(worker_pid($node), $pid, 'the worker never restarted');
# The worker never reads a large payload: it measures it from its header and moves the
# row to the DLQ inside PostgreSQL.  Peak RSS counts the shared buffers it touched too.
my ($hwm_kb) = slurp_file("/proc/$pid/status") =~ /^VmHWM:\s+(\d+) kB/m;
my $shared_kb = sql($node, q{SELECT setting::bigint * 8 FROM pg_settings WHERE name = 'shared_buffers'});
note("worker peak RSS: $hwm_kb kB (shared_buffers: $shared_kb kB)");
cmp_ok($hwm_kb, '<', $shared_kb + 32 * 1024,
	'the worker\'s peak memory stayed below shared_buffers + 32 MB: not one large payload was held');

# ---------------------------------------------------------------------------
# 3. The byte budget: 4 MB payloads, 1 MB of budget, one at a time.
ok(reload_conf($node, 'pg_outbox.max_payload_size' => '16MB', 'pg_outbox.max_inflight_bytes' => '1MB'),
	'max_payload_size 16MB, max_inflight_bytes 1MB (reloaded)');
$recv->add_rule(path => '/hooks/p', delay_ms => 300);
sql($node, q{SELECT outbox.pause_endpoint('p')});
my @four = split /\n/, sql($node, q{SELECT outbox.enqueue('p', jsonb_build_object('four', g, 'blob', repeat(md5(g::text), 4 * 1024 * 1024 / 32)))
                              FROM generate_series(1, 4) g});
my $before = scalar @{ $recv->requests(path => '/hooks/p') };
sql($node, q{SELECT outbox.resume_endpoint('p')});
ok(wait_until(sub { @{ $recv->requests(path => '/hooks/p') } >= $before + 4 }, 60), 'the four 4 MB payloads arrive');
ok(wait_sql($node, 'SELECT count(*) = 4 FROM outbox.history WHERE id IN (' . join(',', @four) . ')'), '... and are sent');
my @big4 = sort { $a->{time} <=> $b->{time} } grep { length($_->{body}) > 1024 * 1024 } @{ $recv->requests(path => '/hooks/p') };
is(scalar @big4, 4, 'four large requests, one per message');
my $overlaps = grep { $big4[$_]{time} < $big4[ $_ - 1 ]{answered_at} } 1 .. $#big4;
is($overlaps, 0, '... each sent only after the one before it was answered: the budget held one at a time');

$node->stop;
$recv->stop;
done_testing();
