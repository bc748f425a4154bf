#!/usr/bin/perl
# Provisional numbers (src/pg/ordering/ordering.hpp, kProvisionalSeq): outbox.enqueue and
# outbox.publish insert a keyed message of an ordered endpoint whose key already has a
# message (committed, or the transaction's own) with a provisional ordering_seq, so that
# its first version stays out of the claim index and the head's range of the ordering
# index; its commit places it as every keyed message is placed (docs/delivery.md,
# Ordering). What must hold:
#
#  1. Followers of a key with queued messages, and a transaction's later messages of a
#     key it began: provisional until the commit, then numbered in id order (a plain
#     INSERT's row among them, which comes without a number); delivered in commit order
#     after the key's earlier messages.
#  2. The guess was wrong: the key's only message left (an operator's DELETE) between
#     the enqueue and its commit; the provisional message becomes the key's head and is
#     delivered.
#  3. With the constraints immediate, each is placed at the end of its enqueue.
#  4. outbox.publish's rows to an ordered subscriber likewise.
#  5. Where the commit will not place a row (session_replication_role = replica, the
#     commit order's trigger disabled), no row goes in with a provisional number: it
#     would wait forever.
#  6. Provisional messages moved to another key by their own transaction: placed in the
#     key they are in at the commit.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use Encode ();
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_outbox_node('provisional_numbers');
sql($node, 'CREATE EXTENSION pg_outbox');
wait_for_worker($node);
my $recv = start_receiver();
my $json = JSON::PP->new->utf8;
my $provisional = '9223372036854775807';

endpoint($node, $recv, 'p', '/hooks/p', ordered => 'true');
sql($node, q{SELECT outbox.pause_endpoint('p')});

sub enqueue
{
	my ($key, $n) = @_;
	return qq{SELECT outbox.enqueue('p', jsonb_build_object('key', '$key', 'n', $n), ordering_key => '$key')};
}

# The numbers of these messages, in id order: "head" for none, "provisional", or the
# number's rank among them ("1", "2", ...: ordering_seq in id order).
sub places
{
	my ($key, $db_session) = @_;
	my $q = qq{SELECT string_agg(CASE WHEN ordering_seq IS NULL THEN 'head'
	                                  WHEN ordering_seq = $provisional THEN 'provisional'
	                                  ELSE 'n' END, ',' ORDER BY id)
	             FROM outbox.messages WHERE ordering_key = '$key'};
	return $db_session ? $db_session->query_safe($q) : sql($node, $q);
}

# 1. A key with a queued message, and a key that a transaction begins.
sql($node, enqueue('a', 1));
my $inside = sql($node, join(";\n",
		'BEGIN', enqueue('a', 2),
		q{INSERT INTO outbox.messages (endpoint, payload, ordering_key) VALUES ('p', '{"key": "a", "n": 3}', 'a')},
		enqueue('b', 1), enqueue('b', 2), enqueue('b', 3),
		q{SELECT string_agg(ordering_key || ':' || coalesce(ordering_seq::text, 'head'), ' ' ORDER BY id)
		    FROM outbox.messages WHERE ordering_key IN ('a', 'b') AND xmin = pg_current_xact_id()::xid},
		'COMMIT'));
my @inside_lines = split /\n/, $inside;
is( $inside_lines[-1],
	"a:$provisional a:head b:head b:$provisional b:$provisional",
	'before the commit: followers of a queued key and of a key the transaction began are provisional'
	  . ' (not a plain INSERT\'s row)');
is(places('a'), 'head,n,n', 'at commit: the followers of a are numbered');
is(places('b'), 'head,n,n', '... and b has its first message as head, the others numbered');
is( sql($node, q{SELECT bool_and(ordering_seq > 0) AND count(DISTINCT ordering_seq) = count(*)
                   FROM outbox.messages WHERE ordering_key IN ('a', 'b') AND ordering_seq IS NOT NULL}),
	't', 'every number is a real one (drawn from outbox.commit_order), one each');
is( sql($node, q{SELECT count(*) = 0 FROM (
                   SELECT id, ordering_seq, lag(ordering_seq) OVER (PARTITION BY ordering_key ORDER BY id) AS before
                     FROM outbox.messages WHERE ordering_key IN ('a', 'b') AND ordering_seq IS NOT NULL) s
                  WHERE s.before > s.ordering_seq}),
	't', 'numbered in id order within the transaction, a plain INSERT\'s row among provisional ones');

# 2. The key's only message leaves before the commit: the provisional one is the head.
sql($node, enqueue('c', 1));
my $producer = $node->background_psql('postgres');
$producer->query_safe('BEGIN');
$producer->query_safe(enqueue('c', 2));
is(places('c', $producer), 'head,provisional', 'c: enqueued behind a queued message, provisional');
sql($node, q{DELETE FROM outbox.messages WHERE ordering_key = 'c' AND ordering_seq IS NULL});
$producer->query_safe('COMMIT');
is(places('c'), 'head', 'the queued message gone by the commit: the provisional one is the head');

