# Ordered delivery (docs/delivery.md, "Ordering"): on an endpoint created with
# ordered => true, messages of one ordering_key reach the receiver strictly in id
# order, one at a time; the next waits while the head retries and goes on once the
# head is sent or dead; other keys (and messages without a key) flow in parallel.
# An unordered endpoint ignores ordering keys.
#
# A delivered message leaves the queue (outbox.messages) for outbox.history in the
# transaction that records its delivery (pg_outbox.sent_retention keeps its default of
# a day here): "sent" is a history row, whose attempts and sent_at are the delivery's.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use Encode ();
use JSON::PP;
use List::Util qw(min);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

my $KEYS        = 50;    # ordering keys of the big run
my $PER_KEY     = 40;    # messages per key
my $FAST_KEYS   = 50;    # keys of the throughput runs
my $FAST_PER    = 20;    # messages per key in the throughput runs
my $DELAY_MS    = 200;   # the receiver's answer time in the throughput runs: long enough that
                         # "in flight together" is seen in windows a loaded machine keeps
my $KEYLESS     = 40;    # messages without a key on the ordered throughput endpoint

my $node = new_outbox_node(
	'ordering',
	'pg_outbox.backoff_base'      => '50ms',
	'pg_outbox.backoff_max'       => '300ms',
	'pg_outbox.breaker_threshold' => '100000',    # keep the breaker out of the way
	'pg_outbox.max_concurrency'   => '64');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');

my $recv = start_receiver();
my $json = JSON::PP->new->utf8;

# Ordered endpoint, 20 % of first attempts answered 503.
$recv->add_rule(path => '/hooks/ord', status => 503, fail_ratio => 0.2, seed => 7);
# Ordered endpoint whose head retries twice and then dies (400).
$recv->add_rule(path => '/hooks/dead', status => 503, times => 2);
$recv->add_rule(path => '/hooks/dead', status => 400, times => 1);
# Throughput runs: every request takes DELAY_MS to answer.
$recv->add_rule(path => '/hooks/ofast', status => 200, delay_ms => $DELAY_MS);
$recv->add_rule(path => '/hooks/ufast', status => 200, delay_ms => $DELAY_MS);

$node->safe_psql(
	'postgres', sprintf(
		q{SELECT outbox.create_endpoint('ord', url => '%s', ordered => true, max_attempts => 20);
		  SELECT outbox.create_endpoint('odead', url => '%s', ordered => true, max_attempts => 20);
		  SELECT outbox.create_endpoint('ofast', url => '%s', ordered => true);
		  SELECT outbox.create_endpoint('ufast', url => '%s', ordered => false);},
		$recv->url('/hooks/ord'), $recv->url('/hooks/dead'),
		$recv->url('/hooks/ofast'), $recv->url('/hooks/ufast')));

is( $node->safe_psql('postgres',
		q{SELECT string_agg(name || '=' || ordered, ',' ORDER BY name) FROM outbox.endpoints}),
	'odead=true,ofast=true,ord=true,ufast=false',
	'endpoints created with the intended ordered flags');

# Seconds from the first enqueue to the last sent, measured by the database (called
# once the endpoint is drained: every message is in the history).
sub drain_seconds
{
	my ($endpoint) = @_;
	return $node->safe_psql('postgres',
		"SELECT round(extract(epoch FROM max(sent_at) - min(created_at))::numeric, 3)
		   FROM outbox.history WHERE endpoint = '$endpoint'");
}

# Where each message of an endpoint stands (pending, in_flight, sent, dead) with its
# attempts, counted: for diagnostics.
sub status_counts
{
	my ($endpoint) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT s.status, s.attempts, count(*)
		  FROM (SELECT id FROM outbox.messages WHERE endpoint = '$endpoint'
		        UNION SELECT id FROM outbox.history WHERE endpoint = '$endpoint'
		        UNION SELECT message_id FROM dlq.dead_letters WHERE endpoint = '$endpoint') i
		 CROSS JOIN LATERAL outbox.message(i.id) s
		 GROUP BY 1, 2 ORDER BY 1, 2});
}

