# max_pending from a maintained count (issue 10 item 5; src/pg/queued_count.cpp):
# enqueue checks an endpoint's max_pending against a count kept in shared memory, not by
# counting rows, and the count stays right.
#
#  1. Exactly max_pending messages are accepted, the next is refused (53400); messages of
#     a transaction still open count (two producers cannot both take the last place);
#     a rolled-back transaction or subtransaction gives its places back; enqueues with
#     idempotency keys count once each.
#  2. 100 enqueues to an endpoint with 50,000 queued make no index scan of
#     outbox.messages (counting rows would make 200).
#  3. Deliveries take their messages off the count; a plain INSERT adds to it; an
#     operator's DELETE and a worker restart make the worker count again, exactly.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_outbox_node('max_pending_count');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $recv = start_receiver();

sub create
{
	my ($name, $max) = @_;
	sql($node, sprintf(q{SELECT outbox.create_endpoint('%s', url => '%s', max_pending => %d);
	              SELECT outbox.pause_endpoint('%s')}, $name, $recv->url("/hooks/$name"), $max, $name));
	ok(wait_sql($node, "SELECT counted FROM outbox._queued_counts() WHERE endpoint = '$name'", 30),
		"the worker counted the queue of $name");
}

sub kept
{
	my ($name) = @_;
	return sql($node, "SELECT committed || '/' || reserved FROM outbox._queued_counts() WHERE endpoint = '$name'");
}

sub enqueue_sql { return "SELECT outbox.enqueue('$_[0]', '{}')" }

# --- 1. The limit, open transactions, rollbacks ---------------------------------------
create('mp', 50);
is(kept('mp'), '0/0', '1. the worker counted the new endpoint: 0 committed, 0 reserved');
sql($node, enqueue_sql('mp')) for 1 .. 50;
is(kept('mp'), '50/0', '1. 50 committed enqueues are counted');
my ($rc, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n" . enqueue_sql('mp'));
like($err, qr/53400: endpoint "mp" has reached max_pending \(50\)/, '1. the 51st is refused (53400)');
is(sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'mp'}), 50, '1. ... and not inserted');

create('mp2', 10);
my $p = $node->background_psql('postgres');
$p->query_safe('BEGIN');
$p->query_safe(enqueue_sql('mp2')) for 1 .. 6;
is(kept('mp2'), '0/6', '1. an open transaction\'s 6 messages are reserved');
($rc, $out, $err) = $node->psql('postgres', join(';', 'BEGIN', (map { enqueue_sql('mp2') } 1 .. 5), 'COMMIT'));
like($err, qr/reached max_pending \(10\)/, '1. another producer gets the 4 places left, not 5');
is(kept('mp2'), '0/6', '1. ... its failed transaction gave its 4 back');
$p->query_safe('SAVEPOINT s');
$p->query_safe(enqueue_sql('mp2')) for 1 .. 3;
is(kept('mp2'), '0/9', '1. a subtransaction reserves 3 more');
$p->query_safe('ROLLBACK TO SAVEPOINT s');
is(kept('mp2'), '0/6', '1. rolled back, it gives them back');
$p->query_safe('COMMIT');
is(kept('mp2'), '6/0', '1. at commit the 6 are committed');
$p->query_safe('BEGIN');
$p->query_safe(enqueue_sql('mp2')) for 1 .. 4;
$p->query_safe('ROLLBACK');
is(kept('mp2'), '6/0', '1. a rolled-back transaction leaves nothing');
# An enqueue with an idempotency key inserts with a statement whose trigger counts the row
# (the reservation is given back); a retry of a queued key is not counted again.
create('mpk', 3);
sql($node, "SELECT outbox.enqueue('mpk', '{}', idempotency_key => 'k$_')") for 1 .. 3;
sql($node, q{SELECT outbox.enqueue('mpk', '{}', idempotency_key => 'k1')});
is(kept('mpk'), '3/0', '1. 3 enqueues with idempotency keys, and a retry of one, count 3');
($rc, $out, $err) = $node->psql('postgres', q{SELECT outbox.enqueue('mpk', '{}', idempotency_key => 'k4')});
like($err, qr/reached max_pending \(3\)/, '1. ... and the 4th key is refused');

# --- 2. No row is counted on enqueue ----------------------------------------------------
create('big', 1000000);
sql($node, q{INSERT INTO outbox.messages (endpoint, payload) SELECT 'big', '{}' FROM generate_series(1, 50000)});
is(kept('big'), '50000/0', '2. a plain INSERT of 50,000 rows is counted');
my $scans = (split /\n/, sql($node, join '', 'BEGIN;', (map { enqueue_sql('big') . ';' } 1 .. 100),
	q{SELECT idx_scan + seq_scan FROM pg_stat_xact_user_tables WHERE relid = 'outbox.messages'::regclass;},
	'COMMIT;'))[-1];
is($scans, 0, '2. 100 enqueues beside 50,000 queued messages scan outbox.messages 0 times');
is(kept('big'), '50100/0', '2. and are counted');

# --- 3. Deliveries, operators, restarts --------------------------------------------------
sql($node, q{SELECT outbox.resume_endpoint('mp')});
ok(wait_sql($node, q{SELECT count(*) = 0 FROM outbox.messages WHERE endpoint = 'mp'}, 30), '3. mp delivers its 50');
ok(wait_sql($node, q{SELECT committed = 0 FROM outbox._queued_counts() WHERE endpoint = 'mp'}, 10),
	'3. and its count is back to 0');
sql($node, q{SELECT outbox.pause_endpoint('mp')});
sql($node, enqueue_sql('mp')) for 1 .. 20;
sql($node, q{DELETE FROM outbox.messages WHERE id IN (SELECT id FROM outbox.messages WHERE endpoint = 'mp' LIMIT 8)});
ok(wait_sql($node, q{SELECT committed = 12 FROM outbox._queued_counts() WHERE endpoint = 'mp'}, 10),
	'3. after an operator deleted 8 of 20, the worker counted 12');
sql($node, q{DELETE FROM outbox.messages WHERE endpoint = 'big' AND id % 2 = 0});
my $big = sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'big'});
ok(wait_sql($node, "SELECT committed = $big FROM outbox._queued_counts() WHERE endpoint = 'big'", 10),
	"3. ... and $big of big");
my $old = worker_pid($node);
sql($node, q{UPDATE outbox.messages SET endpoint = 'mp2' WHERE id IN (SELECT id FROM outbox.messages WHERE endpoint = 'mp' LIMIT 2)});
sql($node, "SELECT pg_terminate_backend($old)");
ok(defined wait_for_worker($node, $old), '3. a new worker runs after the old one was terminated');
ok(wait_sql($node, q{SELECT string_agg(endpoint || '=' || committed, ',' ORDER BY endpoint) = 'big=} . $big
		. q{,mp=10,mp2=8,mpk=3' FROM outbox._queued_counts() WHERE counted}, 30),
	'3. a new worker counts them all again (2 moved from mp to mp2 meanwhile)');
sql($node, q{SELECT outbox.alter_endpoint('mp2', max_pending => 8)});
($rc, $out, $err) = $node->psql('postgres', enqueue_sql('mp2'));
like($err, qr/reached max_pending \(8\)/, '3. mp2 refuses at its new max_pending');
$p->quit;

$recv->stop;
$node->stop;
done_testing();
