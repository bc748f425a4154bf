#!/usr/bin/perl
# Per-key ordering beyond one worker's life, and for requeued dead letters (docs/delivery.md,
# "Ordering", "Requeue"):
#
#  1. "The guarantee is therefore made by the database, not by worker memory, and it
#     survives restarts": the head of a key hangs at the receiver, the worker is
#     killed with SIGKILL (the postmaster reinitialises, restart_after_crash = on),
#     and the new worker delivers the key in order: the head again, then the rest,
#     none before the head's 2xx.
#  2. "A requeued dead letter is a new message with a new id. It is ordered by that
#     new id, but it keeps the original webhook-id": a message enqueued before the
#     requeue goes out (and is answered) before the requeued one.
#  3. The next message of a key that the worker holds in memory to claim it itself: new
#     messages follow it, an operator's DELETE makes it a head in the table, and a worker
#     that stops while holding it leaves it to the next worker.
#
# Where a message stands is outbox.message(id): in the queue (pending, or in_flight
# while a claim of the worker lists it), in the history (sent) or in the DLQ (dead).
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use Encode ();
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_outbox_node(
	'ordering_restart',
	'restart_after_crash'         => 'on',      # a killed worker: the server comes back
	'pg_outbox.backoff_base'      => '50ms',
	'pg_outbox.backoff_max'       => '300ms',
	'pg_outbox.breaker_threshold' => '1000');    # keep the breaker out of the way
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $W = webhook_prefix($node);    # webhook-id = $W<id> (docs/delivery.md, Webhook id)
my $recv = start_receiver();
my $json = JSON::PP->new->utf8;

# The receiver's records of one path, in arrival order, with the payload decoded:
# [ {seq (payload), n (payload), wid, time, answered (undef: none), answered_at,
#    settled (the receiver has recorded what became of the request)} ].
sub receipts
{
	my ($path) = @_;
	my @out;
	for my $r (sort { $a->{seq} <=> $b->{seq} } @{ $recv->requests(path => $path) })
	{
		my $p = $json->decode(Encode::encode('UTF-8', $r->{body}));
		push @out,
		  {
			seq         => $p->{seq},
			n           => $p->{n},
			wid         => $r->{headers}{'webhook-id'},
			time        => $r->{time},
			answered    => $r->{answered},
			answered_at => $r->{answered_at},
			settled     => exists $r->{outcome},
		  };
	}
	return \@out;
}