# Enqueue $per_key messages for each of $keys keys in one transaction (so ids follow
# the loop order): interleaved (seq 0 of every key, then seq 1 of every key, ...) or
# grouped (all of k0, then all of k1, ...: consecutive ids share a key); then
# $keyless messages without an ordering key.
sub enqueue_keys
{
	my ($endpoint, $keys, $per_key, %opt) = @_;
	my $keyless = $opt{keyless} // 0;
	my ($outer, $inner) =
	  $opt{grouped}
	  ? ("k IN 0 .. $keys - 1",    "s IN 0 .. $per_key - 1")
	  : ("s IN 0 .. $per_key - 1", "k IN 0 .. $keys - 1");
	$node->safe_psql(
		'postgres', qq{
		DO \$\$
		DECLARE k int; s int;
		BEGIN
		  FOR $outer LOOP
		    FOR $inner LOOP
		      PERFORM outbox.enqueue('$endpoint',
		                jsonb_build_object('key', 'k' || k, 'seq', s),
		                event_type => 'test.ordered', ordering_key => 'k' || k);
		    END LOOP;
		  END LOOP;
		  FOR s IN 0 .. $keyless - 1 LOOP
		    PERFORM outbox.enqueue('$endpoint', jsonb_build_object('key', NULL, 'seq', s),
		                           event_type => 'test.keyless');
		  END LOOP;
		END
		\$\$});
}

# Requests of one path, with the payload decoded: [ {key, seq, time, response, attempt} ].
sub receipts
{
	my ($path) = @_;
	my @out;
	for my $r (@{ $recv->requests(path => $path) })
	{
		my $p = $json->decode(Encode::encode('UTF-8', $r->{body}));
		push @out,
		  {
			key      => $p->{key},
			seq      => $p->{seq},
			time     => $r->{time},
			rseq     => $r->{seq},
			response => $r->{response},
			attempt  => $r->{headers}{'outbox-attempt'},
		  };
	}
	return [ sort { $a->{rseq} <=> $b->{rseq} } @out ];
}