# 3. Immediate constraints: placed at the end of each enqueue.
is( sql($node, join(";\n",
			'BEGIN', 'SET CONSTRAINTS ALL IMMEDIATE', enqueue('d', 1), enqueue('d', 2), enqueue('a', 4),
			q{SELECT string_agg(ordering_key || ':' || CASE WHEN ordering_seq IS NULL THEN 'head'
			                    WHEN ordering_seq = 9223372036854775807 THEN 'provisional' ELSE 'n' END, ' ' ORDER BY id)
			    FROM outbox.messages WHERE xmin = pg_current_xact_id()::xid},
			'COMMIT')) =~ s/.*\n//sr,
	'd:head d:n a:n',
	'with the constraints immediate, each enqueue places its message at once');

# 4. outbox.publish to an ordered subscriber.
sql($node, q{SELECT outbox.subscribe('p', ARRAY['order.created'])});
sql($node, join(";\n",
		'BEGIN',
		q{SELECT outbox.publish('order.created', '{"key": "a", "n": 5}', ordering_key => 'a')},
		q{SELECT outbox.publish('order.created', '{"key": "e", "n": 1}', ordering_key => 'e')},
		q{SELECT outbox.publish('order.created', '{"key": "e", "n": 2}', ordering_key => 'e')},
		'COMMIT'));
is(places('a'), 'head,n,n,n,n', 'publish: a follower of a queued key is numbered');
is(places('e'), 'head,n', 'publish: a key the transaction began has a head and a follower');

# 5. Where the commit would not place it, no provisional number.
sql($node, enqueue('f', 1));
is( sql($node, join(";\n",
			'BEGIN', 'SET LOCAL session_replication_role = replica', enqueue('f', 2),
			q{SELECT count(*) FROM outbox.messages WHERE ordering_seq = 9223372036854775807},
			'COMMIT')) =~ s/.*\n//sr,
	'0', 'session_replication_role = replica: no provisional number (no commit places it)');
sql($node, 'ALTER TABLE outbox.messages DISABLE TRIGGER messages_order_at_commit');
sql($node, enqueue('f', 3));
sql($node, 'ALTER TABLE outbox.messages ENABLE TRIGGER messages_order_at_commit');
is( sql($node, q{SELECT count(*) FROM outbox.messages WHERE ordering_seq = 9223372036854775807}),
	'0', 'the commit order trigger disabled: none either; nothing is left provisional');
# f's rows were not placed (heads all: no order is kept without the trigger): out of the way.
sql($node, q{DELETE FROM outbox.messages WHERE ordering_key = 'f'});

# 6. Provisional messages that their own transaction moves to another key: placed in the
#    key they are in at the commit, the head of an empty one, a follower of a busy one.
sql($node, join(";\n",
		'BEGIN',
		q{SELECT outbox.enqueue('p', '{"key": "g", "n": 1}', ordering_key => 'a')},
		q{SELECT outbox.enqueue('p', '{"key": "b", "n": 4}', ordering_key => 'e')},
		q{UPDATE outbox.messages SET ordering_key = payload->>'key'
		   WHERE ordering_seq = 9223372036854775807 AND ordering_key <> payload->>'key'},
		'COMMIT'));
is(places('g'), 'head', 'moved into an empty key: its head');
is(places('b'), 'head,n,n,n', 'moved into a busy key: numbered behind it');

# Every message is delivered, each key in its order.
my $total = sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'p'});
is($total, 15, 'fifteen messages wait');
sql($node, q{SELECT outbox.resume_endpoint('p')});
ok(wait_sql($node, qq{SELECT count(*) = $total FROM outbox.history WHERE endpoint = 'p'}), 'all of them delivered');
my %order;
for my $r (sort { $a->{seq} <=> $b->{seq} } @{ $recv->requests(path => '/hooks/p') })
{
	my $p = $json->decode(Encode::encode('UTF-8', $r->{body}));
	push @{ $order{ $p->{key} } }, $p->{n};
}
is(join(',', @{ $order{a} }), '1,2,3,4,5', 'a in commit order');
is(join(',', @{ $order{b} }), '1,2,3,4',   'b in its order, the message moved into it last');
is(join(',', @{ $order{c} }), '2',         'c: the message that became the head');
is(join(',', @{ $order{d} }), '1,2',       'd in its order');
is(join(',', @{ $order{e} }), '1,2',       'e in its order');
is(join(',', @{ $order{g} }), '1',         'g: the message moved into it');

$producer->quit;
$node->stop;
$recv->stop;
done_testing();
