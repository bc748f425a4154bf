#!/usr/bin/perl
# CloudEvents formats (docs/delivery.md, "CloudEvents"), judged by the CloudEvents SDK
# (npm cloudevents, test/node/parse_cloudevents.js) from what the receiver got:
#
#  1. cloudevents-binary: every request parses as an event whose id is its webhook-id,
#     whose type is the event type (one with a space and a non-ASCII letter, which the
#     binding percent-encodes), whose source is /pg_outbox/<database>/<endpoint>, and
#     whose time is the enqueue time (the raw ce-time to the microsecond); the body is
#     the payload; the Standard Webhooks signature verifies; a ce-type set by the
#     endpoint's headers is dropped (control: an x- header of the endpoint arrives);
#  2. cloudevents-structured: application/cloudevents+json whose data is the payload,
#     with the endpoint's own source; signed over that body;
#  3. a retried message keeps its ce-id;
#  4. a message without an event type: refused at enqueue (22004) and at requeue
#     (22004); alter_endpoint refuses a CloudEvents format while untyped messages are
#     queued (55000, nothing changed); a plain INSERT of one is dead-lettered
#     INVALID_MESSAGE by the worker and does not hold the endpoint up.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use Encode ();
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_outbox_node('cloudevents', 'pg_outbox.backoff_base' => '50ms', 'pg_outbox.backoff_max' => '200ms');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $recv = start_receiver();
my $SECRET = 'whsec_' . 'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

# The SDK's reading of each request of $path, in arrival order.
sub parsed
{
	my ($path) = @_;
	my @reqs = @{ $recv->requests(path => $path) };
	my $out = run_node('parse_cloudevents.js',
		{ requests => [ map { { headers => $_->{headers}, body => $_->{body} } } @reqs ] });
	return (\@reqs, $out->{results});
}

# created_at of a message: [RFC 3339 to the microsecond, to the millisecond] (UTC).
sub created
{
	my ($id) = @_;
	my ($us, $ms) = split /\|/, sql($node,
		qq{SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
		          to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
		     FROM (SELECT created_at FROM outbox.messages WHERE id = $id
		           UNION ALL SELECT created_at FROM outbox.history WHERE id = $id) t LIMIT 1});
	return ($us, $ms);
}

# ---------------------------------------------------------------------------
# 1. binary
endpoint($node, $recv, 'ce_bin', '/ce/bin',
	format  => q{'cloudevents-binary'},
	secret  => "'$SECRET'",
	headers => q{'{"ce-type": "forged", "x-team": "shop"}'});
# Kept in the queue until every row is read: paused while enqueuing.
sql($node, q{SELECT outbox.pause_endpoint('ce_bin')});
my @bin = map { sql($node, $_) } (
	q{SELECT outbox.enqueue('ce_bin', '{"n": 1}', event_type => 'order.created')},
	q{SELECT outbox.enqueue('ce_bin', '{"n": 2, "s": "é"}', event_type => 'order paid café')},
	q{SELECT outbox.enqueue('ce_bin', '[1, 2]', event_type => 'order.shipped', idempotency_key => 'ship-7')});
