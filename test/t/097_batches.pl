#!/usr/bin/perl
# Batches (docs/delivery.md, "Batches"), judged from what the receiver got:
#
#  1. standard-webhooks, batch_size 10: 25 messages arrive as 10 + 10 + 5 in JSON arrays
#     of {id, type, payload} (headers when the message has some), each message exactly
#     once, in enqueue order; each batch is signed as one body under its own batch_ id
#     (verify_webhook_signature);
#  2. CloudEvents (structured and binary), batch_size 4: every request is
#     application/cloudevents-batch+json, and the CloudEvents SDK reads each element with
#     its message's id, type, source and time;
#  3. a batch of 100 that gets one 503 is retried whole: two requests with the same 100
#     ids, then all sent, each answered 2xx exactly once, outbox-attempt 2;
#  4. an ordered endpoint with batch_size 5: every key's messages arrive in commit
#     order, across batches (control: several keys share a batch);
#  5. pg_outbox.max_payload_size cuts batches: no body is over it, and every message
#     arrives once;
#  6. a message that cannot be sent as it stands (a non-string header, inserted
#     directly) is dead-lettered INVALID_MESSAGE alone; the others go as one batch;
#  7. batches queued behind a slow one (concurrency 1) go back whole when the endpoint
#     changes, and are made again at the new batch_size: each message sent once, no
#     attempt spent on the ones given back.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use JSON::PP ();
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_outbox_node('batches', 'pg_outbox.backoff_base' => '50ms', 'pg_outbox.backoff_max' => '200ms');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $recv = start_receiver();
my $SECRET = 'whsec_' . 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
my $json = JSON::PP->new->utf8;
my $prefix = webhook_prefix($node);

# The arrays the receiver got on $path, in arrival order.
sub arrays
{
	my ($path) = @_;
	return map { $json->decode(Encode::encode('UTF-8', $_->{body})) } @{ $recv->requests(path => $path) };
}

# Enqueues while the endpoint is paused, so that one claim takes them all.
sub enqueue_paused
{
	my ($ep, @calls) = @_;
	sql($node, "SELECT outbox.pause_endpoint('$ep')");
	my @ids = split /\n/, sql($node, join(' UNION ALL ', @calls));
	sql($node, "SELECT outbox.resume_endpoint('$ep')");
	return @ids;
}

use Encode ();