# Largest number of distinct keys with a request open at the same moment, a
# request being open from its receipt until DELAY_MS later (the receiver's delay).
sub max_keys_in_flight
{
	my ($rs, $delay_s) = @_;
	my @sorted = sort { $a->{time} <=> $b->{time} } grep { defined $_->{key} } @$rs;
	my $best = 0;
	my $lo = 0;
	for my $i (0 .. $#sorted)
	{
		my $t = $sorted[$i]{time};
		$lo++ while $sorted[$lo]{time} + $delay_s <= $t;
		my %keys = map { $sorted[$_]{key} => 1 } $lo .. $i;
		$best = keys %keys if keys %keys > $best;
	}
	return $best;
}

# Per key: receipt times in receipt order -> smallest gap between two consecutive
# requests of the same key, and how many consecutive pairs overlapped (gap < delay).
sub same_key_gaps
{
	my ($rs, $delay_s) = @_;
	my %by_key;
	push @{ $by_key{ $_->{key} // '<none>' } }, $_->{time} for @$rs;
	my ($min_gap, $overlaps, %overlapping_keys) = (1e9, 0);
	for my $k (keys %by_key)
	{
		my @t = sort { $a <=> $b } @{ $by_key{$k} };
		for my $i (1 .. $#t)
		{
			my $gap = $t[$i] - $t[ $i - 1 ];
			$min_gap = $gap if $gap < $min_gap;
			if ($gap < $delay_s * 0.9)
			{
				$overlaps++;
				$overlapping_keys{$k} = 1;
			}
		}
	}
	return ($min_gap, $overlaps, scalar keys %overlapping_keys);
}

###############################################################################
# 1. 50 keys x 40 messages with 20 % transient failures, plus a key whose head dies.
###############################################################################
my $total = $KEYS * $PER_KEY;
my $t0 = Time::HiRes::time();
enqueue_keys('ord', $KEYS, $PER_KEY);
$node->safe_psql(
	'postgres', q{
	SELECT outbox.enqueue('odead', jsonb_build_object('key', 'dead', 'seq', s),
	                      event_type => 'test.dead', ordering_key => 'dead')
	  FROM generate_series(0, 9) s ORDER BY s});
# The ids of one key follow seq (the order the tests below compare against).  The
# worker is already delivering: a message is in the queue, the history or the DLQ
# (one snapshot sees each exactly once).
is( $node->safe_psql('postgres', q{
		SELECT count(*) || '/' || count(*) FILTER (WHERE prev IS NOT NULL AND seq <> prev + 1) FROM (
		  SELECT (payload->>'seq')::int AS seq,
		         lag((payload->>'seq')::int) OVER (PARTITION BY endpoint, ordering_key ORDER BY id) AS prev
		    FROM (SELECT id, endpoint, ordering_key, payload FROM outbox.messages
		          UNION ALL SELECT id, endpoint, ordering_key, payload FROM outbox.history
		          UNION ALL SELECT message_id, endpoint, ordering_key, payload FROM dlq.dead_letters) m
		   WHERE endpoint IN ('ord', 'odead')) x}),
	($total + 10) . '/0', 'within each key, ids follow seq');

ok(wait_until(sub { count_sent($node, 'ord') == $total }, undef, 'all ordered messages sent'),
	"all $total messages of the ordered endpoint are sent")
  or diag status_counts('ord');
my $wall_ord = Time::HiRes::time() - $t0;
ok(wait_until(sub { count_sent($node, 'odead') == 9 }, undef, 'dead key drained'),
	'the 9 messages behind the dead head are sent');

my $rs = receipts('/hooks/ord');
my %by_key;
push @{ $by_key{ $_->{key} } }, $_ for @$rs;
is(scalar(keys %by_key), $KEYS, "receipts for all $KEYS keys");

# Violations of the ordering contract in the receipts of one endpoint, per key:
# (a) the successful (200) receipts are not exactly seq 0..n-1 in receipt order;
# (b) counting failed attempts too, a receipt is not the key's current head (seq N+1
#     before seq N succeeded, or a message coming back after its success).
sub order_violations
{
	my ($by_key, $per_key) = @_;
	my (@bad_success, @bad_order);
	for my $k (sort keys %$by_key)
	{
		my @ok = map { $_->{seq} } grep { $_->{response} eq '200' } @{ $by_key->{$k} };
		push @bad_success, "$k: " . join(',', @ok)
		  if join(',', @ok) ne join(',', 0 .. $per_key - 1);
		my $head = 0;
		for my $r (@{ $by_key->{$k} })
		{
			if ($r->{seq} != $head)
			{
				push @bad_order,
				  "$k: receipt #$r->{rseq} seq $r->{seq} (response $r->{response}) while the head was $head";
				last;
			}
			$head++ if $r->{response} eq '200';
		}
	}
	return (\@bad_success, \@bad_order);
}

my ($bad_success, $bad_order) = order_violations(\%by_key, $PER_KEY);
is(scalar @$bad_success, 0,
	'per key, successful receipts are exactly seq 0..39 in receipt order')
  or diag join "\n", @$bad_success[ 0 .. min(4, $#$bad_success) ];
is(scalar @$bad_order, 0, 'per key, no message is sent before its predecessor succeeded')
  or diag join "\n", @$bad_order[ 0 .. min(4, $#$bad_order) ];

# The failure path was really exercised, and each failure was retried.
my $failed = grep { $_->{response} eq '503' } @$rs;
cmp_ok($failed, '>', $total * 0.1, "transient 503s were injected ($failed of $total first attempts)");
is(scalar(@$rs), $total + $failed, 'one extra attempt per 503, nothing delivered twice');
is( $node->safe_psql('postgres',
		"SELECT count(*) FILTER (WHERE attempts = 2) || '/' || count(*) FILTER (WHERE attempts > 2)
		   FROM outbox.history WHERE endpoint = 'ord'"),
	"$failed/0", 'the database counted the same attempts');

# The database agrees: sent_at strictly increases along each key's ids (one
# settle transaction never sent two messages of a key).
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM (
		  SELECT sent_at, lag(sent_at) OVER (PARTITION BY ordering_key ORDER BY id) AS prev
		    FROM outbox.history WHERE endpoint = 'ord') x
		 WHERE prev IS NOT NULL AND sent_at <= prev}),
	'0', 'per key, sent_at strictly increases with id');

my $drain_ord = drain_seconds('ord');
note sprintf('ordered, %d keys x %d msgs, 20%% first-attempt 503s (backoff 50..300 ms): '
	  . 'drain %.2f s in the database (%.0f msgs/s), %.2f s wall, %d requests',
	$KEYS, $PER_KEY, $drain_ord, $total / ($drain_ord || 1e-9), $wall_ord, scalar @$rs);

# The same load on an UNORDERED endpoint: the same checks do find violations there
# (a retried message arrives after its successors), so the checks above have teeth,
# and the unordered endpoint is the throughput reference under the same failures.
$recv->add_rule(path => '/hooks/uord', status => 503, fail_ratio => 0.2, seed => 7);
$node->safe_psql('postgres',
	sprintf(q{SELECT outbox.create_endpoint('uord', url => '%s', max_attempts => 20)},
		$recv->url('/hooks/uord')));
enqueue_keys('uord', $KEYS, $PER_KEY);
ok(wait_until(sub { count_sent($node, 'uord') == $total }, undef, 'uord drained'),
	"all $total messages of the unordered endpoint are sent");
my $drain_uord = drain_seconds('uord');
my %u_by_key;
push @{ $u_by_key{ $_->{key} } }, $_ for @{ receipts('/hooks/uord') };
my ($u_bad_success, $u_bad_order) = order_violations(\%u_by_key, $PER_KEY);
cmp_ok(scalar @$u_bad_order, '>', 0,
	'unordered endpoint with ordering keys: keys are NOT held in order ('
	  . scalar(@$u_bad_order) . " of $KEYS keys out of order)");
note sprintf('same load (%d keys x %d msgs, 20%% first-attempt 503s): ordered %.2f s = %.0f msgs/s, '
	  . 'unordered %.2f s = %.0f msgs/s',
	$KEYS, $PER_KEY, $drain_ord, $total / ($drain_ord || 1e-9), $drain_uord,
	$total / ($drain_uord || 1e-9));

# The dead head: two 503s, then a 400 -> DLQ; the rest of its key goes on in order.
my @dead = @{ receipts('/hooks/dead') };
is( join(' ', map { "$_->{seq}:$_->{response}" } @dead),
	'0:503 0:503 0:400 ' . join(' ', map { "$_:200" } 1 .. 9),
	'dead key: the head is retried alone, dies, then seq 1..9 follow in order');
is( $node->safe_psql('postgres', q{
		SELECT string_agg(concat_ws('|', endpoint, ordering_key, payload->>'seq', reason_code,
		                            http_status, attempts), ',')
		  FROM dlq.dead_letters}),
	'odead|dead|0|HTTP_CLIENT_ERROR|400|3',
	'the only dead letter is the head of key "dead" after 3 attempts');
is( $node->safe_psql('postgres', q{
		SELECT (SELECT count(*) FROM outbox.messages WHERE endpoint = 'odead' AND payload->>'seq' = '0')
		     + (SELECT count(*) FROM outbox.history WHERE endpoint = 'odead' AND payload->>'seq' = '0')}),
	'0', 'the dead head left the outbox (neither queued nor in the history)');
is( $node->safe_psql('postgres', q{
		SELECT s.status || '|' || s.attempts FROM dlq.dead_letters d, outbox.message(d.message_id) s
		 WHERE d.endpoint = 'odead'}),
	'dead|3', 'outbox.message() of the dead head: dead, 3 attempts');

###############################################################################
# 2. Throughput and concurrency: ordered vs unordered, every answer takes DELAY_MS.
#    Enqueued grouped by key, so consecutive ids share a key: an ordered endpoint
#    must still send them one at a time, an unordered one sends them together.
###############################################################################
my $fast_total = $FAST_KEYS * $FAST_PER;
my $delay_s = $DELAY_MS / 1000;

enqueue_keys('ofast', $FAST_KEYS, $FAST_PER, grouped => 1, keyless => $KEYLESS);
ok( wait_until(sub { count_sent($node, 'ofast') == $fast_total + $KEYLESS }, undef, 'ofast drained'),
	'ordered throughput run drained');
my $drain_ofast = drain_seconds('ofast');

enqueue_keys('ufast', $FAST_KEYS, $FAST_PER, grouped => 1);
ok(wait_until(sub { count_sent($node, 'ufast') == $fast_total }, undef, 'ufast drained'),
	'unordered throughput run drained');
my $drain_ufast = drain_seconds('ufast');

my $ofast = receipts('/hooks/ofast');
my $ufast = receipts('/hooks/ufast');
is(scalar(@$ofast), $fast_total + $KEYLESS, 'ordered run: one request per message');
is(scalar(@$ufast), $fast_total, 'unordered run: one request per message');

# Ordered: one at a time per key, so two requests of a key are at least the
# receiver's answer time apart...
my @ofast_keyed = grep { defined $_->{key} } @$ofast;
my ($o_min_gap) = same_key_gaps(\@ofast_keyed, $delay_s);
cmp_ok($o_min_gap, '>=', $delay_s * 0.95,
	sprintf('ordered: requests of one key never overlap (smallest same-key gap %.1f ms)', $o_min_gap * 1000));
# ... in order ...
my @o_bad;
my %o_by_key;
push @{ $o_by_key{ $_->{key} } }, $_->{seq} for @ofast_keyed;
for my $k (keys %o_by_key)
{
	push @o_bad, $k if join(',', @{ $o_by_key{$k} }) ne join(',', 0 .. $FAST_PER - 1);
}
is(scalar @o_bad, 0, 'ordered: every key received seq 0..19 in order');
# ... while many keys are in flight together.
my $o_keys_in_flight = max_keys_in_flight($ofast, $delay_s);
cmp_ok($o_keys_in_flight, '>=', 10,
	"ordered: up to $o_keys_in_flight different keys were in flight at the same moment");
my $serial_s = ($fast_total + $KEYLESS) * $delay_s;
cmp_ok($drain_ofast, '<', $serial_s / 4,
	sprintf('ordered: drain %.2f s, far below the %.1f s a serial delivery would take',
		$drain_ofast, $serial_s));
# Messages without a key on an ordered endpoint flow in parallel.
my @keyless = grep { !defined $_->{key} } @$ofast;
my (undef, $kl_overlaps) = same_key_gaps(\@keyless, $delay_s);
cmp_ok($kl_overlaps, '>', 0,
	"ordered endpoint: messages without a key overlap ($kl_overlaps overlapping pairs)");

# Unordered: ordering keys mean nothing, messages of one key overlap.
my (undef, $u_overlaps, $u_keys) = same_key_gaps($ufast, $delay_s);
cmp_ok($u_keys, '>=', $FAST_KEYS / 2,
	"unordered: requests of one key overlap ($u_overlaps pairs, $u_keys keys)");
my $u_max_open = 0;
{
	# requests open at one moment, any key
	my @t = sort { $a <=> $b } map { $_->{time} } @$ufast;
	my $lo = 0;
	for my $i (0 .. $#t)
	{
		$lo++ while $t[$lo] + $delay_s <= $t[$i];
		$u_max_open = $i - $lo + 1 if $i - $lo + 1 > $u_max_open;
	}
}
cmp_ok($u_max_open, '>=', 16, "unordered: many requests in flight together ($u_max_open)");

note sprintf('throughput with a %d ms receiver, %d keys x %d msgs: ordered %.2f s (%.0f msgs/s, '
	  . 'up to %d keys in flight), unordered %.2f s (%.0f msgs/s, up to %d requests in flight); '
	  . 'serial would be %.1f s',
	$DELAY_MS, $FAST_KEYS, $FAST_PER, $drain_ofast, ($fast_total + $KEYLESS) / ($drain_ofast || 1e-9),
	$o_keys_in_flight, $drain_ufast, $fast_total / ($drain_ufast || 1e-9), $u_max_open, $serial_s);

is($node->safe_psql('postgres', q{SELECT count(*) FROM dlq.dead_letters WHERE endpoint <> 'odead'}),
	'0', 'no other dead letters');
is( $node->safe_psql('postgres', q{
		SELECT count(*) || '/' || count(DISTINCT id) || '/'
		       || (SELECT count(*) FROM outbox.messages) FROM outbox.history}),
	(2 * $total + 9 + $fast_total + $KEYLESS + $fast_total) . '/'
	  . (2 * $total + 9 + $fast_total + $KEYLESS + $fast_total) . '/0',
	'every message is in the history exactly once, the queue is empty');
unlike(slurp_file($node->logfile), qr/circuit for endpoint/, 'the breaker never opened');

$recv->stop;
$node->stop;
done_testing();
