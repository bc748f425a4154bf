# Per-key order is commit order (docs/delivery.md, "Ordering"): on an ordered endpoint, messages
# of one ordering_key are delivered in the order their transactions committed, one at a
# time, whatever order their ids (drawn at INSERT) have; the first to commit goes first
# even while it is still retrying when the other commits.
#
#  1. B enqueues after A and commits first; B's first attempt fails (503) and B is
#     retrying when A commits: A waits until B is sent.
#  2. Three producers commit in another order than they enqueued, before the worker
#     looks (the endpoint is paused): delivered in commit order.
#  3. A REPEATABLE READ producer whose snapshot predates the other's commit still
#     follows it (the decision reads what is committed now, not its snapshot).
#  4. pgbench: 8 clients, random keys, a pause between enqueue and a per-key counter
#     that numbers the commits; every key's deliveries follow the counter exactly.
#  5. pgbench: transactions of two keys each, in random order: no deadlock, all sent.
#  6. Operators: a DELETE of a head, or a change of its key, lets the next one go; a
#     plain INSERT follows like an enqueue; max_pending and drop_endpoint count the
#     messages waiting behind a head; alter_endpoint(ordered => ...) orders or releases
#     what is queued.
#  7. Several rows of one key in one transaction (one INSERT statement, requeue_all)
#     keep their order; a message moved into a key with messages follows them, and a
#     key moved whole keeps its order; places a rolled-back savepoint took back are
#     given again at commit (not those of a move it took back too), and with the
#     constraints immediate a message is placed once; nested savepoints, placed rows
#     moved and taken back, and a head deleted after an enqueue to its key keep one
#     head per key; a follower picked to head its key but being deleted is
#     passed over for the next one.
#  8. 20,000 messages behind a blocked head cost the claim nothing (claim index reads).
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_outbox_node(
	'commit_order',
	'pg_outbox.backoff_base'      => '400ms',
	'pg_outbox.backoff_max'       => '400ms',
	'pg_outbox.breaker_threshold' => '100000',
	'max_connections'             => '40');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $recv = start_receiver();
my $json = JSON::PP->new->utf8;
my $prefix = webhook_prefix($node);

for my $name (qw(s1 s2 s3 s4 s5 s6))
{
	$node->safe_psql('postgres',
		sprintf(q{SELECT outbox.create_endpoint('%s', url => '%s', ordered => true)}, $name,
			$recv->url("/hooks/$name")));
}

# The ids answered 2xx on $path, in the order the receiver answered them.
sub delivered_ids
{
	my ($path) = @_;
	my $first = $recv->answered_2xx($path);
	my @wids = sort { $first->{$a} <=> $first->{$b} } keys %$first;
	return map { /^\Q$prefix\E(\d+)$/ ? $1 : die "unexpected webhook-id $_" } @wids;
}

# Every request of $path, as [id, arrived, answered_at, answered].
sub requests_of
{
	my ($path) = @_;
	return map {
		my $wid = $_->{headers}{'webhook-id'} // '';
		[ ($wid =~ /(\d+)$/)[0], $_->{time}, $_->{answered_at}, $_->{answered} ]
	} @{ $recv->requests(path => $path) };
}

# Waits (bounded) until $n messages of $endpoint are in the history; returns 1, or 0
# on timeout (callers ok() it).
sub wait_sent
{
	my ($endpoint, $n) = @_;
	return wait_sql($node, "SELECT count(*) >= $n FROM outbox.history WHERE endpoint = '$endpoint'", 60);
}

sub enqueue_sql
{
	my ($endpoint, $tag, $key) = @_;
	return "SELECT outbox.enqueue('$endpoint', '{\"n\": \"$tag\"}', ordering_key => '$key')";
}