# Whether every batch lists its messages in ascending order of $key (enqueue order);
# batches of an unordered endpoint may arrive in any order.
sub ascending_inside
{
	my ($key, @batches) = @_;
	for my $b (@batches)
	{
		for my $i (1 .. $#$b) { return 0 unless $key->($b->[ $i - 1 ]) < $key->($b->[$i]) }
	}
	return 1;
}

# ---------------------------------------------------------------------------
# 1. Standard Webhooks, 25 in batches of 10
endpoint($node, $recv, 'sw10', '/b/sw10', batch_size => 10, secret => "'$SECRET'");
my @sw = enqueue_paused('sw10', map {
	my $type = $_ % 2 ? "'t.odd'" : 'NULL';
	my $headers = $_ == 3 ? q{'{"x-trace": "abc"}'} : 'NULL';
	"SELECT outbox.enqueue('sw10', '{\"n\": $_}', event_type => $type, headers => $headers)"
} 1 .. 25);
$recv->wait_requests('/b/sw10', 3, 30);
ok(wait_sql($node, q{SELECT count(*) = 25 FROM outbox.history WHERE endpoint = 'sw10'}), 'sw: all 25 sent');
my @reqs = @{ $recv->requests(path => '/b/sw10') };
my @arr = arrays('/b/sw10');
is_deeply([ sort { $b <=> $a } map { scalar @$_ } @arr ], [ 10, 10, 5 ], 'sw: three requests of 10, 10 and 5 messages');
my @elements = map { @$_ } @arr;
ok(ascending_inside(sub { $_[0]{payload}{n} }, @arr), 'sw: enqueue order inside each batch');
@elements = sort { $a->{payload}{n} <=> $b->{payload}{n} } @elements;
is_deeply([ map { $_->{id} } @elements ], [ map { "$prefix$_" } @sw ], 'sw: every message once, with its webhook-id');
is_deeply([ map { $_->{payload}{n} } @elements ], [ 1 .. 25 ], 'sw: each payload');
is_deeply([ map { $_->{type} } @elements[0 .. 3] ], [ 't.odd', undef, 't.odd', undef ],
	'sw: the event type, or null');
is_deeply([ sort keys %{ $elements[0] } ], [qw(id payload type)], 'sw: element shape {id, type, payload}');
is_deeply($elements[2]{headers}, { 'x-trace' => 'abc' }, "sw: a message's headers in its element");
for my $i (0 .. $#reqs)
{
	my $h = $reqs[$i]{headers};
	like($h->{'webhook-id'}, qr/^batch_[0-9a-f]{16}_\d+_\d+$/, "sw batch $i: its own batch id");
	is($h->{'content-type'}, 'application/json', "sw batch $i: content type");
	ok(verify_webhook_signature($SECRET, $h, $reqs[$i]{body}), "sw batch $i: the signature verifies over the body");
}
isnt($reqs[0]{headers}{'webhook-id'}, $reqs[1]{headers}{'webhook-id'}, 'sw: batches have different ids');

# ---------------------------------------------------------------------------
# 2. CloudEvents batches, parsed by the SDK
for my $format (qw(cloudevents-structured cloudevents-binary))
{
	(my $ep = $format) =~ s/cloudevents-/ce_/;
	endpoint($node, $recv, $ep, "/b/$ep", batch_size => 4, format => "'$format'");
	my @ids = enqueue_paused($ep,
		map { "SELECT outbox.enqueue('$ep', '{\"n\": $_}', event_type => 'order.$_')" } 1 .. 6);
	ok(wait_sql($node, "SELECT count(*) = 6 FROM outbox.history WHERE endpoint = '$ep'"), "$format: all sent");
	my @r = @{ $recv->requests(path => "/b/$ep") };
	my $out = run_node('parse_cloudevents.js',
		{ requests => [ map { { headers => $_->{headers}, body => $_->{body} } } @r ] });
	is(scalar(grep { $_->{ok} && $_->{batch} } @{ $out->{results} }), 2, "$format: two batches parse as batches")
	  or diag(explain($out));
	like($r[0]{headers}{'content-type'}, qr{^application/cloudevents-batch\+json}, "$format: batch content type");
	my @events = sort { $a->{data}{n} <=> $b->{data}{n} } map { @{ $_->{events} // [] } } @{ $out->{results} };
	is_deeply([ map { $_->{id} } @events ], [ map { "$prefix$_" } @ids ], "$format: ids are the webhook-ids");
	is_deeply([ map { $_->{type} } @events ], [ map { "order.$_" } 1 .. 6 ], "$format: types");
	is_deeply([ map { $_->{data}{n} } @events ], [ 1 .. 6 ], "$format: data");
	is(scalar(grep { $_->{source} eq "/pg_outbox/postgres/$ep" } @events), 6, "$format: source");
	my @times = split /\n/, sql($node, sprintf(
		q{SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') FROM outbox.history
		   WHERE id IN (%s) ORDER BY id}, join(',', @ids)));
	is_deeply([ map { $_->{time} } @events ], \@times, "$format: times (to the microsecond: the SDK keeps a batch's as sent)");
}

# ---------------------------------------------------------------------------
# 3. A batch of 100 answered 503 once is retried whole
endpoint($node, $recv, 'b100', '/b/b100', batch_size => 100);
$recv->add_rule(path => '/b/b100', status => 503, times => 1);
my @b100 = enqueue_paused('b100', map { "SELECT outbox.enqueue('b100', '{\"n\": $_}')" } 1 .. 100);
ok(wait_sql($node, q{SELECT count(*) = 100 FROM outbox.history WHERE endpoint = 'b100'}), 'b100: all 100 sent');
@reqs = @{ $recv->requests(path => '/b/b100') };
is(scalar @reqs, 2, 'b100: two requests');
@arr = arrays('/b/b100');
my @want = map { "$prefix$_" } @b100;
is_deeply([ map { $_->{id} } @{ $arr[0] } ], \@want, 'b100: the first request carried all 100');
is_deeply([ map { $_->{id} } @{ $arr[1] } ], \@want, 'b100: the retry carried the same 100');
is_deeply([ map { $_->{answered} } @reqs ], [ 503, 200 ], 'b100: 503, then 200');
is($reqs[1]{headers}{'outbox-attempt'}, '2', 'b100: the retry is attempt 2');
is(sql($node, q{SELECT count(*) FILTER (WHERE attempts = 2) FROM outbox.history WHERE endpoint = 'b100'}), '100',
	'b100: each message sent once, on its second attempt');

# ---------------------------------------------------------------------------
# 4. Order per key on an ordered endpoint, across batches
endpoint($node, $recv, 'ord', '/b/ord', batch_size => 5, ordered => 'true');
$recv->add_rule(path => '/b/ord', status => 200, delay_ms => 20);
sql($node, q{SELECT outbox.pause_endpoint('ord')});
for my $n (1 .. 8)
{
	sql($node, join ' ', map { "SELECT outbox.enqueue('ord', '{\"k\": \"$_\", \"n\": $n}', ordering_key => '$_');" } qw(a b c));
}
sql($node, q{SELECT outbox.resume_endpoint('ord')});
ok(wait_sql($node, q{SELECT count(*) = 24 FROM outbox.history WHERE endpoint = 'ord'}, 60), 'ord: all 24 sent');
@arr = arrays('/b/ord');
my %seq;
for my $batch (@arr) { push @{ $seq{ $_->{payload}{k} } }, $_->{payload}{n} for @$batch }
is_deeply(\%seq, { a => [ 1 .. 8 ], b => [ 1 .. 8 ], c => [ 1 .. 8 ] }, 'ord: every key in commit order, once each');
ok((grep { @$_ > 1 } @arr), 'ord: keys shared batches (control: these were batches)');
ok(!(grep { my %k; grep { $k{ $_->{payload}{k} }++ } @$_ } @arr), 'ord: a batch holds at most one message per key');

# ---------------------------------------------------------------------------
# 5. max_payload_size cuts batches
reload_conf($node, 'pg_outbox.max_payload_size' => '2000');
endpoint($node, $recv, 'cut', '/b/cut', batch_size => 10);
my $pad = 'x' x 600;
my @cut = enqueue_paused('cut', map { "SELECT outbox.enqueue('cut', '{\"n\": $_, \"p\": \"$pad\"}')" } 1 .. 10);
ok(wait_sql($node, q{SELECT count(*) = 10 FROM outbox.history WHERE endpoint = 'cut'}), 'cut: all 10 sent');
@reqs = @{ $recv->requests(path => '/b/cut') };
cmp_ok(scalar @reqs, '>=', 4, 'cut: the 10 went in several batches');
is(scalar(grep { length($_->{body}) > 2000 } @reqs), 0, 'cut: no body over max_payload_size');
ok((grep { @{ $json->decode($_->{body}) } > 1 } @reqs), 'cut: batches of more than one message (control)');
my @cut_batches = arrays('/b/cut');
is_deeply([ sort { $a <=> $b } map { $_->{payload}{n} } map { @$_ } @cut_batches ], [ 1 .. 10 ], 'cut: each message once');
ok(ascending_inside(sub { $_[0]{payload}{n} }, @cut_batches), 'cut: enqueue order inside each batch');

# ---------------------------------------------------------------------------
# 6. A message that cannot be sent as it stands leaves its batch alone
reload_conf($node, 'pg_outbox.max_payload_size' => undef);
endpoint($node, $recv, 'bad', '/b/bad', batch_size => 10);
sql($node, q{SELECT outbox.pause_endpoint('bad')});
my $bad = sql($node, q{
	SELECT outbox.enqueue('bad', '{"n": 1}');
	INSERT INTO outbox.messages (endpoint, payload, headers) VALUES ('bad', '{"n": 2}', '{"x-a": 1}') RETURNING id;
	SELECT outbox.enqueue('bad', '{"n": 3}')});
my ($bad_id) = (split /\n/, $bad)[1];
sql($node, q{SELECT outbox.resume_endpoint('bad')});
ok(wait_sql($node, q{SELECT count(*) = 2 FROM outbox.history WHERE endpoint = 'bad'}), 'bad: the two good ones sent');
ok(wait_sql($node, qq{SELECT reason_code = 'INVALID_MESSAGE' FROM dlq.dead_letters WHERE message_id = $bad_id}),
	'bad: the one with a non-string header is dead-lettered INVALID_MESSAGE');
is_deeply([ map { [ map { $_->{payload}{n} } @$_ ] } arrays('/b/bad') ], [ [ 1, 3 ] ], 'bad: one batch of the other two');

# ---------------------------------------------------------------------------
# 7. Batches not yet started go back whole when their endpoint changes
endpoint($node, $recv, 'gb', '/b/gb', batch_size => 5, concurrency => 1);
$recv->add_rule(path => '/b/gb', status => 200, delay_ms => 2000, times => 1);
my @gb = enqueue_paused('gb', map { "SELECT outbox.enqueue('gb', '{\"n\": $_}')" } 1 .. 15);
$recv->wait_requests('/b/gb', 1, 30);
# The first batch is held by the receiver; the other two wait behind it (concurrency 1).
sql($node, q{SELECT outbox.alter_endpoint('gb', batch_size => 3)});
ok(wait_sql($node, q{SELECT count(*) = 15 FROM outbox.history WHERE endpoint = 'gb'}), 'gb: all 15 sent');
@arr = arrays('/b/gb');
is(scalar @{ $arr[0] }, 5, 'gb: the batch in flight went as it was (5)');
is(scalar(grep { @$_ > 3 } @arr[1 .. $#arr]), 0, 'gb: the others were made again at batch_size 3');
my %seen;
$seen{ $_->{payload}{n} }++ for map { @$_ } @arr;
is_deeply(\%seen, { map { $_ => 1 } 1 .. 15 }, 'gb: each message sent exactly once');
is(sql($node, q{SELECT count(*) FROM outbox.history WHERE endpoint = 'gb' AND attempts = 1}), '15',
	'gb: the batches given back spent no attempt');

done_testing();