my %time = map { $_ => [ created($_) ] } @bin;
my $prefix = webhook_prefix($node);
sql($node, q{SELECT outbox.resume_endpoint('ce_bin')});
$recv->wait_requests('/ce/bin', 3, 30);
my ($reqs, $res) = parsed('/ce/bin');
is(scalar @$res, 3, 'binary: three requests');
my %want_type = ($bin[0] => 'order.created', $bin[1] => 'order paid café', $bin[2] => 'order.shipped');
my %want_id = ($bin[0] => "$prefix$bin[0]", $bin[1] => "$prefix$bin[1]", $bin[2] => 'ship-7');
my %by_id = reverse %want_id;
for my $i (0 .. $#$res)
{
	my ($r, $q) = ($res->[$i], $reqs->[$i]);
	ok($r->{ok}, "binary request $i parses") or diag($r->{error});
	my $e = $r->{events}[0] // {};
	my $msg = $by_id{ $e->{id} // '' };
	ok(defined $msg, "binary $i: ce-id is a message's webhook-id") or next;
	is($e->{id}, $q->{headers}{'webhook-id'}, "binary $i: ce-id = webhook-id");
	# The receiver's records are decoded JSON (characters); this file's strings are UTF-8 bytes.
	is(Encode::encode('UTF-8', $e->{type}), $want_type{$msg}, "binary $i: ce-type = event type");
	is($e->{source}, '/pg_outbox/postgres/ce_bin', "binary $i: default source");
	is($e->{specversion}, '1.0', "binary $i: specversion");
	is($q->{headers}{'ce-time'}, $time{$msg}[0], "binary $i: ce-time is the enqueue time (microseconds)");
	is($e->{time}, $time{$msg}[1], "binary $i: the SDK reads the same time");
	is($q->{headers}{'content-type'}, 'application/json', "binary $i: content type");
	is(Encode::encode('UTF-8', $q->{body}), sql($node, "SELECT payload::text FROM outbox.history WHERE id = $msg"), "binary $i: body = payload");
	ok(verify_webhook_signature($SECRET, $q->{headers}, $q->{body}), "binary $i: signature verifies");
	is($q->{headers}{'x-team'}, 'shop', "binary $i: the endpoint's own header arrives");
}
my ($cafe) = grep { ($_->{headers}{'webhook-id'} // '') eq "$prefix$bin[1]" } @$reqs;
is($cafe->{headers}{'ce-type'}, 'order%20paid%20caf%C3%A9', 'binary: ce-type percent-encoded as the binding says');

# ---------------------------------------------------------------------------
# 2. structured, with a source of its own
endpoint($node, $recv, 'ce_struct', '/ce/struct',
	format => q{'cloudevents-structured'},
	source => q{'https://shop.example/orders'},
	secret => "'$SECRET'");
my $s1 = sql($node, q{SELECT outbox.enqueue('ce_struct', '{"total": 12.5, "lines": [{"sku": "a\"b"}]}', event_type => 'order.created')});
my ($s1_us, $s1_ms) = created($s1);
$recv->wait_requests('/ce/struct', 1, 30);
($reqs, $res) = parsed('/ce/struct');
ok($res->[0]{ok}, 'structured request parses') or diag($res->[0]{error});
my $e = $res->[0]{events}[0] // {};
is($e->{id}, "$prefix$s1", 'structured: id = webhook-id');
is($e->{type}, 'order.created', 'structured: type');
is($e->{source}, 'https://shop.example/orders', "structured: the endpoint's source");
is($e->{time}, $s1_ms, 'structured: time');
is($e->{datacontenttype}, 'application/json', 'structured: datacontenttype');
is_deeply($e->{data}, { total => 12.5, lines => [ { sku => 'a"b' } ] }, 'structured: data = payload');
like($reqs->[0]{headers}{'content-type'}, qr{^application/cloudevents\+json}, 'structured: content type');
like($reqs->[0]{body}, qr/"time":"\Q$s1_us\E"/, 'structured: time to the microsecond in the body');
ok(verify_webhook_signature($SECRET, $reqs->[0]{headers}, $reqs->[0]{body}), 'structured: signature verifies');

# ---------------------------------------------------------------------------
# 3. a retry keeps its ce-id
endpoint($node, $recv, 'ce_retry', '/ce/retry', format => q{'cloudevents-binary'});
$recv->add_rule(path => '/ce/retry', status => 503, times => 1);
my $r1 = sql($node, q{SELECT outbox.enqueue('ce_retry', '{}', event_type => 'x.y')});
$recv->wait_requests('/ce/retry', 2, 30);
($reqs, $res) = parsed('/ce/retry');
is(scalar(grep { $_->{ok} } @$res), 2, 'retry: both requests parse');
is_deeply([ map { $_->{events}[0]{id} } @$res ], [ "$prefix$r1", "$prefix$r1" ], 'retry: the same ce-id twice');
ok(wait_sql($node, "SELECT count(*) = 1 FROM outbox.history WHERE id = $r1"), 'retry: sent');

# ---------------------------------------------------------------------------
# 4. messages without an event type
my ($rc, $out, $err) = $node->psql('postgres',
	q{SELECT outbox.enqueue('ce_struct', '{}')}, on_error_stop => 0, extended_query => 0);
like($err, qr/event_type must not be NULL for endpoint "ce_struct"/, 'enqueue without event type refused');
is(sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'ce_struct'}), '0', '... and nothing queued');

# alter_endpoint: refused while an untyped message is queued.
endpoint($node, $recv, 'sw', '/ce/sw');
sql($node, q{SELECT outbox.pause_endpoint('sw')});
my $untyped = sql($node, q{SELECT outbox.enqueue('sw', '{"u": 1}')});
($rc, $out, $err) = $node->psql('postgres', q{
	\set VERBOSITY verbose
	SELECT outbox.alter_endpoint('sw', format => 'cloudevents-binary')});
like($err, qr/55000: endpoint "sw" has 1 queued message\(s\) without an event type/, 'alter to CloudEvents refused (55000)');
is(sql($node, q{SELECT format FROM outbox.endpoints WHERE name = 'sw'}), 'standard-webhooks', '... and nothing changed');

# requeue: a dead letter without an event type, its endpoint since made CloudEvents.
sql($node, qq{SELECT outbox.drop_endpoint('sw', force => true)}) ;
endpoint($node, $recv, 'sw', '/ce/sw', format => q{'cloudevents-binary'});
my $dl = sql($node, qq{SELECT id FROM dlq.dead_letters WHERE message_id = $untyped});
ok($dl ne '', 'the dropped endpoint left a dead letter');
($rc, $out, $err) = $node->psql('postgres', qq{
	\\set VERBOSITY verbose
	SELECT dlq.requeue($dl)});
like($err, qr/22004: cannot requeue dead letter $dl to CloudEvents endpoint "sw": it has no event type/,
	'requeue without event type to a CloudEvents endpoint refused (22004)');
is(sql($node, qq{SELECT requeued_at IS NULL FROM dlq.dead_letters WHERE id = $dl}), 't', '... and the letter stays open');

# A plain INSERT gets past the checks: the worker dead-letters it and goes on.
my $plain = sql($node, q{INSERT INTO outbox.messages (endpoint, payload) VALUES ('ce_retry', '{"p": 1}') RETURNING id});
my $after = sql($node, q{SELECT outbox.enqueue('ce_retry', '{"p": 2}', event_type => 'after')});
ok(wait_sql($node, qq{SELECT reason_code = 'INVALID_MESSAGE' AND error_message LIKE '%event type%'
                        FROM dlq.dead_letters WHERE message_id = $plain}), 'plain INSERT without type: INVALID_MESSAGE');
ok(wait_sql($node, "SELECT count(*) = 1 FROM outbox.history WHERE id = $after"), '... and the next message is sent');

done_testing();