# --- 1. The head is retrying when an earlier-enqueued message commits ---------------
$recv->add_rule(path => '/hooks/s1', status => 503, times => 2);
my $sa = $node->background_psql('postgres');
my $sb = $node->background_psql('postgres');
$sa->query_safe('BEGIN');
my $id_a = $sa->query_safe(enqueue_sql('s1', 'A', 'k'));
$sb->query_safe('BEGIN');
my $id_b = $sb->query_safe(enqueue_sql('s1', 'B', 'k'));
$sb->query_safe('COMMIT');
ok($id_a < $id_b, "A enqueued first (id $id_a), B second (id $id_b)");
ok($recv->wait_requests('/hooks/s1', 1, 30), "1. B's first attempt reached the receiver before A commits");
$sa->query_safe('COMMIT');
ok(wait_sent('s1', 2), '1. both messages sent');
is_deeply([ delivered_ids('/hooks/s1') ], [ $id_b, $id_a ], '1. B (committed first) was delivered before A');
my @s1 = requests_of('/hooks/s1');
my ($b_ok) = map { $_->[2] } grep { $_->[0] == $id_b && ($_->[3] // '') eq '200' } @s1;
my @a_requests = grep { $_->[0] == $id_a } @s1;
is(scalar(grep { $_->[0] == $id_b } @s1), 3, '1. B was attempted three times (two 503s, then 200)');
ok(@a_requests && !grep({ $_->[1] < $b_ok } @a_requests),
	'1. no request for A arrived before B was answered 200 (one at a time, while B retried)');

# --- 2. Three producers commit in another order than they enqueued ------------------
$node->safe_psql('postgres', q{SELECT outbox.pause_endpoint('s2')});
my $sc = $node->background_psql('postgres');
my %id;
for ([ $sa, 'A' ], [ $sb, 'B' ], [ $sc, 'C' ])
{
	my ($session, $tag) = @$_;
	$session->query_safe('BEGIN');
	$id{$tag} = $session->query_safe(enqueue_sql('s2', $tag, 'k'));
}
$_->query_safe('COMMIT') for ($sc, $sa, $sb);
is( $node->safe_psql('postgres',
		"SELECT string_agg((ordering_seq IS NULL)::text, ',' ORDER BY ordering_seq NULLS FIRST)
		   FROM outbox.messages WHERE endpoint = 's2'"),
	'true,false,false',
	'2. one head, two waiting behind it');
is( $node->safe_psql('postgres',
		"SELECT id FROM outbox.messages WHERE endpoint = 's2' AND ordering_seq IS NULL"),
	$id{C}, '2. the head is the first to commit (C), not the lowest id');
$node->safe_psql('postgres', q{SELECT outbox.resume_endpoint('s2')});
ok(wait_sent('s2', 3), '2. the three messages sent');
is_deeply([ delivered_ids('/hooks/s2') ], [ @id{qw(C A B)} ], '2. delivered in commit order: C, A, B');

# --- 3. A REPEATABLE READ producer follows what committed after its snapshot --------
$node->safe_psql('postgres', q{SELECT outbox.pause_endpoint('s3')});
$sa->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$sa->query_safe('SELECT count(*) FROM outbox.messages');    # the snapshot is taken here
my $id_w = $node->safe_psql('postgres', enqueue_sql('s3', 'W', 'k'));
my $id_r = $sa->query_safe(enqueue_sql('s3', 'R', 'k'));
$sa->query_safe('COMMIT');
is( $node->safe_psql('postgres', "SELECT ordering_seq IS NOT NULL FROM outbox.messages WHERE id = $id_r"),
	't', '3. the REPEATABLE READ message waits behind the one committed after its snapshot');
$node->safe_psql('postgres', q{SELECT outbox.resume_endpoint('s3')});
ok(wait_sent('s3', 2), '3. both messages sent');
is_deeply([ delivered_ids('/hooks/s3') ], [ $id_w, $id_r ], '3. delivered in commit order');
$_->quit for ($sa, $sb, $sc);

# --- 4. pgbench: every key's deliveries follow its commit counter -------------------
my $CLIENTS = 8;
my $PER_CLIENT = 40;
$node->safe_psql(
	'postgres', q{
	CREATE TABLE key_counter (k int PRIMARY KEY, n int NOT NULL);
	INSERT INTO key_counter SELECT k, 0 FROM generate_series(1, 3) k;
	CREATE TABLE witness (id bigint PRIMARY KEY, k int NOT NULL, n int NOT NULL);});
my $dir = PostgreSQL::Test::Utils::tempdir('commit_order');
# The counter's row lock is taken after the enqueue and held until commit: n numbers
# the commits of a key, while the ids were drawn in another order.
PostgreSQL::Test::Utils::append_to_file(
	"$dir/one_key.sql", q{\set k random(1, 3)
BEGIN;
SELECT outbox.enqueue('s4', jsonb_build_object('k', :k), ordering_key => 'k' || :k) AS id \gset
SELECT pg_sleep(random() * 0.004);
UPDATE key_counter SET n = n + 1 WHERE k = :k RETURNING n \gset
INSERT INTO witness (id, k, n) VALUES (:id, :k, :n);
COMMIT;
});
my ($out, $err);
my $ok = PostgreSQL::Test::Utils::run_log(
	[ 'pgbench', '-n', '-c', $CLIENTS, '-j', 2, '-t', $PER_CLIENT, '-f', "$dir/one_key.sql",
	  '-h', $node->host, '-p', $node->port, 'postgres' ],
	'>', \$out, '2>', \$err);
ok($ok, '4. pgbench ran every transaction') or diag($err);
my $total = $CLIENTS * $PER_CLIENT;
ok(wait_sent('s4', $total), "4. all $total messages sent");
my %witness = map { my ($i, $k, $n) = split /\|/; ($i => [ $k, $n ]) }
  split /\n/, $node->safe_psql('postgres', 'SELECT id, k, n FROM witness');
is(scalar(keys %witness), $total, "4. $total transactions committed");
my (%seen, $inversions, $ids_out_of_order);
for my $id (delivered_ids('/hooks/s4'))
{
	my ($k, $n) = @{ $witness{$id} };
	$inversions++ if $n != ($seen{$k} // 0) + 1;
	$seen{$k} = $n;
}
my %last_id;
for my $id (sort { $witness{$a}[1] <=> $witness{$b}[1] } keys %witness)
{
	my $k = $witness{$id}[0];
	$ids_out_of_order++ if defined $last_id{$k} && $id < $last_id{$k};
	$last_id{$k} = $id;
}
is($inversions // 0, 0, '4. every key delivered exactly in its commit order (1, 2, 3, ...)');
ok($ids_out_of_order, "4. the run did commit ids out of order ($ids_out_of_order times): the test can fail")
  or diag('no inversion between id order and commit order happened in this run');
my $overlaps = 0;
my %by_key;
for my $r (requests_of('/hooks/s4'))
{
	push @{ $by_key{ $witness{ $r->[0] }[0] } }, $r;
}
for my $list (values %by_key)
{
	my @r = sort { $a->[1] <=> $b->[1] } @$list;
	for my $i (1 .. $#r)
	{
		$overlaps++ if !defined $r[ $i - 1 ][2] || $r[$i][1] < $r[ $i - 1 ][2];
	}
}
is($overlaps, 0, '4. one request at a time per key');

# --- 5. pgbench: two keys per transaction, in random order ---------------------------
PostgreSQL::Test::Utils::append_to_file(
	"$dir/two_keys.sql", q{\set a random(1, 4)
\set b random(1, 4)
BEGIN;
SELECT outbox.enqueue('s5', '{}', ordering_key => 'k' || :a);
SELECT pg_sleep(random() * 0.002);
SELECT outbox.enqueue('s5', '{}', ordering_key => 'k' || :b);
COMMIT;
});
$ok = PostgreSQL::Test::Utils::run_log(
	[ 'pgbench', '-n', '-c', $CLIENTS, '-j', 2, '-t', 25, '-f', "$dir/two_keys.sql",
	  '-h', $node->host, '-p', $node->port, 'postgres' ],
	'>', \$out, '2>', \$err);
ok($ok && $err !~ /deadlock/, '5. no transaction failed (no deadlock between keys locked in opposite orders)')
  or diag($err);
ok(wait_sent('s5', $CLIENTS * 25 * 2), '5. all ' . ($CLIENTS * 25 * 2) . ' messages sent');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages WHERE endpoint = 's5'}),
	0, '5. all delivered');

# --- 6. Operators --------------------------------------------------------------------
$node->safe_psql('postgres', q{SELECT outbox.pause_endpoint('s6')});
my @six = map { $node->safe_psql('postgres', enqueue_sql('s6', "m$_", 'k')) } 1 .. 4;
# A plain INSERT (a privileged role) follows like an enqueue.
push @six, $node->safe_psql('postgres',
	q{INSERT INTO outbox.messages (endpoint, payload, ordering_key) VALUES ('s6', '{"n": "m5"}', 'k') RETURNING id});
is( $node->safe_psql('postgres',
		q{SELECT string_agg(id::text, ',' ORDER BY ordering_seq NULLS FIRST) FROM outbox.messages WHERE endpoint = 's6'}),
	join(',', @six), '6. the plain INSERT waits behind the enqueued ones');
$node->safe_psql('postgres', q{SELECT outbox.alter_endpoint('s6', max_pending => 5)});
my ($rc, $o, $e) = $node->psql('postgres', enqueue_sql('s6', 'm6', 'other'));
like($e, qr/reached max_pending \(5\)/, '6. max_pending counts the messages waiting behind a head');
($rc, $o, $e) = $node->psql('postgres', q{SELECT outbox.drop_endpoint('s6')});
like($e, qr/5 message\(s\) are pending or in flight/, '6. drop_endpoint counts them too');
$node->safe_psql('postgres', "DELETE FROM outbox.messages WHERE id = $six[0]");
is($node->safe_psql('postgres', "SELECT ordering_seq IS NULL FROM outbox.messages WHERE id = $six[1]"),
	't', '6. deleting the head makes the next one the head');
$node->safe_psql('postgres', "UPDATE outbox.messages SET ordering_key = 'moved' WHERE id = $six[1]");
is( $node->safe_psql('postgres',
		"SELECT string_agg(id::text, ',' ORDER BY id) FROM outbox.messages WHERE endpoint = 's6' AND ordering_seq IS NULL"),
	"$six[1],$six[2]", '6. moving the head to another key makes the next one the head');
$node->safe_psql('postgres', q{SELECT outbox.alter_endpoint('s6', ordered => false)});
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages WHERE endpoint = 's6' AND ordering_seq IS NOT NULL}),
	0, '6. an endpoint that stops being ordered releases every waiting message');
$node->safe_psql('postgres', q{SELECT outbox.alter_endpoint('s6', ordered => true)});
is( $node->safe_psql('postgres',
		q{SELECT string_agg(id::text, ',' ORDER BY ordering_seq NULLS FIRST) FROM outbox.messages
		   WHERE endpoint = 's6' AND ordering_key = 'k'}),
	join(',', @six[ 2 .. 4 ]), '6. one that becomes ordered puts its queued messages in id order');
