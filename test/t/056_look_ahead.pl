#!/usr/bin/perl
# The worker's look-ahead on an ordered endpoint (docs/delivery.md, Ordering;
# src/pg/ordering/successors.cpp): one lookup reads a key's next 32 messages, and the
# worker takes the later ones without a lookup as long as nobody else reordered the keyed
# messages of that endpoint. Readers of a pull endpoint acknowledge keyed messages all
# the time, and every acknowledgement used to drop the lines of every endpoint of the
# database: the worker then looked each key up again at every message. Judged from the
# rows the worker's lookup statement returned (pg_stat_statements) while an ordered
# endpoint drains beside a pull endpoint's reader, and from the receiver: each key in
# order.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_outbox_node(
	'look_ahead',
	'shared_preload_libraries' => 'pg_outbox,pg_stat_statements',
	'pg_stat_statements.track' => 'all');
sql($node, 'CREATE EXTENSION pg_outbox');
sql($node, 'CREATE EXTENSION pg_stat_statements');
wait_for_worker($node);
my $recv = start_receiver();

# The versions of the keys' order are kept per group of endpoints (64 groups, by an
# FNV-1a hash of the name and a unit separator, as core/ordering_lock.hpp): the two
# endpoints of this test must not share one, or the reader's acks would rightly count.
sub group_of
{
	my ($name) = @_;
	my $hash = 2166136261;
	for my $byte (unpack('C*', $name), 0x1f)
	{
		$hash ^= $byte;
		$hash = ($hash * 16777619) % 4294967296;
	}
	return $hash % 64;
}
isnt(group_of('line'), group_of('taker'), 'the two endpoints are in different groups');

my ($keys, $per_key) = (100, 50);
my $total = $keys * $per_key;
endpoint($node, $recv, 'line', '/hooks/line', ordered => 'true');
sql($node, q{SELECT outbox.pause_endpoint('line')});
sql($node, qq{INSERT INTO outbox.messages (endpoint, payload, ordering_key)
               SELECT 'line', jsonb_build_object('key', 'k' || (g % $keys), 'seq', g), 'k' || (g % $keys)
                 FROM generate_series(1, $total) g});
sql($node, q{SELECT outbox.create_endpoint('taker', pull => true, ordered => true)});
sql($node, q{INSERT INTO outbox.messages (endpoint, payload, ordering_key)
              SELECT 'taker', jsonb_build_object('n', g), 'p' || (g % 500) FROM generate_series(1, 50000) g});

# The reader: reads and acknowledges 5 keyed messages at a time, each in a transaction of
# its own; 60,000 rounds (a minute or more) bound it, and it is cancelled once the drain
# is over.
my $reader = $node->background_psql('postgres');
$reader->query_until(qr/reading/, q{\echo reading
DO $$
BEGIN
    FOR i IN 1 .. 60000 LOOP
        PERFORM outbox.ack('taker', ARRAY(SELECT id FROM outbox.read('taker', 5)));
        COMMIT;
        PERFORM pg_sleep(0.001);
    END LOOP;
END $$;
});
ok( wait_sql($node, q{SELECT count(*) >= 200 FROM outbox.history WHERE endpoint = 'taker'}),
	'the reader acknowledges keyed messages');
sql($node, 'SELECT pg_stat_statements_reset()');
my $acked = sql($node, q{SELECT count(*) FROM outbox.history WHERE endpoint = 'taker'});
sql($node, q{SELECT outbox.resume_endpoint('line')});
ok( wait_sql(
		$node, qq{SELECT count(*) = $total FROM outbox.history WHERE endpoint = 'line'}, 120),
	"the ordered endpoint delivered its $total messages");
my $acked_during = sql($node, q{SELECT count(*) FROM outbox.history WHERE endpoint = 'taker'}) - $acked;
cmp_ok($acked_during, '>=', 50, "... while the reader acknowledged keyed messages ($acked_during)");
$node->safe_psql('postgres',
	q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE '%outbox.read(''taker''%' AND pid <> pg_backend_pid()});
eval { $reader->quit; };

# Each lookup returns a key's next 32 messages (or fewer): with the look-ahead kept, about
# one row per message delivered; dropped at every acknowledgement, up to 32. Every message
# but a key's first (a head in the claim index) is found by a lookup: the statement is
# the one counted only if its rows cover them (its text changed once, and a pattern that
# matched nothing passed with no row at all).
my $rows = sql($node, q{SELECT coalesce(sum(rows), 0) FROM pg_stat_statements
                         WHERE query LIKE '%WITH ORDINALITY AS k(endpoint, ordering_key, after, i)%'});
my $per_message = $rows / $total;
note(sprintf('the lookups returned %d rows for %d messages: %.2f a message', $rows, $total, $per_message));
cmp_ok($rows, '>=', $total - $keys, 'the lookups counted found every message behind a head');
cmp_ok($per_message, '<', 2, 'the look-ahead holds: fewer than 2 rows looked up per message delivered');

# And each key arrived in order, once.
is(keys_out_of_order($recv, '/hooks/line'), 0, 'every key arrived in its order');

$node->stop;
$recv->stop;
done_testing();