# The receipts of a path whose payload names this key.
sub receipts_of_key
{
	my ($path, $key) = @_;
	my @out;
	for my $r (@{ $recv->requests(path => $path) })
	{
		my $p = $json->decode(Encode::encode('UTF-8', $r->{body}));
		next unless ($p->{key} // '') eq $key;
		push @out, { seq => $p->{seq}, wid => $r->{headers}{'webhook-id'}, time => $r->{time},
			answered => $r->{answered} };
	}
	return \@out;
}

# "seq:answered" per receipt, "none" for a request that got no answer.
sub show { return join ' ', map { "$_->{seq}:" . ($_->{answered} // 'none') } @{ $_[0] } }

###############################################################################
# 1. Ordering survives a worker killed with SIGKILL while the key's head is in flight.
###############################################################################
sql($node, sprintf(q{SELECT outbox.create_endpoint('ledger', url => '%s', ordered => true, max_attempts => 20)},
		$recv->url('/hooks/k')));
# The first request of the path hangs (for far longer than the test waits).
$recv->add_rule(path => '/hooks/k', action => 'hang', hang_ms => 60000, times => 1);

# Separate transactions, so the ids follow seq and each commit wakes the worker.
my @ids = map {
	sql($node, "SELECT outbox.enqueue('ledger', jsonb_build_object('key', 'k', 'seq', $_), ordering_key => 'k')")
} 0 .. 4;
is(join(',', map { $_ <=> $ids[0] } @ids), '0,1,1,1,1', 'the ids of key k increase with seq');

ok( wait_until(
		sub {
			my $r = receipts('/hooks/k');
			@$r >= 1 && $r->[0]{seq} == 0 && !$r->[0]{settled};
		},
		30,
		'seq 0 hanging at the receiver'),
	'seq 0 is in flight: the receiver holds it unanswered');
ok(wait_sql($node, "SELECT status = 'in_flight' FROM outbox.message($ids[0])", 30),
	'... and the outbox shows it in_flight');
is(sql($node, "SELECT attempts FROM outbox.messages WHERE id = $ids[0]"), '0',
	'... its queue row records no attempt yet (the claim lists its first)');
is(sql($node, "SELECT array_to_string(attempts, ',') FROM outbox.claims WHERE $ids[0] = ANY (message_ids)"), '1',
	'... and the claim lists it on its first attempt');
is(show(receipts('/hooks/k')), '0:none', 'nothing else of key k went out while the head is in flight');

my $old = worker_pid($node);
ok(defined $old, 'worker pid known');
ok(kill('KILL', $old), 'SIGKILL sent to the worker');
my $new = wait_for_worker($node, $old, 60);
ok(defined $new, 'a new worker runs after the crash restart');

ok( wait_sql(
		$node,
		"SELECT count(*) = 5 FROM unnest('{" . join(',', @ids) . "}'::bigint[]) i, outbox.message(i) s"
		  . " WHERE s.status = 'sent'", 60),
	'all five messages of key k are sent after the restart');
# The new worker recorded the attempt of the claim the killed one left behind: the
# head was sent on its second attempt, the others on their first.
is(sql($node, "SELECT string_agg(attempts::text, ',' ORDER BY id) FROM outbox.history WHERE ordering_key = 'k'"),
	'2,1,1,1,1', 'the history: the head sent on attempt 2 (the hung one counted), the rest on attempt 1');
is(sql($node, 'SELECT count(*) FROM outbox.claims'), '0', 'no claim is left once key k is sent');
# The hung request ends when the dead worker's socket closes; wait for the receiver
# to have recorded it (and every other request) as settled.
ok(wait_until(sub { !grep { !$_->{settled} } @{ receipts('/hooks/k') } }, 30, 'receipts settled'),
	'the receiver has settled every request of key k');

my $k = receipts('/hooks/k');
is(show($k), '0:none 0:200 1:200 2:200 3:200 4:200',
	'receipts of key k in arrival order: seq 0 unanswered, then seq 0, 1, 2, 3, 4 each answered 2xx');
my ($head_ok) = grep { $_->{seq} == 0 && ($_->{answered} // '') =~ /^2\d\d$/ } @$k;
my @early = grep { $_->{seq} >= 1 && $head_ok && $_->{time} < $head_ok->{answered_at} } @$k;
ok($head_ok && !@early, "no request for seq >= 1 arrived before seq 0's first 2xx")
  or diag explain \@early;
is(join(' ', map { $_->{wid} } @$k), join(' ', map { "$W$_" } $ids[0], @ids),
	'the same five messages (webhook-ids), the head twice');

my $log = slurp_file($node->logfile);
like($log, qr/\(PID $old\) was terminated by signal 9/, 'the log shows the worker killed by signal 9');
like($log, qr/all server processes terminated; reinitializing/, '... and the server reinitialised');
note('the new worker\'s recovery: '
	  . join('; ', $log =~ /(claimed messages of a previous worker are pending again)/g));

###############################################################################
# 2. A requeued dead letter is a new message, ordered by its new id.
###############################################################################
sql($node, sprintf(q{SELECT outbox.create_endpoint('oreq', url => '%s', ordered => true)},
		$recv->url('/hooks/r')));
# The head of key r dies at once: a 400.
$recv->add_rule(path => '/hooks/r', status => 400, times => 1);

sub enqueue_r
{
	my ($n) = @_;
	return sql($node, "SELECT outbox.enqueue('oreq', jsonb_build_object('key', 'r', 'seq', '$n', 'n', '$n'), "
		  . "event_type => 'test.requeue', ordering_key => 'r')");
}

my $a_id = enqueue_r('head');
ok(wait_sql($node, "SELECT EXISTS (SELECT 1 FROM dlq.dead_letters WHERE message_id = $a_id)", 30),
	'the head of key r is dead-lettered');
is(sql($node, "SELECT reason_code, http_status, attempts FROM dlq.dead_letters WHERE message_id = $a_id"),
	'HTTP_CLIENT_ERROR|400|1', '... at once, after one 400');
my $dl = sql($node, "SELECT id FROM dlq.dead_letters WHERE message_id = $a_id");

# The dead head no longer holds the key: the next message goes.
my $b_id = enqueue_r('after-dead');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($b_id)", 30),
	'a message of key r enqueued after the dead head is delivered');

# Paused: one more message of key r, then the requeue, so both wait together.
sql($node, q{SELECT outbox.pause_endpoint('oreq')});
# The message enqueued before the requeue is answered after 500 ms: were the requeued
# one not held behind it, it would arrive during that time.
$recv->add_rule(path => '/hooks/r', status => 200, delay_ms => 500, times => 1);
my $c_id = enqueue_r('before-requeue');
my $e_id = sql($node, "SELECT dlq.requeue($dl)");
cmp_ok($e_id, '>', $c_id, "the requeued dead letter is a new message with a larger id ($e_id > $c_id)");
is(sql($node, "SELECT s.status, m.ordering_key, m.idempotency_key FROM outbox.messages m, outbox.message(m.id) s"
		  . " WHERE m.id = $e_id"),
	"pending|r|$W$a_id", '... pending, key r, carrying the original webhook-id');
is(sql($node, "SELECT requeued_as FROM dlq.dead_letters WHERE id = $dl"), $e_id,
	'the dead letter records the new id');
is(scalar @{ $recv->requests(path => '/hooks/r') }, 2,
	'nothing went out while the endpoint was paused');

sql($node, q{SELECT outbox.resume_endpoint('oreq')});
ok( wait_sql(
		$node, "SELECT count(*) = 2 FROM unnest('{$c_id,$e_id}'::bigint[]) i, outbox.message(i) s"
		  . " WHERE s.status = 'sent'",
		30),
	'after resume both are sent');
ok(wait_until(sub { !grep { !$_->{settled} } @{ receipts('/hooks/r') } }, 30, 'receipts settled'),
	'the receiver has settled every request of key r');

my $r = receipts('/hooks/r');
is( join(' ', map { "$_->{wid}:$_->{n}:" . ($_->{answered} // 'none') } @$r),
	"$W$a_id:head:400 $W$b_id:after-dead:200 $W$c_id:before-requeue:200 $W$a_id:head:200",
	'arrival order: the dead head, the next, the message enqueued before the requeue, '
	  . 'then the requeued one with the original webhook-id');
ok($r->[3]{time} >= ($r->[2]{answered_at} // 9e9),
	'the requeued message went out only after the earlier message was answered');

###############################################################################
# 3. The next message of a key that the worker holds. When it takes a key's head out of
#    the queue, the worker claims the key's next message itself, by id, and leaves it
#    waiting in the table (src/pg/ordering/successors.cpp). A message it holds is locked
#    by another transaction here, so that its claim skips it and it stays held.
#    a. Neither key has a head in the table then: a producer's new message still follows.
#    b. An operator's DELETE of the message after it makes the held message a head in the
#       table: it is delivered once, then the rest of its key (which the worker had looked
#       up ahead with it: it looks the key up again).
#    c. A worker that stops while holding one: the next worker makes it a head, and the
#       key goes on in order.
#    d. A TRUNCATE while it holds one: the key's new messages go in order.
#    e. A change of the endpoint while it holds one: it becomes the head in the table.
#    f. An UPDATE of the one it holds (a new row version elsewhere): it is still sent, in
#       order.
###############################################################################
sql($node, sprintf(q{SELECT outbox.create_endpoint('held', url => '%s', ordered => true)}, $recv->url('/hooks/h')));
sql($node, q{SELECT outbox.pause_endpoint('held')});
my %held;
for my $key (qw(g h))
{
	$held{$key} = [ map {
		sql($node, "SELECT outbox.enqueue('held', jsonb_build_object('key', '$key', 'seq', $_), ordering_key => '$key')")
	} 0 .. ($key eq 'g' ? 4 : 3) ];
}
my %holder;
for my $key (qw(g h))
{
	$holder{$key} = $node->background_psql('postgres');
	$holder{$key}->query_safe('BEGIN');
	$holder{$key}->query_safe("SELECT id FROM outbox.messages WHERE id = $held{$key}[1] FOR UPDATE");
}
sql($node, q{SELECT outbox.resume_endpoint('held')});
ok( wait_sql(
		$node, "SELECT count(*) = 2 FROM unnest('{$held{g}[0],$held{h}[0]}'::bigint[]) i, outbox.message(i) s"
		  . " WHERE s.status = 'sent'",
		30),
	'the heads of keys g and h are sent');
sleep 1;    # rounds of the worker, which holds g1 and h1 and cannot claim them
is( sql($node, q{SELECT string_agg(ordering_key || ':' || count_heads || '/' || total, ' ' ORDER BY ordering_key)
	FROM (SELECT ordering_key, count(*) FILTER (WHERE ordering_seq IS NULL) AS count_heads, count(*) AS total
	        FROM outbox.messages WHERE endpoint = 'held' GROUP BY 1) c}),
	'g:0/4 h:0/3', 'no head in the table for either key: the worker holds their next messages');

# a. A producer's message of key h follows.
my $h4 = sql($node, "SELECT outbox.enqueue('held', jsonb_build_object('key', 'h', 'seq', 4), ordering_key => 'h')");
push @{ $held{h} }, $h4;
is(sql($node, "SELECT ordering_seq IS NOT NULL FROM outbox.messages WHERE id = $h4"), 't',
	'a new message of key h waits behind the held one');

# b. An operator deletes g2 in the transaction that holds g1: the trigger makes g1 the head.
$holder{g}->query_safe("DELETE FROM outbox.messages WHERE id = $held{g}[2]");
$holder{g}->query_safe('COMMIT');
$holder{g}->quit;
ok( wait_sql(
		$node, "SELECT count(*) = 3 FROM unnest('{$held{g}[1],$held{g}[3],$held{g}[4]}'::bigint[]) i,"
		  . " outbox.message(i) s WHERE s.status = 'sent'",
		30),
	'after the DELETE, g1, g3 and g4 are sent');

# c. The worker stops while it holds h1.
my $holding = worker_pid($node);
sql($node, "SELECT pg_terminate_backend($holding)");
ok(defined wait_for_worker($node, $holding, 30), 'a new worker runs');
$holder{h}->query_safe('ROLLBACK');
$holder{h}->quit;
ok( wait_sql(
		$node, "SELECT count(*) = 4 FROM unnest('{" . join(',', @{ $held{h} }[ 1 .. 4 ]) . "}'::bigint[]) i,"
		  . " outbox.message(i) s WHERE s.status = 'sent'",
		60),
	'the new worker sends h1 to h4');

my %expected = (g => [ @{ $held{g} }[ 0, 1, 3, 4 ] ], h => $held{h});    # g2 was deleted
for my $key (qw(g h))
{
	my @answered = map { $_->{wid} } grep { ($_->{answered} // '') =~ /^2/ }
	  sort { $a->{time} <=> $b->{time} } @{ receipts_of_key('/hooks/h', $key) };
	is(join(' ', @answered), join(' ', map { "$W$_" } @{ $expected{$key} }),
		"key $key: each message answered 2xx once, in order");
}

# d. A TRUNCATE of the queue while the worker holds key t's next message, with the key's
#    following messages looked up ahead: the key's new messages later go in order, none
#    stuck behind a line of messages that are gone.
sql($node, q{SELECT outbox.pause_endpoint('held')});
my @t = map {
	sql($node, "SELECT outbox.enqueue('held', jsonb_build_object('key', 't', 'seq', $_), ordering_key => 't')")
} 0 .. 3;
my $truncator = $node->background_psql('postgres');
$truncator->query_safe('BEGIN');
$truncator->query_safe("SELECT id FROM outbox.messages WHERE id = $t[1] FOR UPDATE");
sql($node, q{SELECT outbox.resume_endpoint('held')});
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($t[0])", 30), 't0 is sent, t1 is held');
$truncator->query_safe('TRUNCATE outbox.messages');
$truncator->query_safe('COMMIT');
$truncator->quit;
# In one transaction, so that the second and third wait behind the first (a pause would
# change the endpoints, which makes the worker look every key up again anyway).
my @t_new = split /\n/, sql($node,
	"SELECT outbox.enqueue('held', jsonb_build_object('key', 't', 'seq', 10 + g), ordering_key => 't')"
	  . ' FROM generate_series(0, 2) g');
ok( wait_sql(
		$node, "SELECT count(*) = 3 FROM unnest('{" . join(',', @t_new) . "}'::bigint[]) i, outbox.message(i) s"
		  . " WHERE s.status = 'sent'",
		30),
	'after a TRUNCATE, the three new messages of key t are sent');
is( join(' ', map { $_->{wid} } grep { ($_->{answered} // '') =~ /^2/ && $_->{seq} >= 10 }
		  sort { $a->{time} <=> $b->{time} } @{ receipts_of_key('/hooks/h', 't') }),
	join(' ', map { "$W$_" } @t_new), '... in order');

# e. A change of the endpoint while the worker holds key p's next message: the worker
#    writes it into the table as the key's head before its next claim (an
#    alter_endpoint(ordered => ...) numbers the keys again). The held message is locked
#    FOR KEY SHARE, which the claim skips (outbox._claimable: another transaction holds
#    it), but which lets that UPDATE of ordering_seq through.
sql($node, sprintf(q{SELECT outbox.create_endpoint('paced', url => '%s', ordered => true)}, $recv->url('/hooks/p')));
sql($node, q{SELECT outbox.pause_endpoint('paced')});
my @p = split /\n/, sql($node,
	"SELECT outbox.enqueue('paced', jsonb_build_object('key', 'p', 'seq', g), ordering_key => 'p')"
	  . ' FROM generate_series(0, 2) g');
my $sharer = $node->background_psql('postgres');
$sharer->query_safe('BEGIN');
$sharer->query_safe("SELECT id FROM outbox.messages WHERE id = $p[1] FOR KEY SHARE");
sql($node, q{SELECT outbox.resume_endpoint('paced')});
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($p[0])", 30), 'p0 is sent');
sleep 1;    # rounds of the worker, which holds p1 and cannot claim it
is(sql($node, "SELECT count(*) FROM outbox.messages WHERE ordering_key = 'p' AND ordering_seq IS NULL"), '0',
	'p1 is held: no head of key p in the table');
sql($node, q{SELECT outbox.alter_endpoint('paced', timeout_ms => 4000)});
ok(wait_sql($node, "SELECT ordering_seq IS NULL FROM outbox.messages WHERE id = $p[1]", 30),
	'after alter_endpoint, p1 is the head in the table');
is(sql($node, "SELECT count(*) FROM outbox.messages WHERE ordering_key = 'p' AND ordering_seq IS NULL"), '1',
	'... the only one of its key');
$sharer->query_safe('COMMIT');
$sharer->quit;
ok( wait_sql(
		$node, "SELECT count(*) = 2 FROM unnest('{$p[1],$p[2]}'::bigint[]) i, outbox.message(i) s"
		  . " WHERE s.status = 'sent'",
		30),
	'p1 and p2 are sent');
is( join(' ', map { $_->{wid} } grep { ($_->{answered} // '') =~ /^2/ }
		  sort { $a->{time} <=> $b->{time} } @{ receipts_of_key('/hooks/p', 'p') }),
	join(' ', map { "$W$_" } @p), '... in order, once each');

# f. An operator's UPDATE of the held message (its headers: no change of order) while the
#    worker holds it: the new row version is elsewhere in the table, and the claim, which
#    reads a held message where the worker saw it, must look for it again there (a claim
#    that kept reading the old place would pass it forever, and its key would stall).
sql($node, q{SELECT outbox.pause_endpoint('held')});
my @u = map {
	sql($node, "SELECT outbox.enqueue('held', jsonb_build_object('key', 'u', 'seq', $_), ordering_key => 'u')")
} 0 .. 2;
my $fixer = $node->background_psql('postgres');
$fixer->query_safe('BEGIN');
$fixer->query_safe("SELECT id FROM outbox.messages WHERE id = $u[1] FOR UPDATE");
my $u1_at = sql($node, "SELECT ctid FROM outbox.messages WHERE id = $u[1]");
sql($node, q{SELECT outbox.resume_endpoint('held')});
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($u[0])", 30), 'u0 is sent, u1 is held');
sleep 1;    # rounds of the worker, which holds u1 and cannot claim it
is(sql($node, "SELECT count(*) FROM outbox.messages WHERE ordering_key = 'u' AND ordering_seq IS NULL"), '0',
	'u1 is held: no head of key u in the table');
$fixer->query_safe(qq{UPDATE outbox.messages SET headers = '{"X-Fixed": "yes"}' WHERE id = $u[1]});
$fixer->query_safe('COMMIT');
$fixer->quit;
isnt(sql($node, "SELECT ctid FROM outbox.messages WHERE id = $u[1]"), $u1_at, 'the UPDATE moved u1\'s row');
ok( wait_sql(
		$node, "SELECT count(*) = 2 FROM unnest('{$u[1],$u[2]}'::bigint[]) i, outbox.message(i) s"
		  . " WHERE s.status = 'sent'",
		30),
	'u1 and u2 are sent');
is( join(' ', map { $_->{wid} } grep { ($_->{answered} // '') =~ /^2/ }
		  sort { $a->{time} <=> $b->{time} } @{ receipts_of_key('/hooks/h', 'u') }),
	join(' ', map { "$W$_" } @u), '... in order, once each');

$node->stop;
$recv->stop;
done_testing();