$node->safe_psql('postgres', q{SELECT outbox.resume_endpoint('s6')});
ok(wait_sent('s6', 4), '6. the four remaining messages sent');
my %of_k = map { $_ => 1 } @six[ 2 .. 4 ];
is_deeply([ grep { $of_k{$_} } delivered_ids('/hooks/s6') ], [ @six[ 2 .. 4 ] ], '6. and delivers them in that order');

# --- 7. Several rows of one key in one transaction, by plain INSERT or requeue --------
$node->safe_psql('postgres', sprintf(q{SELECT outbox.create_endpoint('s7', url => '%s', ordered => true)},
	$recv->url('/hooks/s7')));
$node->safe_psql('postgres', q{SELECT outbox.pause_endpoint('s7')});
my @rows = split /\n/, $node->safe_psql('postgres',
	q{INSERT INTO outbox.messages (endpoint, payload, ordering_key)
	  SELECT 's7', jsonb_build_object('row', i), 'k' FROM generate_series(1, 3) i RETURNING id});
is( $node->safe_psql('postgres',
		q{SELECT string_agg(id::text, ',' ORDER BY ordering_seq NULLS FIRST) FROM outbox.messages WHERE endpoint = 's7'}),
	join(',', @rows), '7. the rows of one INSERT statement go in their order (the first is the head)');
$node->safe_psql('postgres', q{DELETE FROM outbox.messages WHERE endpoint = 's7'});
$recv->add_rule(path => '/hooks/s7', status => 400);
$node->safe_psql('postgres', q{SELECT outbox.resume_endpoint('s7')});
$node->safe_psql('postgres', enqueue_sql('s7', "d$_", 'k')) for 1 .. 3;
ok(wait_sql($node, q{SELECT count(*) = 3 FROM dlq.dead_letters WHERE endpoint = 's7'}, 30),
	'7. the three messages refused with 400 are dead letters');
$recv->clear_rules;
$node->safe_psql('postgres', q{SELECT outbox.pause_endpoint('s7')});
$node->safe_psql('postgres', q{SELECT dlq.requeue_all('s7')});
my @requeued = split /\n/, $node->safe_psql('postgres', q{SELECT requeued_as FROM dlq.dead_letters WHERE endpoint = 's7' ORDER BY id});
is( $node->safe_psql('postgres',
		q{SELECT string_agg(id::text, ',' ORDER BY ordering_seq NULLS FIRST) FROM outbox.messages WHERE endpoint = 's7'}),
	join(',', @requeued), '7. dead letters requeued together go in the order they died');

# One transaction with 5,000 keys: their locks (one of 1,024 per key) fit PostgreSQL's
# lock table (about 64 x 50 entries here), one lock per key would not.
$node->safe_psql('postgres', sprintf(q{SELECT outbox.create_endpoint('s9', url => '%s', ordered => true);
	SELECT outbox.pause_endpoint('s9')}, $recv->url('/hooks/s9')));
my ($rc9, $o9, $e9) = $node->psql('postgres', q{INSERT INTO outbox.messages (endpoint, payload, ordering_key)
	SELECT 's9', '{}', 'key-' || i FROM generate_series(1, 5000) i});
is($rc9, 0, '7. a transaction of 5,000 keys commits') or diag($e9);
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages WHERE endpoint = 's9' AND ordering_seq IS NULL}),
	5000, '7. ... each of its messages heads its own key');

# A savepoint takes back the first message of a key: the next one heads it.
$node->safe_psql('postgres', sprintf(q{SELECT outbox.create_endpoint('s10', url => '%s', ordered => true);
	SELECT outbox.pause_endpoint('s10')}, $recv->url('/hooks/s10')));
my @sp = split /\n/, $node->safe_psql('postgres', join ';', 'BEGIN', 'SAVEPOINT a', enqueue_sql('s10', 'x', 'sp'),
	'ROLLBACK TO SAVEPOINT a', enqueue_sql('s10', 'y', 'sp'), enqueue_sql('s10', 'z', 'sp'), 'COMMIT');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(id || ':' || (ordering_seq IS NULL), ',' ORDER BY id) FROM outbox.messages WHERE ordering_key = 'sp'}),
	"$sp[1]:true,$sp[2]:false", '7. a savepoint took back the first message of a key: the next one heads it');
# One transaction over keys that have a head already (odd) and keys that have none
# (even), a savepoint taking back the first message of one of each: every key keeps one
# head, the one committed first, and the others follow in their commit order (the
# commit looks at all the keys in one statement, ordering/ordering.cpp).
$node->safe_psql('postgres', sprintf(q{SELECT outbox.create_endpoint('s11', url => '%s', ordered => true);
	SELECT outbox.pause_endpoint('s11')}, $recv->url('/hooks/s11')));
$node->safe_psql('postgres', enqueue_sql('s11', 'before', "m$_")) for 1, 3, 5;
$node->safe_psql('postgres', join ';', 'BEGIN',
	(map { ('SAVEPOINT t', enqueue_sql('s11', 'taken-back', "m$_"), 'ROLLBACK TO SAVEPOINT t') } 2, 3),
	(map { my $k = $_; map { enqueue_sql('s11', "new$_", "m$k") } 1, 2 } 1 .. 6), 'COMMIT');
is( $node->safe_psql('postgres', q{SELECT string_agg(format('%s:%s:%s', ordering_key, heads, ordered), ' ' ORDER BY ordering_key)
	  FROM (SELECT ordering_key, count(*) FILTER (WHERE ordering_seq IS NULL) AS heads,
	               array_agg(id ORDER BY ordering_seq NULLS FIRST) = array_agg(id ORDER BY id) AS ordered
	          FROM outbox.messages WHERE endpoint = 's11' GROUP BY ordering_key) k}),
	join(' ', map { "m$_:1:t" } 1 .. 6),
	'7. keys with and without a head in one transaction: one head each, the rest in commit order');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages WHERE endpoint = 's11'}),
	15, '7. ... and the messages taken back are not there');
# A message moved to another key before its transaction commits is no message of the key
# it left (its neighbour there still follows the committed head) and heads its new key.
# An enqueue with an idempotency key is one message of its key, not two: behind a
# committed head it follows, and alone in its key it heads it.
$node->safe_psql('postgres', sprintf(q{SELECT outbox.create_endpoint('s13', url => '%s', ordered => true);
	SELECT outbox.pause_endpoint('s13')}, $recv->url('/hooks/s13')));
$node->safe_psql('postgres', enqueue_sql('s13', 'head', $_)) for 'left', 'idem';
$node->safe_psql('postgres', join ';', 'BEGIN', enqueue_sql('s13', 'stays', 'left'),
	enqueue_sql('s13', 'moved', 'left'), q{UPDATE outbox.messages SET ordering_key = 'new' WHERE payload->>'n' = 'moved'},
	enqueue_sql('s13', 'plain', 'idem'),
	q{SELECT outbox.enqueue('s13', '{}', ordering_key => 'idem', idempotency_key => 'i1')},
	q{SELECT outbox.enqueue('s13', '{}', ordering_key => 'alone', idempotency_key => 'i2')}, 'COMMIT');
is( $node->safe_psql('postgres', q{SELECT string_agg(format('%s:%s/%s', ordering_key, heads, n), ' ' ORDER BY ordering_key)
	  FROM (SELECT ordering_key, count(*) FILTER (WHERE ordering_seq IS NULL) AS heads, count(*) AS n
	          FROM outbox.messages WHERE endpoint = 's13' GROUP BY ordering_key) k}),
	'alone:1/1 idem:1/3 left:1/2 new:1/1',
	'7. a message moved before its commit, and enqueues with an idempotency key: one head per key');

