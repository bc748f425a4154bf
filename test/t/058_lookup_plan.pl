#!/usr/bin/perl
# The plans of the worker's lookup of an ordered key's next messages
# (src/pg/ordering/successors.cpp), and of its settle, do not depend on when ANALYZE ran. Its head probe
# (endpoint, key, no number) is answered by messages_ordering_idx; messages_claim_idx
# (endpoint, next_attempt_at, for messages with no number) also qualifies, and an ANALYZE
# that finds no committed row in a table with pages in use (a drained queue, or one a
# producer's transaction is filling) made the generic plan probe each key through the
# claim index: every head of the endpoint walked for every key looked up. Here an
# ANALYZE runs while a backlog's insert is uncommitted (as autovacuum does), and the
# worker's plans are read from auto_explain while the backlog drains.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

# Autovacuum off: the ANALYZE below stands for the one autovacuum runs at a moment of
# its choosing, and a later one must not mend the statistics before the drain.
my $node = new_outbox_node(
	'lookup_plan',
	'shared_preload_libraries' => 'pg_outbox,auto_explain',
	'auto_explain.log_min_duration' => '-1',
	'auto_explain.log_nested_statements' => 'on',
	'autovacuum' => 'off');
sql($node, 'CREATE EXTENSION pg_outbox');
wait_for_worker($node);
my $recv = start_receiver();

my ($keys, $per_key) = (200, 10);
my $total = $keys * $per_key;
endpoint($node, $recv, 'line', '/hooks/line', ordered => 'true');
sql($node, q{SELECT outbox.pause_endpoint('line')});

# A producer fills the backlog in one transaction; ANALYZE runs before it commits.
my $producer = $node->background_psql('postgres');
$producer->query_safe('BEGIN');
$producer->query_safe(
	qq{SELECT count(outbox.enqueue('line', jsonb_build_object('key', 'k' || (g % $keys), 'seq', g),
                                   ordering_key => 'k' || (g % $keys)))
         FROM generate_series(1, $total) g});
sql($node, 'ANALYZE outbox.messages');
is( sql($node, q{SELECT reltuples = 0 AND relpages > 0 FROM pg_class WHERE oid = 'outbox.messages'::regclass}),
	't', 'ANALYZE saw pages in use and no committed row');
$producer->query_safe('COMMIT');
$producer->quit;

# Every statement's plan from now on, the worker's included.
my $offset = -s $node->logfile;
ok(reload_conf($node, 'auto_explain.log_min_duration' => '0'), 'auto_explain logs every plan');
sql($node, q{SELECT outbox.resume_endpoint('line')});
ok(wait_sql($node, qq{SELECT count(*) = $total FROM outbox.history WHERE endpoint = 'line'}, 120),
	"the ordered endpoint delivered its $total messages");
reload_conf($node, 'auto_explain.log_min_duration' => '-1');

my $log = log_since($node, $offset);
my $by_ordering = () = $log =~ /Index Scan using messages_ordering_idx on messages h\b/g;
my $by_claim = () = $log =~ /Index Scan using messages_claim_idx on messages h\b/g;
note("the lookup's head probe: $by_ordering plans by the ordering index, $by_claim by the claim index");
cmp_ok($by_ordering, '>', 0, 'the lookups ran, their head probe on the ordering index');
is($by_claim, 0, 'no lookup probed a head through the claim index');

# The settle finds the sent rows where the claim read them, by one TID scan of every
# place joined by hash to the (place, id) pairs: never through the primary key (after
# the same ANALYZE, its join to the places was planned as a walk of the whole primary
# key, each row filtered by place), nor by a TID scan for each place in a nested loop
# (each rescan asks the kernel for the queue's size).
my @settles = grep { /USING unnest\(\$4::tid\[\]/ } split /\n(?=\S[^\n]*LOG:  duration:)/, $log;
my @by_place = grep { /Hash Join/ && /TID Cond: \(ctid = ANY \(\$4\)\)/ && !/Nested Loop/ } @settles;
my @by_key = grep { /messages_pkey on messages m\b/ } @settles;
note(scalar(@settles) . ' settles by place: ' . scalar(@by_place) . ' by one TID scan joined by hash, ' . scalar(@by_key) . ' through the primary key');
cmp_ok(scalar(@settles), '>', 0, 'the settles found the rows by place');
is(scalar(@by_place), scalar(@settles), 'each by one TID scan of every place, joined by hash');
is(scalar(@by_key), 0, 'none through the primary key');

# And each key arrived in order, once.
is(keys_out_of_order($recv, '/hooks/line'), 0, 'every key arrived in its order');

$node->stop;
$recv->stop;
done_testing();