# An operator's DELETE of the six heads in one statement: each key's next message heads it
# (the statement's keys are promoted together, ordering/ordering.cpp).
$node->safe_psql('postgres', q{DELETE FROM outbox.messages WHERE endpoint = 's11' AND ordering_seq IS NULL});
is( $node->safe_psql('postgres', q{SELECT string_agg(format('%s:%s:%s', ordering_key, heads, ordered), ' ' ORDER BY ordering_key)
	  FROM (SELECT ordering_key, count(*) FILTER (WHERE ordering_seq IS NULL) AS heads,
	               array_agg(id ORDER BY ordering_seq NULLS FIRST) = array_agg(id ORDER BY id) AS ordered
	          FROM outbox.messages WHERE endpoint = 's11' GROUP BY ordering_key) k}),
	join(' ', map { "m$_:1:t" } 1 .. 6), "6. one DELETE of six keys' heads: each key's next message heads it");
# A DELETE's keys are promoted by its statement's trigger. A user's AFTER DELETE row
# trigger that deletes a queue row of another key in a block that fails (a
# subtransaction, rolled back) fires before it: the inner DELETE's promotion goes with
# the rollback, and the outer DELETE's key is still promoted, by its own trigger (had the
# inner one taken the outer's keys, their promotion would go with the rollback too).
$node->safe_psql('postgres', sprintf(q{SELECT outbox.create_endpoint('s19', url => '%s', ordered => true);
	SELECT outbox.pause_endpoint('s19')}, $recv->url('/hooks/s19')));
$node->safe_psql('postgres', enqueue_sql('s19', "$_", $_ < 3 ? 'outer' : 'inner')) for 1 .. 4;
$node->safe_psql('postgres', q{
	CREATE FUNCTION test_audit() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF OLD.ordering_key = 'outer' THEN
			BEGIN
				DELETE FROM outbox.messages WHERE endpoint = 's19' AND ordering_key = 'inner' AND ordering_seq IS NULL;
				RAISE EXCEPTION 'audit failed';
			EXCEPTION WHEN raise_exception THEN NULL;
			END;
		END IF;
		RETURN NULL;
	END $$;
	CREATE TRIGGER zz_test_audit AFTER DELETE ON outbox.messages FOR EACH ROW EXECUTE FUNCTION test_audit()});
$node->safe_psql('postgres', q{DELETE FROM outbox.messages WHERE endpoint = 's19' AND ordering_key = 'outer' AND ordering_seq IS NULL});
$node->safe_psql('postgres', q{DROP TRIGGER zz_test_audit ON outbox.messages; DROP FUNCTION test_audit()});
is( $node->safe_psql('postgres', q{SELECT string_agg(format('%s:%s/%s', ordering_key, heads, n), ' ' ORDER BY ordering_key)
	  FROM (SELECT ordering_key, count(*) FILTER (WHERE ordering_seq IS NULL) AS heads, count(*) AS n
	          FROM outbox.messages WHERE endpoint = 's19' GROUP BY ordering_key) k}),
	'inner:1/2 outer:1/1',
	"6. a user's trigger deleting in a block rolled back: the outer DELETE's key still gets a head, the inner key keeps its own");

# A transaction that deletes a head and enqueues to its key: one head, the promoted one.
my $promoted = $sp[2];
$node->safe_psql('postgres', join ';', 'BEGIN', "DELETE FROM outbox.messages WHERE id = $sp[1]",
	enqueue_sql('s10', 'w', 'sp'), 'COMMIT');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(id::text, ',') FROM outbox.messages WHERE ordering_key = 'sp' AND ordering_seq IS NULL}),
	$promoted, '7. deleting a head and enqueuing to its key in one transaction leaves one head, the promoted one');
# A follower moved to another key heads it.
my $mover = $node->safe_psql('postgres', q{SELECT id FROM outbox.messages WHERE ordering_key = 'sp' AND ordering_seq IS NOT NULL});
$node->safe_psql('postgres', "UPDATE outbox.messages SET ordering_key = 'elsewhere' WHERE id = $mover");
is($node->safe_psql('postgres', "SELECT ordering_seq IS NULL FROM outbox.messages WHERE id = $mover"),
	't', '7. a message moved to another key heads it');
# A session that deletes message $id, left running (it may wait for a lock); and whether
# it waits for one (bounded).
sub delete_in_background
{
	my ($id) = @_;
	my $session = $node->background_psql('postgres');
	$session->query_until(qr/deleting/, "\\echo deleting\nDELETE FROM outbox.messages WHERE id = $id;\n");
	return $session;
}
sub waits_for_lock
{
	my ($id) = @_;
	return wait_sql($node,
		"SELECT EXISTS (SELECT FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%id = $id;%')", 30);
}
# The follower picked to head a key may be leaving itself (a DELETE not yet committed)
# without holding its key's lock (session_replication_role = replica fires no trigger, as
# in a logical replication apply): the promotion waits for it, finds it gone, and picks
# the next one.
my @race = map { $node->safe_psql('postgres', enqueue_sql('s10', "r$_", 'race')) } 1 .. 3;
my $holder = $node->background_psql('postgres');
$holder->query_safe('SET session_replication_role = replica');
$holder->query_safe('BEGIN');
$holder->query_safe("DELETE FROM outbox.messages WHERE id = $race[1]");
my $deleter = delete_in_background($race[0]);
ok(waits_for_lock($race[0]), "7. the head's DELETE waits for the follower it picked, being deleted");
$holder->query_safe('COMMIT');
$holder->quit;
$deleter->quit;
is( $node->safe_psql('postgres',
		q{SELECT string_agg(format('%s:%s', id, ordering_seq IS NULL), ',') FROM outbox.messages WHERE ordering_key = 'race'}),
	"$race[2]:t", '7. ... and then heads the key with the next one');

# A message moved into a key that has messages follows them, placed at the move's commit
# as an insert is; messages moved together (a whole key) keep their commit order, which
# is not their ids' order here (p2 committed before p1), the head first.
$node->safe_psql('postgres', sprintf(q{SELECT outbox.create_endpoint('s14', url => '%s', ordered => true);
	SELECT outbox.pause_endpoint('s14')}, $recv->url('/hooks/s14')));
# Three messages of key src of $endpoint, the second id committed first: returns their ids.
sub committed_out_of_id_order
{
	my ($endpoint, @tags) = @_;
	my $session = $node->background_psql('postgres');
	$session->query_safe('BEGIN');
	my $first = $session->query_safe(enqueue_sql($endpoint, $tags[0], 'src'));
	my $second = $node->safe_psql('postgres', enqueue_sql($endpoint, $tags[1], 'src'));
	$session->query_safe('COMMIT');
	$session->quit;
	return ($first, $second, $node->safe_psql('postgres', enqueue_sql($endpoint, $tags[2], 'src')));
}
my %mv;
$mv{$_} = $node->safe_psql('postgres', enqueue_sql('s14', $_, 'full')) for 'f1', 'f2';
@mv{qw(p1 p2 p3)} = committed_out_of_id_order('s14', qw(p1 p2 p3));
$mv{x} = $node->safe_psql('postgres', enqueue_sql('s14', 'x', 'lone'));
$node->safe_psql('postgres', "UPDATE outbox.messages SET ordering_key = 'full' WHERE id = $mv{x}");
$node->safe_psql('postgres', q{UPDATE outbox.messages SET ordering_key = 'dst' WHERE ordering_key = 'src'});
my $key_order = q{SELECT string_agg(format('%s:%s:%s', ordering_key, heads, ids), ' ' ORDER BY ordering_key)
	FROM (SELECT ordering_key, count(*) FILTER (WHERE ordering_seq IS NULL) AS heads,
	             string_agg(id::text, ',' ORDER BY ordering_seq NULLS FIRST) AS ids
	        FROM outbox.messages WHERE endpoint = 's14' GROUP BY ordering_key) k};
my $expected_order = "dst:1:$mv{p2},$mv{p1},$mv{p3} full:1:$mv{f1},$mv{f2},$mv{x}";
is($node->safe_psql('postgres', $key_order), $expected_order,
	'7. a message moved into a key with messages follows them; a key moved whole keeps its order');
$node->safe_psql('postgres', q{SELECT outbox.resume_endpoint('s14')});
ok(wait_sent('s14', 6), '7. the six moved and unmoved messages sent');
my %key_of = map { ($mv{$_} => ($_ =~ /^p/ ? 'dst' : 'full')) } keys %mv;
my %got;
push @{ $got{ $key_of{$_} } }, $_ for grep { $key_of{$_} } delivered_ids('/hooks/s14');
is("dst:1:" . join(',', @{ $got{dst} }) . " full:1:" . join(',', @{ $got{full} }), $expected_order,
	'7. ... and each key is delivered in that order');
# A message placed early (SET CONSTRAINTS ALL IMMEDIATE) and then moved again in the same
# transaction is placed again: it follows the head of the key it ends in.
$node->safe_psql('postgres', sprintf(q{SELECT outbox.create_endpoint('s15', url => '%s', ordered => true);
	SELECT outbox.pause_endpoint('s15')}, $recv->url('/hooks/s15')));
my $busy_head = $node->safe_psql('postgres', enqueue_sql('s15', 'h', 'busy'));
my $twice = $node->safe_psql('postgres', enqueue_sql('s15', 'y', 'solo'));
$node->safe_psql('postgres', join ';', 'BEGIN', "UPDATE outbox.messages SET ordering_key = 'tmp' WHERE id = $twice",
	'SET CONSTRAINTS ALL IMMEDIATE', "UPDATE outbox.messages SET ordering_key = 'busy' WHERE id = $twice", 'COMMIT');
is( $node->safe_psql('postgres', q{SELECT string_agg(format('%s:%s', id, ordering_seq IS NULL), ',' ORDER BY ordering_seq NULLS FIRST)
	  FROM outbox.messages WHERE endpoint = 's15'}),
	"$busy_head:t,$twice:f", '7. a message placed early and moved again follows the head of its last key');
# A row noted twice (inserted in a key, then moved into one with a head) is placed where it
# is at commit; rows moved twice keep the order they had before the first move; a message
# the same transaction enqueues to a key it moved messages into comes after them.
$node->safe_psql('postgres', sprintf(q{SELECT outbox.create_endpoint('s16', url => '%s', ordered => true);
	SELECT outbox.pause_endpoint('s16')}, $recv->url('/hooks/s16')));
my %tw;
$tw{h} = $node->safe_psql('postgres', enqueue_sql('s16', 'h', 'b'));
@tw{qw(q1 q2 q3)} = committed_out_of_id_order('s16', qw(q1 q2 q3));
my @tx16 = split /\n/, $node->safe_psql('postgres', join ';', 'BEGIN', enqueue_sql('s16', 'x', 'a'),
	q{UPDATE outbox.messages SET ordering_key = 'b' WHERE endpoint = 's16' AND payload->>'n' = 'x'},
	q{UPDATE outbox.messages SET ordering_key = 'mid' WHERE endpoint = 's16' AND ordering_key = 'src'},
	q{UPDATE outbox.messages SET ordering_key = 'dst' WHERE endpoint = 's16' AND ordering_key = 'mid'},
	enqueue_sql('s16', 'n', 'dst'), 'COMMIT');
($tw{x}, $tw{n}) = ($tx16[0], $tx16[1]);
is( $node->safe_psql('postgres', q{SELECT string_agg(format('%s:%s:%s', ordering_key, heads, ids), ' ' ORDER BY ordering_key)
	FROM (SELECT ordering_key, count(*) FILTER (WHERE ordering_seq IS NULL) AS heads,
	             string_agg(id::text, ',' ORDER BY ordering_seq NULLS FIRST) AS ids
	        FROM outbox.messages WHERE endpoint = 's16' GROUP BY ordering_key) k}),
	"b:1:$tw{h},$tw{x} dst:1:$tw{q2},$tw{q1},$tw{q3},$tw{n}",
	'7. inserted then moved, moved twice, and enqueued behind moved messages: one head per key, commit order kept');

# A move a savepoint took back leaves the message where it was: its key keeps its head.
my @kept = map { $node->safe_psql('postgres', enqueue_sql('s16', "k$_", 'back')) } 1, 2;
$node->safe_psql('postgres', join ';', 'BEGIN', 'SAVEPOINT s',
	"UPDATE outbox.messages SET ordering_key = 'elsewhere' WHERE id = $kept[0]", 'ROLLBACK TO SAVEPOINT s',
	enqueue_sql('s16', 'other', 'z'), 'COMMIT');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(format('%s:%s', id, ordering_seq IS NULL), ',' ORDER BY ordering_seq NULLS FIRST)
		    FROM outbox.messages WHERE ordering_key = 'back'}),
	"$kept[0]:t,$kept[1]:f", '7. a move taken back by a savepoint leaves the key as it was');

# Messages placed early (SET CONSTRAINTS ALL IMMEDIATE) inside a savepoint rolled back
# lose their places with it and are placed again at commit: an enqueue and a move into a
# key with a head both follow it, the moved message first (it committed before).
my $sp_head = $node->safe_psql('postgres', enqueue_sql('s16', 'sh', 'spk'));
my $sp_moved = $node->safe_psql('postgres', enqueue_sql('s16', 'sm', 'spsrc'));
my ($sp_new) = split /\n/, $node->safe_psql('postgres', join ';', 'BEGIN', enqueue_sql('s16', 'sn', 'spk'),
	"UPDATE outbox.messages SET ordering_key = 'spk' WHERE id = $sp_moved", 'SAVEPOINT p',
	'SET CONSTRAINTS ALL IMMEDIATE', 'ROLLBACK TO SAVEPOINT p', 'COMMIT');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(format('%s:%s', id, ordering_seq IS NULL), ',' ORDER BY ordering_seq NULLS FIRST, id)
		    FROM outbox.messages WHERE ordering_key = 'spk'}),
	"$sp_head:t,$sp_moved:f,$sp_new:f", '7. places taken back by a savepoint are given again at commit');
# A move made and placed inside a savepoint that is rolled back is not placed again at
# commit, even when the transaction wrote the row before (its payload here): the message
# keeps its place ahead of the key's later messages.
my @pay = map { $node->safe_psql('postgres', enqueue_sql('s16', "p$_", 'pay')) } 1 .. 3;
$node->safe_psql('postgres', join ';', 'BEGIN',
	"UPDATE outbox.messages SET payload = '{\"n\": \"p2-fixed\"}' WHERE id = $pay[1]", 'SAVEPOINT p',
	"UPDATE outbox.messages SET ordering_key = 'pay-tmp' WHERE id = $pay[1]", 'SET CONSTRAINTS ALL IMMEDIATE',
	'ROLLBACK TO SAVEPOINT p', enqueue_sql('s16', 'o', 'pay-other'), 'COMMIT');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(format('%s:%s', id, ordering_seq IS NULL), ',' ORDER BY ordering_seq NULLS FIRST, id)
		    FROM outbox.messages WHERE ordering_key = 'pay'}),
	"$pay[0]:t,$pay[1]:f,$pay[2]:f", '7. a move placed and taken back inside a savepoint is not placed again');
# With the constraints immediate each message is placed at the end of its statement, once:
# the next one's placement does not number it again.
my $imm_head = $node->safe_psql('postgres', enqueue_sql('s16', 'ih', 'imm'));
my @imm = split /\n/, $node->safe_psql('postgres', join ';', 'BEGIN', 'SET CONSTRAINTS ALL IMMEDIATE',
	enqueue_sql('s16', 'i1', 'imm'),
	q{SELECT ordering_seq FROM outbox.messages WHERE endpoint = 's16' AND payload->>'n' = 'i1'},
	enqueue_sql('s16', 'i2', 'imm'),
	q{SELECT ordering_seq FROM outbox.messages WHERE endpoint = 's16' AND payload->>'n' = 'i1'}, 'COMMIT');
is($imm[3], $imm[1], '7. with the constraints immediate, a placed message is not numbered again');

# Savepoints and the heads a transaction takes away (helper-29's review): each key below
# must end with one head and its messages in commit order.
sub key_line
{
	my ($key) = @_;
	return $node->safe_psql('postgres',
		"SELECT string_agg(format('%s:%s', id, ordering_seq IS NULL), ',' ORDER BY ordering_seq NULLS FIRST, id)
		   FROM outbox.messages WHERE endpoint = 's16' AND ordering_key = '$key'");
}
sub id_of_tag
{
	my ($tag) = @_;
	return "(SELECT id FROM outbox.messages WHERE endpoint = 's16' AND payload->>'n' = '$tag')";
}
# A move rolled back by an outer savepoint, after an inner one took back its placement.
my @n1 = map { $node->safe_psql('postgres', enqueue_sql('s16', "n1$_", 'n1')) } qw(h f g);
my ($n1x) = split /\n/, $node->safe_psql('postgres', join ';', 'BEGIN', "DELETE FROM outbox.messages WHERE id = $n1[0]",
	'SAVEPOINT a', "UPDATE outbox.messages SET ordering_key = 'n1-tmp' WHERE id = $n1[1]", 'SAVEPOINT b',
	'SET CONSTRAINTS ALL IMMEDIATE', 'ROLLBACK TO SAVEPOINT b', 'ROLLBACK TO SAVEPOINT a',
	enqueue_sql('s16', 'n1x', 'n1'), 'COMMIT');
is(key_line('n1'), "$n1[1]:t,$n1[2]:f,$n1x:f", '7. a move rolled back by an outer savepoint is not placed');
# A message placed at the top level, then moved and placed inside a savepoint rolled back:
# it keeps its first place (its insert's trigger, still pending, finds it placed).
$node->safe_psql('postgres', enqueue_sql('s16', 'n2m', 'n2m'));
$node->safe_psql('postgres', join ';', 'BEGIN', enqueue_sql('s16', 'n2x', 'n2'), enqueue_sql('s16', 'n2y', 'n2'),
	q{UPDATE outbox.messages SET ordering_key = 'n2m-b' WHERE endpoint = 's16' AND ordering_key = 'n2m'},
	'SET CONSTRAINTS outbox.messages_moved_at_commit IMMEDIATE', 'SAVEPOINT s',
	"UPDATE outbox.messages SET ordering_key = 'n2-tmp' WHERE id = " . id_of_tag('n2x'), 'ROLLBACK TO SAVEPOINT s',
	'COMMIT');
my ($n2x, $n2y) = map { $node->safe_psql('postgres', "SELECT " . id_of_tag($_)) } 'n2x', 'n2y';
is(key_line('n2'), "$n2x:t,$n2y:f", '7. a placed message moved in a savepoint rolled back keeps its place');
# A move a savepoint takes back, of a row the transaction wrote before (it became the head
# when the transaction deleted the head): not placed at commit.
my @n3 = map { $node->safe_psql('postgres', enqueue_sql('s16', "n3$_", 'n3')) } qw(h f g);
my ($n3x) = split /\n/, $node->safe_psql('postgres', join ';', 'BEGIN', "DELETE FROM outbox.messages WHERE id = $n3[0]",
	'SAVEPOINT s', "UPDATE outbox.messages SET ordering_key = 'n3-tmp' WHERE id = $n3[1]", 'ROLLBACK TO SAVEPOINT s',
	enqueue_sql('s16', 'n3x', 'n3'), 'COMMIT');
is(key_line('n3'), "$n3[1]:t,$n3[2]:f,$n3x:f", '7. a move a savepoint took back is not placed, the head it got kept');
# A transaction that enqueues to a key and then deletes its head: the key's next message
# heads it (the new row, not placed yet, looked like a head when the head left).
my @n4 = map { $node->safe_psql('postgres', enqueue_sql('s16', "n4$_", 'n4')) } qw(h f);
my ($n4x) = split /\n/, $node->safe_psql('postgres', join ';', 'BEGIN', enqueue_sql('s16', 'n4x', 'n4'),
	"DELETE FROM outbox.messages WHERE id = $n4[0]", 'COMMIT');
is(key_line('n4'), "$n4[1]:t,$n4x:f", '7. enqueue to a key, then delete its head: the next message heads it');
# The same while another session deletes the key's next message: no deadlock (helper-30):
# the next message is promoted by the head's DELETE, as for any DELETE, and the other
# session's DELETE then waits for it and promotes the one after.
my @n5 = map { $node->safe_psql('postgres', enqueue_sql('s16', "n5$_", 'n5')) } qw(h f g);
my $producer = $node->background_psql('postgres');
$producer->query_safe('BEGIN');
my $n5x = $producer->query_safe(enqueue_sql('s16', 'n5x', 'n5'));
$producer->query_safe("DELETE FROM outbox.messages WHERE id = $n5[0]");
my $other = delete_in_background($n5[1]);
ok(waits_for_lock($n5[1]), "7. the other session's DELETE of the next message waits for the producer");
$producer->query_safe('COMMIT');
$producer->quit;
$other->quit;
is(key_line('n5'), "$n5[2]:t,$n5x:f", '7. ... both commit: the message after heads the key, the enqueued one follows');
# With the constraints immediate, a plain INSERT of several rows (or a COPY) is placed at
# the end of its statement, all its rows together: into a key with no message, the lowest
# id heads it and the others follow in id order; into a key with a head, all follow it.
# (Each row's trigger fires before the statement's rows are noted: placed one by one, each
# took the others for the key's messages and the key had no head.)
# Runs @sql with the constraints immediate; returns the key's ids as key_line shows them
# when the first of them is its head and the others follow in id order.
sub inserted_immediately
{
	my ($key, @sql) = @_;
	$node->safe_psql('postgres', join ";\n", 'BEGIN', 'SET CONSTRAINTS ALL IMMEDIATE', @sql, 'COMMIT');
	my ($head, @followers) = split /\n/,
	  $node->safe_psql('postgres', "SELECT id FROM outbox.messages WHERE endpoint = 's16' AND ordering_key = '$key' ORDER BY id");
	return join ',', "$head:t", map { "$_:f" } @followers;
}
my $bulk_insert = q{INSERT INTO outbox.messages (endpoint, payload, ordering_key)
	SELECT 's16', jsonb_build_object('n', 'b' || i), '%s' FROM generate_series(1, 3) i};
my $m1 = inserted_immediately('m1', sprintf($bulk_insert, 'm1'));
is(key_line('m1'), $m1, '7. constraints immediate: a 3-row INSERT into an empty key gives it one head, in id order');
my $m2 = inserted_immediately('m2',
	q{COPY outbox.messages (endpoint, payload, ordering_key) FROM PROGRAM $$printf 's16\t{}\tm2\ns16\t{}\tm2\n'$$},
	sprintf($bulk_insert, 'm2-other'));
is(key_line('m2'), $m2, '7. ... a COPY of two rows too');
$node->safe_psql('postgres', enqueue_sql('s16', 'm3h', 'm3'));
my $m3 = inserted_immediately('m3', sprintf($bulk_insert, 'm3'));
is(key_line('m3'), $m3, '7. ... into a key with a head: they all follow it');
# ... also when, before the statement's rows are noted, a trigger of the application
# inserts into the queue in a statement of its own (helper-31's review: that statement's
# placement took the turn of the outer one, whose rows were never placed: three heads).
$node->safe_psql('postgres', sprintf(q{SELECT outbox.create_endpoint('u52', url => '%s');
	SELECT outbox.pause_endpoint('u52');
	CREATE FUNCTION public.copy_to_u52() RETURNS trigger LANGUAGE plpgsql AS
	  $$ BEGIN INSERT INTO outbox.messages (endpoint, payload) VALUES ('u52', NEW.payload); RETURN NULL; END $$;
	CREATE TRIGGER zz_copy_to_u52 AFTER INSERT ON outbox.messages FOR EACH ROW
	  WHEN (NEW.ordering_key = 'm4') EXECUTE FUNCTION public.copy_to_u52()}, $recv->url('/hooks/u52')));
my $m4 = inserted_immediately('m4', sprintf($bulk_insert, 'm4'));
$node->safe_psql('postgres', 'DROP TRIGGER zz_copy_to_u52 ON outbox.messages');
is(key_line('m4'), $m4, '7. ... and when a trigger inserts into the queue meanwhile');
# A message whose key a trigger of the application changes after outbox's own trigger
# looked (so that it was not noted as moved) is still placed at commit: it follows the
# head of its new key.
my $m5_head = $node->safe_psql('postgres', enqueue_sql('s16', 'm5h', 'm5'));
my $m5_moved = $node->safe_psql('postgres', enqueue_sql('s16', 'm5m', 'm5-src'));
$node->safe_psql('postgres', q{CREATE FUNCTION public.rekey() RETURNS trigger LANGUAGE plpgsql AS
	  $$ BEGIN IF NEW.payload ? 'rekey' THEN NEW.ordering_key := NEW.payload->>'rekey'; END IF; RETURN NEW; END $$;
	CREATE TRIGGER n_rekey BEFORE UPDATE ON outbox.messages FOR EACH ROW EXECUTE FUNCTION public.rekey()});
$node->safe_psql('postgres', "UPDATE outbox.messages SET ordering_key = ordering_key, payload = '{\"rekey\": \"m5\"}'
	WHERE id = $m5_moved");
is(key_line('m5'), "$m5_head:t,$m5_moved:f", '7. a message a trigger of the application moved follows its new head');
# The same move made in a savepoint that is rolled back is taken back with it: the key it
# left keeps its head (helper-32: the committed head was numbered behind its follower).
my @m6 = map { $node->safe_psql('postgres', enqueue_sql('s16', "m6$_", 'm6')) } qw(h f);
$node->safe_psql('postgres', join ";\n", 'BEGIN', 'SAVEPOINT s', 'SET CONSTRAINTS ALL IMMEDIATE',
	"UPDATE outbox.messages SET ordering_key = ordering_key, payload = '{\"rekey\": \"m6-b\"}' WHERE id = $m6[0]",
	'ROLLBACK TO SAVEPOINT s', sprintf($bulk_insert, 'm6-c'), 'COMMIT');
# A follower so moved into a key with no message heads it: the number it had goes
# (helper-33: it kept it, and the key had no head).
my @m9 = map { $node->safe_psql('postgres', enqueue_sql('s16', "m9$_", 'm9-src')) } qw(h f);
$node->safe_psql('postgres', "UPDATE outbox.messages SET ordering_key = ordering_key, payload = '{\"rekey\": \"m9\"}'
	WHERE id = $m9[1]");
$node->safe_psql('postgres', 'DROP TRIGGER n_rekey ON outbox.messages');
is(key_line('m6'), "$m6[0]:t,$m6[1]:f", '7. ... and a savepoint that takes that move back leaves its key as it was');
is(key_line('m9'), "$m9[1]:t", '7. ... and a follower it moves into a key with no message heads it');
# A trigger of the application that inserts into the same key, constraints immediate: the
# outer row heads the key, the inner one follows (helper-32: both followed).
$node->safe_psql('postgres', q{CREATE FUNCTION public.dup_in_key() RETURNS trigger LANGUAGE plpgsql AS
	  $$ BEGIN INSERT INTO outbox.messages (endpoint, payload, ordering_key) VALUES ('s16', '{"inner": 1}', NEW.ordering_key);
	     RETURN NULL; END $$;
	CREATE TRIGGER zz_dup_in_key AFTER INSERT ON outbox.messages FOR EACH ROW
	  WHEN (NEW.ordering_key = 'm7' AND NOT NEW.payload ? 'inner') EXECUTE FUNCTION public.dup_in_key()});
my $m7 = inserted_immediately('m7', q{INSERT INTO outbox.messages (endpoint, payload, ordering_key) VALUES ('s16', '{}', 'm7')});
$node->safe_psql('postgres', 'DROP TRIGGER zz_dup_in_key ON outbox.messages');
is(key_line('m7'), $m7, '7. ... and when that trigger inserts into the same key');
# ... or tries to, in a block that catches its error: the outer row is still placed, behind
# the key's head (helper-33: the rolled-back block took its placement away; two heads).
$node->safe_psql('postgres', q{CREATE FUNCTION public.try_in_key() RETURNS trigger LANGUAGE plpgsql AS
	  $$ BEGIN
	       BEGIN
	         INSERT INTO outbox.messages (endpoint, payload, ordering_key) VALUES ('s16', '{"inner": 1}', NEW.ordering_key);
	         RAISE EXCEPTION 'given up';
	       EXCEPTION WHEN others THEN NULL;
	       END;
	       RETURN NULL;
	     END $$;
	CREATE TRIGGER zz_try_in_key AFTER INSERT ON outbox.messages FOR EACH ROW
	  WHEN (NEW.ordering_key = 'm10' AND NOT NEW.payload ? 'inner') EXECUTE FUNCTION public.try_in_key()});
my $m10_head = $node->safe_psql('postgres', enqueue_sql('s16', 'm10h', 'm10-h'));
$node->safe_psql('postgres', "UPDATE outbox.messages SET ordering_key = 'm10' WHERE id = $m10_head");
my $m10 = inserted_immediately('m10', q{INSERT INTO outbox.messages (endpoint, payload, ordering_key) VALUES ('s16', '{}', 'm10')});
$node->safe_psql('postgres', 'DROP TRIGGER zz_try_in_key ON outbox.messages');
is(key_line('m10'), $m10, '7. ... or when it tries to and its block is rolled back');
# A row the transaction inserted in one key and moved into another where it inserted
# another row, then a DELETE that promotes in the first key: the moved row heads its new
# key, the other follows (helper-32: the moved row was placed alone and followed it).
my ($m8) = split /\n/, $node->safe_psql('postgres', join ";\n", 'BEGIN',
	q{INSERT INTO outbox.messages (endpoint, payload, ordering_key) VALUES ('s16', '{"n": "m8e"}', 'm8-a') RETURNING id},
	q{INSERT INTO outbox.messages (endpoint, payload, ordering_key) VALUES ('s16', '{"n": "m8i"}', 'm8')},
	q{UPDATE outbox.messages SET ordering_key = 'm8' WHERE endpoint = 's16' AND payload->>'n' = 'm8e'}, 'COMMIT');
is(key_line('m8'), "$m8:t," . $node->safe_psql('postgres', 'SELECT ' . id_of_tag('m8i')) . ':f',
	'7. a row inserted, then moved into a key where the transaction inserted another: it heads it');

# The worker holds a key's next message to claim it itself once the head is sent; moved
# meanwhile behind another key's head (not due for an hour), it is not sent.
$node->safe_psql('postgres', sprintf(q{SELECT outbox.create_endpoint('s18', url => '%s', ordered => true);
	SELECT outbox.pause_endpoint('s18')}, $recv->url('/hooks/s18')));
my ($lead, $next18) = map { $node->safe_psql('postgres', enqueue_sql('s18', $_, 'a18')) } 'lead', 'next';
my $later = $node->safe_psql('postgres',
	q{SELECT outbox.enqueue('s18', '{"n": "later"}', ordering_key => 'b18', deliver_at => now() + interval '1 hour')});
my $s18 = $node->background_psql('postgres');
$s18->query_safe('BEGIN');
$s18->query_safe("SELECT 1 FROM outbox.messages WHERE id = $next18 FOR UPDATE");
$node->safe_psql('postgres', q{SELECT outbox.resume_endpoint('s18')});
ok(wait_sent('s18', 1), '7. the head is sent while its next message is locked');
$s18->query_safe("UPDATE outbox.messages SET ordering_key = 'b18' WHERE id = $next18");
$s18->query_safe('COMMIT');
$s18->quit;
sleep 3;
is( $node->safe_psql('postgres', "SELECT count(*) FROM outbox.history WHERE id = $next18")
	  . ':' . scalar(grep { $_ == $next18 } delivered_ids('/hooks/s18')),
	'0:0', '7. a next message moved behind a head that is not due is not sent');

# A message being delivered cannot change key (55006), and stays as it was.
$node->safe_psql('postgres', sprintf(q{SELECT outbox.create_endpoint('s17', url => '%s', ordered => true)},
	$recv->url('/hooks/s17')));
$recv->add_rule(path => '/hooks/s17', delay_ms => 3000);
my $flying = $node->safe_psql('postgres', enqueue_sql('s17', 'f', 'k17'));
ok(wait_sql($node, "SELECT EXISTS (SELECT FROM outbox.claims WHERE message_ids @> ARRAY[$flying]::bigint[])", 30),
	'7. the message is in flight');
my ($rc17, $o17, $e17) = $node->psql('postgres', "UPDATE outbox.messages SET ordering_key = 'other' WHERE id = $flying",
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($e17, qr/55006.*message $flying is being delivered/s, '7. moving a message in flight is refused with 55006');
is($node->safe_psql('postgres', "SELECT ordering_key FROM outbox.messages WHERE id = $flying"), 'k17', '7. ... and it keeps its key');
ok(wait_sent('s17', 1), '7. ... and is delivered');
$recv->clear_rules;

# --- 8. A blocked key costs the claim nothing ------------------------------------------
# 20,000 messages wait behind a head whose request hangs; 200 messages of other keys
# flow meanwhile. The claim index is read for those, never for the 20,000.
$recv->add_rule(path => '/hooks/s8', action => 'hang', times => 1);    # the head's request: no answer
$node->safe_psql('postgres', sprintf(q{SELECT outbox.create_endpoint('s8', url => '%s', ordered => true);
	SELECT outbox.create_endpoint('s8m', url => '%s')}, $recv->url('/hooks/s8'), $recv->url('/hooks/s8m')));
$node->safe_psql('postgres', q{SELECT outbox.enqueue('s8', '{"n": "blocked-head"}', ordering_key => 'hot')});
ok($recv->wait_requests('/hooks/s8', 1, 30), "8. the head's request reached the receiver (it hangs there)");
$node->safe_psql('postgres', q{SELECT outbox.enqueue('s8', jsonb_build_object('n', i), ordering_key => 'hot')
	FROM generate_series(1, 20000) i});
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.messages WHERE endpoint = 's8' AND ordering_seq IS NOT NULL}),
	20000, '8. 20,000 messages wait behind the blocked head');
# Statistics reach the shared counters at most once a second (a session's at its exit,
# the worker's after a transaction), so they are waited for, not slept on.  A session
# flushes its statistics on its way out, before it leaves pg_stat_activity: once no
# other session is left, the index reads of the sessions before (the 20,000 enqueued
# above, the 200 below) are all counted.  The worker flushes what it has counted
# together, so its rows moved into the history show when the index reads of the claims
# before them are counted too: the baseline waits for a marker message sent after the
# 20,000 (what the worker reads as they arrive - seen at 180,000 entries - belongs
# before it), the measurement for the 200.
my $SESSIONS_GONE = q{SELECT count(*) = 0 FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()};
my $IDX_READ = q{SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelname = 'messages_claim_idx'};
# Rows moved into the history (every partition): only the worker's settle writes
# there, after the claims of what it settles.
my $HIST_INS = q{SELECT coalesce(sum(s.n_tup_ins), 0) FROM pg_partition_tree('outbox.history') t
	JOIN pg_stat_user_tables s ON s.relid = t.relid};
my $hist_mark = $node->safe_psql('postgres', $HIST_INS);
$node->safe_psql('postgres', q{SELECT outbox.enqueue('s8m', '{"n": "marker"}')});
ok(wait_until(sub { $node->safe_psql('postgres', $HIST_INS) > $hist_mark }, 60, 'the marker in the statistics'),
	"8. a marker sent after the 20,000 shows in the worker's statistics (its reads so far are counted)");
ok(wait_sql($node, $SESSIONS_GONE, 60), '8. the sessions before the baseline have gone (their statistics with them)');
my $read_before = $node->safe_psql('postgres', $IDX_READ);
my $hist_before = $node->safe_psql('postgres', $HIST_INS);
for my $i (1 .. 20)
{
	$node->safe_psql('postgres', join '',
		map { "SELECT outbox.enqueue('s8', '{}', ordering_key => 'other-$i-$_');" } 1 .. 10);
}
ok(wait_sent('s8', 200), '8. the 200 messages of other keys sent beside the blocked head');
ok(wait_sql($node, $SESSIONS_GONE, 60), '8. the sessions that enqueued the 200 have gone (their statistics with them)');
ok(wait_until(sub { $node->safe_psql('postgres', $HIST_INS) - $hist_before >= 200 }, 60,
		"the worker's statistics of the 200"),
	"8. the worker's statistics of the 200 have reached the shared counters");
my $read = $node->safe_psql('postgres', $IDX_READ) - $read_before;
note "claim index entries read while 200 messages flowed beside the blocked key: $read";
# Were the 20,000 in the claim index, every claim would read them all: the claims
# that sent these 200 messages together read fewer than one such claim would.
cmp_ok($read, '<', 20000, "8. the claims read $read index entries for 200 messages, not the 20,000 behind the head");

$recv->stop;
$node->stop;
done_testing();
