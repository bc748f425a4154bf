#!/usr/bin/perl
# HTTP delivery semantics (docs/delivery.md, "HTTP requests", "Outcomes", "Retries and backoff", "Dead letters"):
#
#  - a committed enqueue arrives with the exact body and every documented header,
#    signed as Standard Webhooks says (checked by an independent Perl HMAC);
#  - a rolled-back enqueue never arrives;
#  - the worker is woken at commit (a node with poll_interval = 10s still delivers
#    in well under a second), and a retry goes out when its backoff ends, not at
#    the next poll;
#  - retries (5xx, timeout, closed connection) keep the webhook-id and count
#    outbox-attempt up; 4xx and 413 are dead at once; max_attempts exhausts;
#  - Retry-After is honoured; idempotency keys become the webhook-id;
#  - a requeued dead letter keeps the original webhook-id;
#  - an unsendable row (bad header from a plain INSERT) is dead-lettered and the
#    worker goes on; a plain INSERT of a valid row is delivered;
#  - worker_status() counters and metrics() agree with what happened.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use Encode ();
use MIME::Base64 ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

# The version the library serves (pg_outbox.control), in the User-Agent.
my ($version) = slurp_file("$FindBin::RealBin/../../pg_outbox.control") =~ /default_version\s*=\s*'([^']+)'/;
my $SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

my $node = new_outbox_node(
	'http',
	'pg_outbox.backoff_base'      => '50ms',
	'pg_outbox.backoff_max'       => '5s',      # above the Retry-After of 2 s below
	'pg_outbox.breaker_threshold' => '1000');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $W = webhook_prefix($node);    # webhook-id = $W<id> (docs/delivery.md, Webhook id)
my $recv = start_receiver();

# ---------------------------------------------------------------------------
# helpers

sub body_bytes
{
	my ($r) = @_;
	return Encode::encode_utf8($r->{body});
}

# ---------------------------------------------------------------------------
# 1. A committed enqueue: exact body, every header, a valid signature.

endpoint($node, $recv, 'main', '/hooks/main',
	headers => q{'{"X-Tenant": "acme", "X-Env": "test"}'::jsonb},
	secret  => "'$SECRET'");

# Not in a canonical form on purpose, with non-ASCII text: the body must be
# payload::text, byte for byte.
my $payload = q({"order_id": 42, "items": [1, 2.50, {"sku": "A-1"}], "note": "café ✓ \"quoted\""});
my $id1 = sql($node, qq{
	BEGIN;
	SELECT outbox.enqueue('main', \$j\$$payload\$j\$::jsonb, event_type => 'order.created',
	                      headers => '{"X-Trace": "trace-123"}');
	COMMIT;});
like($id1, qr/^\d+$/, 'enqueue returns the message id');

ok($recv->wait_requests('/hooks/main', 1), 'committed message received');
my ($r) = @{ $recv->requests(path => '/hooks/main') };
# The row is in the queue until the settle and in the history after it (one move, in
# one transaction): read it wherever it is.
my $expected_body = sql($node, "SELECT payload::text FROM outbox.messages WHERE id = $id1
                         UNION ALL SELECT payload::text FROM outbox.history WHERE id = $id1");
is(body_bytes($r), $expected_body, 'body is payload::text byte for byte');
is($r->{method}, 'POST', 'method is POST');
my $h = $r->{headers};
is($h->{'content-type'},      'application/json', 'Content-Type');
is($h->{'user-agent'},        'pg_outbox/' . $version,  'User-Agent');
is($h->{'webhook-id'},        "$W$id1",         'webhook-id is msg_<instance>_<id>');
like($h->{'webhook-id'}, qr/^msg_[0-9a-f]{16}_\d+$/, '... the instance is 16 hex digits');
is($h->{'outbox-event-type'}, 'order.created',    'outbox-event-type');
is($h->{'outbox-attempt'},    '1',                'outbox-attempt 1');
is($h->{'x-tenant'},          'acme',             'endpoint header X-Tenant');
is($h->{'x-env'},             'test',             'endpoint header X-Env');
is($h->{'x-trace'},           'trace-123',        'message header X-Trace');
like($h->{'webhook-timestamp'} // '', qr/^\d+$/, 'webhook-timestamp is unix seconds');
ok(abs(($h->{'webhook-timestamp'} // 0) - $r->{time}) < 5,
	'webhook-timestamp within 5 s of the receipt time')
  or diag("webhook-timestamp $h->{'webhook-timestamp'}, received at $r->{time}");
like($h->{'webhook-signature'} // '', qr/^v1,[A-Za-z0-9+\/]+=*$/,
	'webhook-signature has the v1,<base64> form');
ok(verify_webhook_signature($SECRET, $h, $r->{body}),
	'webhook-signature verifies with an independent HMAC-SHA256');
# The verifier itself must be able to say no.
ok(!verify_webhook_signature($SECRET, $h, $r->{body} . ' '),
	'the verifier rejects a changed body');
ok( !verify_webhook_signature(
		'whsec_' . MIME::Base64::encode_base64('another key entirely', ''),
		$h, $r->{body}),
	'the verifier rejects another secret');
ok(wait_sql($node, "SELECT status = 'sent' AND attempts = 1 AND sent_at IS NOT NULL
               FROM outbox.message($id1)"),
	'message is sent after one attempt');
is(sql($node, "SELECT count(*) FROM outbox.messages WHERE id = $id1"), '0',
	'... it left the queue');

# An endpoint without a secret sends no signature.
endpoint($node, $recv, 'nosig', '/hooks/nosig');
my $id_nosig = sql($node, q{SELECT outbox.enqueue('nosig', '{"a": 1}')});
ok($recv->wait_requests('/hooks/nosig', 1), 'unsigned endpoint: message received');
($r) = @{ $recv->requests(path => '/hooks/nosig') };
ok(!exists $r->{headers}{'webhook-signature'},
	'no webhook-signature without a secret');
is($r->{headers}{'webhook-id'}, "$W$id_nosig", 'unsigned endpoint: webhook-id');

# ---------------------------------------------------------------------------
# 2. A rolled-back enqueue is never delivered.

endpoint($node, $recv, 'rb', '/hooks/rb');
my $rb_id = sql($node, q{
	BEGIN;
	SELECT outbox.enqueue('rb', '{"fate": "rolled back"}', event_type => 'rb.test');
	ROLLBACK;});
like($rb_id, qr/^\d+$/, 'rolled-back enqueue returned an id inside its transaction');
# A committed marker behind it proves the worker had every chance: it claims an
# endpoint's due messages oldest first.
my $rb_marker = sql($node, q{SELECT outbox.enqueue('rb', '{"fate": "committed"}', event_type => 'rb.test')});
ok($recv->wait_requests('/hooks/rb', 1), 'committed marker after the rollback received');
sleep(0.5);    # an observation window: a late second request would show here
my @rb = @{ $recv->requests(path => '/hooks/rb') };
is(scalar(@rb), 1, 'exactly one request on the rolled-back endpoint');
is($rb[0]{headers}{'webhook-id'}, "$W$rb_marker", '... and it is the committed marker');
unlike(join("\n", map { $_->{body} } @rb), qr/rolled back/,
	'the rolled-back payload never arrived');
is(sql($node, "SELECT count(*) FROM outbox.message($rb_id)"),
	'0', 'no outbox row for the rolled-back id (queue, history or DLQ)');
is(sql($node, "SELECT count(*) FROM dlq.dead_letters WHERE message_id = $rb_id"),
	'0', 'no dead letter for the rolled-back id');

# ---------------------------------------------------------------------------
# 3. 503 twice, then 200: three attempts, one webhook-id.

endpoint($node, $recv, 'retry', '/hooks/retry');
$recv->add_rule(path => '/hooks/retry', status => 503, times => 2);
my $retry_id = sql($node, q{SELECT outbox.enqueue('retry', '{"n": 3}', event_type => 'retry.test')});
ok($recv->wait_requests('/hooks/retry', 3), 'three attempts after two 503s');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($retry_id)"),
	'message sent after the 503s');
is(sql($node, "SELECT attempts FROM outbox.message($retry_id)"),
	'3', 'attempts = 3');
my @retry = @{ $recv->requests(path => '/hooks/retry') };
is(scalar(@retry), 3, 'exactly three requests');
is_deeply([ map { $_->{headers}{'webhook-id'} } @retry ],
	[ ("$W$retry_id") x 3 ], 'same webhook-id on every attempt');
is_deeply([ map { $_->{headers}{'outbox-attempt'} } @retry ],
	[ 1, 2, 3 ], 'outbox-attempt 1, 2, 3');
is_deeply([ map { $_->{response} } @retry ], [ 503, 503, 200 ],
	'receiver answered 503, 503, 200');
is_deeply([ map { body_bytes($_) } @retry ], [ ('{"n": 3}') x 3 ],
	'same body on every attempt');
# Backoff alone is fast here (base 50 ms): the control for the Retry-After test.
my $retry_gap = $retry[1]{time} - $retry[0]{time};
note(sprintf('503 without Retry-After: second attempt after %.3f s', $retry_gap));
ok($retry_gap < 3, 'without Retry-After the retry follows the short backoff (the control for Retry-After: 4)');

# ---------------------------------------------------------------------------
# 4. 400 with a body: dead at once.

endpoint($node, $recv, 'c400', '/hooks/c400');
my $err_body = 'invalid order: missing "sku" (field items[0])';
$recv->add_rule(path => '/hooks/c400', status => 400, body => $err_body);
my $c400_id = sql($node, q{SELECT outbox.enqueue('c400', '{"bad": true}', event_type => 'bad.order')});
ok(wait_sql($node, "SELECT count(*) = 1 FROM dlq.dead_letters WHERE message_id = $c400_id"),
	'400: dead letter created');
is( sql($node, qq{SELECT concat_ws('|', reason_code, http_status, attempts, endpoint, event_type,
                            payload::text, requeued_at IS NULL)
             FROM dlq.dead_letters WHERE message_id = $c400_id}),
	'HTTP_CLIENT_ERROR|400|1|c400|bad.order|{"bad": true}|t',
	'400: reason HTTP_CLIENT_ERROR, http_status 400, attempts 1, payload kept');
is(sql($node, "SELECT response_body FROM dlq.dead_letters WHERE message_id = $c400_id"),
	$err_body, '400: response_body is the body the receiver sent');
is(sql($node, "SELECT count(*) FROM outbox.messages WHERE id = $c400_id"),
	'0', '400: message gone from outbox.messages');
is(sql($node, "SELECT status, attempts, dead_letter_id IS NOT NULL FROM outbox.message($c400_id)"),
	'dead|1|t', '400: outbox.message() reports it dead, with its dead letter');
is(scalar(@{ $recv->requests(path => '/hooks/c400') }), 1, '400: exactly one request (no retry)');

# ---------------------------------------------------------------------------
# 5. 413: PAYLOAD_TOO_LARGE.

endpoint($node, $recv, 'c413', '/hooks/c413');
$recv->add_rule(path => '/hooks/c413', status => 413);
my $c413_id = sql($node, q{SELECT outbox.enqueue('c413', '{"big": true}')});
ok(wait_sql($node, "SELECT count(*) = 1 FROM dlq.dead_letters WHERE message_id = $c413_id"),
	'413: dead letter created');
is(sql($node, "SELECT concat_ws('|', reason_code, http_status, attempts) FROM dlq.dead_letters WHERE message_id = $c413_id"),
	'PAYLOAD_TOO_LARGE|413|1', '413: PAYLOAD_TOO_LARGE, http_status 413, attempts 1');
is(sql($node, "SELECT count(*) FROM outbox.messages WHERE id = $c413_id"), '0',
	'413: message gone from outbox.messages');
is(scalar(@{ $recv->requests(path => '/hooks/c413') }), 1, '413: exactly one request');

# ---------------------------------------------------------------------------
# 6. Always 500 with max_attempts 3: RETRY_EXHAUSTED after three attempts.

endpoint($node, $recv, 'c500', '/hooks/c500', max_attempts => 3);
$recv->add_rule(path => '/hooks/c500', status => 500, body => 'boom');
my $c500_id = sql($node, q{SELECT outbox.enqueue('c500', '{"x": 500}')});
ok(wait_sql($node, "SELECT count(*) = 1 FROM dlq.dead_letters WHERE message_id = $c500_id"),
	'always 500: dead letter created');
is( sql($node, qq{SELECT concat_ws('|', reason_code, http_status, attempts, response_body)
             FROM dlq.dead_letters WHERE message_id = $c500_id}),
	'RETRY_EXHAUSTED|500|3|boom',
	'always 500: RETRY_EXHAUSTED, http_status 500, attempts 3, last body');
like(sql($node, "SELECT error_message FROM dlq.dead_letters WHERE message_id = $c500_id"),
	qr/500/, 'always 500: error_message names the last failure');
is(sql($node, "SELECT count(*) FROM outbox.messages WHERE id = $c500_id"), '0',
	'always 500: message gone from outbox.messages');
sleep(0.5);    # an observation window: a fourth attempt would show here
my @c500 = @{ $recv->requests(path => '/hooks/c500') };
is(scalar(@c500), 3, 'always 500: exactly three requests, then no more');
is_deeply([ map { $_->{headers}{'outbox-attempt'} } @c500 ], [ 1, 2, 3 ],
	'always 500: outbox-attempt 1, 2, 3');

# ---------------------------------------------------------------------------
# 7. A timeout is retried, then delivered.

endpoint($node, $recv, 'slow', '/hooks/slow', timeout_ms => 2000);
$recv->add_rule(path => '/hooks/slow', action => 'hang', hang_ms => 10000, times => 1);
my $slow_id = sql($node, q{SELECT outbox.enqueue('slow', '{"slow": 1}')});
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($slow_id)"),
	'timeout: message sent in the end');
is(sql($node, "SELECT attempts FROM outbox.message($slow_id)"), '2',
	'timeout: attempts = 2');
my @slow = @{ $recv->requests(path => '/hooks/slow') };
is_deeply([ map { $_->{response} } @slow ], [ 'hang', 200 ],
	'timeout: receiver hung once, then answered 200');
is_deeply([ map { $_->{headers}{'outbox-attempt'} } @slow ], [ 1, 2 ],
	'timeout: outbox-attempt 1, 2');
is($slow[1]{headers}{'webhook-id'}, "$W$slow_id", 'timeout: same webhook-id');
my $slow_gap = @slow == 2 ? $slow[1]{time} - $slow[0]{time} : -1;
note(sprintf('timeout: second attempt %.3f s after the first', $slow_gap));
ok($slow_gap >= 1.5, 'timeout: the first attempt was given its timeout (2 s)');
ok(!defined $slow[0]{answered}, 'timeout: the hung request was never answered');
is(sql($node, "SELECT count(*) FROM dlq.dead_letters WHERE message_id = $slow_id"), '0',
	'timeout: no dead letter');

# ---------------------------------------------------------------------------
# 8. A closed connection is retried.  libcurl itself re-sends a request once
#    when a REUSED keep-alive connection dies before any answer (a stale
#    connection is not a failure of the receiver), so the strict check runs
#    against a receiver that has never seen a connection: the close hits a fresh
#    connection and only the worker can retry it.
#    The transport error is recorded on the queue row (last_error), which a message
#    keeps only while it waits in the queue: the history of a sent message has no
#    last_error.  So it is read between the two attempts, which a longer backoff for
#    this scenario (backoff_base 4 s: the first retry comes 2 to 4 s later) keeps
#    apart long enough to see.

ok(reload_conf($node, 'pg_outbox.backoff_base' => '4s'),
	'closed connection: backoff_base raised to 4s for this scenario');
my $recv2 = start_receiver();
sql($node, sprintf("SELECT outbox.create_endpoint('closer', url => '%s')", $recv2->url('/hooks/close')));
$recv2->add_rule(path => '/hooks/close', action => 'close', times => 1);
my $close_id = sql($node, q{SELECT outbox.enqueue('closer', '{"close": 1}')});
my $close_wait = '';
ok( wait_until(
		sub {
			$close_wait = sql($node, "SELECT concat_ws('|', status, attempts, last_error)
			                     FROM outbox.message($close_id)");
			return $close_wait =~ /^pending\|1\|/ || $close_wait =~ /^sent\|/;
		}),
	'closed connection: the message waits for its retry after the first attempt');
note("closed connection, between the attempts: $close_wait");
like($close_wait, qr/^pending\|1\|\S/,
	'closed connection: pending, one attempt recorded, last_error records the transport error');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($close_id)"),
	'closed connection: message sent in the end');
ok(reload_conf($node, 'pg_outbox.backoff_base' => undef),
	'closed connection: backoff_base back to 50ms');
my @close = @{ $recv2->requests(path => '/hooks/close') };
is_deeply([ map { $_->{response} } @close ], [ 'close', 200 ],
	'closed connection: closed once, then 200');
is(sql($node, "SELECT attempts FROM outbox.message($close_id)"), '2',
	'closed connection: attempts = 2');
is_deeply([ map { $_->{headers}{'outbox-attempt'} } @close ], [ 1, 2 ],
	'closed connection: outbox-attempt 1, 2');
is_deeply([ map { $_->{headers}{'webhook-id'} } @close ], [ ("$W$close_id") x 2 ],
	'closed connection: same webhook-id');
$recv2->stop;

# The same on the main receiver, whose connections the worker keeps alive: the
# message must arrive whichever side (libcurl or the worker) re-sends it.
endpoint($node, $recv, 'closer2', '/hooks/close2');
$recv->add_rule(path => '/hooks/close2', action => 'close', times => 1);
my $close2_id = sql($node, q{SELECT outbox.enqueue('closer2', '{"close": 2}')});
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($close2_id)"),
	'closed keep-alive connection: message sent in the end');
my @close2 = @{ $recv->requests(path => '/hooks/close2') };
is_deeply([ map { $_->{response} } @close2 ], [ 'close', 200 ],
	'closed keep-alive connection: closed once, then 200');
note('closed keep-alive connection: outbox-attempt '
	  . join(', ', map { $_->{headers}{'outbox-attempt'} } @close2)
	  . '; attempts ' . sql($node, "SELECT attempts FROM outbox.message($close2_id)"));

# ---------------------------------------------------------------------------
# 9. Retry-After on a 503 is honoured (backoff alone would retry in < 100 ms).

endpoint($node, $recv, 'ra', '/hooks/ra');
$recv->add_rule(path => '/hooks/ra', status => 503, retry_after => '4', times => 1);
my $ra_id = sql($node, q{SELECT outbox.enqueue('ra', '{"ra": 1}')});
ok($recv->wait_requests('/hooks/ra', 2), 'Retry-After: second attempt arrives');
my @ra = @{ $recv->requests(path => '/hooks/ra') };
my $ra_gap = @ra >= 2 ? $ra[1]{time} - $ra[0]{time} : -1;
note(sprintf('Retry-After 4: second attempt after %.3f s', $ra_gap));
ok($ra_gap >= 3.9, 'Retry-After: second attempt no sooner than 4 s after the first');
ok($ra_gap < 15, 'Retry-After: ... and not much later');
ok(wait_sql($node, "SELECT status = 'sent' AND attempts = 2 FROM outbox.message($ra_id)"),
	'Retry-After: sent with attempts = 2');

# ---------------------------------------------------------------------------
# 10. An idempotency key is the webhook-id; while the message is undelivered (in the
#     queue) a second enqueue with the key is the same message and nothing is sent
#     twice.  Once it is delivered the key is free again: a later enqueue is a new
#     message with the same webhook-id, which a receiver deduplicating on webhook-id
#     (Standard Webhooks) recognises.

endpoint($node, $recv, 'idem', '/hooks/idem');
sql($node, q{SELECT outbox.pause_endpoint('idem')});
my $idem_id = sql($node, q{SELECT outbox.enqueue('idem', '{"k": 1}', idempotency_key => 'order-42-created')});
is(sql($node, q{SELECT outbox.enqueue('idem', '{"k": 2}', idempotency_key => 'order-42-created')}),
	$idem_id, 'idempotency key: enqueue again while it is undelivered returns the same id');
is(sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'idem'}), '1', '... and inserts nothing');
sql($node, q{SELECT outbox.resume_endpoint('idem')});
ok($recv->wait_requests('/hooks/idem', 1), 'idempotency key: message received');
is($recv->requests(path => '/hooks/idem')->[0]{headers}{'webhook-id'}, 'order-42-created',
	'idempotency key: webhook-id is the key');
is($recv->requests(path => '/hooks/idem')->[0]{body}, '{"k": 1}', 'idempotency key: the first payload is the one sent');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($idem_id)"),
	'idempotency key: sent');
my $idem_marker = sql($node, q{SELECT outbox.enqueue('idem', '{"k": 3}')});
ok($recv->wait_requests('/hooks/idem', 2), 'idempotency key: marker received');
is_deeply([ map { $_->{headers}{'webhook-id'} } @{ $recv->requests(path => '/hooks/idem') } ],
	[ 'order-42-created', "$W$idem_marker" ],
	'idempotency key: the repeated enqueue sent nothing');
my $idem_again = sql($node, q{SELECT outbox.enqueue('idem', '{"k": 4}', idempotency_key => 'order-42-created')});
isnt($idem_again, $idem_id, 'idempotency key: after delivery the key makes a new message');
ok($recv->wait_requests('/hooks/idem', 3), '... which is delivered');
is($recv->requests(path => '/hooks/idem')->[2]{headers}{'webhook-id'}, 'order-42-created', '... with the same webhook-id');

# ---------------------------------------------------------------------------
# 11. Requeue of a dead letter with a corrected payload: delivered with the new
#     payload and the original webhook-id.

endpoint($node, $recv, 'rq', '/hooks/rq');
$recv->add_rule(path => '/hooks/rq', status => 422, times => 1, body => 'bad amount');
my $rq_id = sql($node, q{SELECT outbox.enqueue('rq', '{"amount": -1}', event_type => 'pay')});
ok(wait_sql($node, "SELECT count(*) = 1 FROM dlq.dead_letters WHERE message_id = $rq_id"),
	'requeue: first a dead letter (422)');
my $dl_id = sql($node, "SELECT id FROM dlq.dead_letters WHERE message_id = $rq_id");
my $rq_new = sql($node, qq{SELECT dlq.requeue($dl_id, '{"amount": 10}')});
like($rq_new, qr/^\d+$/, 'requeue returns the new message id');
isnt($rq_new, $rq_id, 'requeue: the new message has a new id');
ok($recv->wait_requests('/hooks/rq', 2), 'requeue: redelivered');
my @rq = @{ $recv->requests(path => '/hooks/rq') };
is(body_bytes($rq[1]), '{"amount": 10}', 'requeue: delivered with the corrected payload');
is($rq[1]{headers}{'webhook-id'}, "$W$rq_id",
	'requeue: same webhook-id as the original message');
is($rq[0]{headers}{'webhook-id'}, "$W$rq_id", 'requeue: (the original had it too)');
is($rq[1]{headers}{'outbox-attempt'}, '1', 'requeue: fresh attempts');
is($rq[1]{headers}{'outbox-event-type'}, 'pay', 'requeue: event type kept');
ok(wait_sql($node, "SELECT status = 'sent' AND attempts = 1 FROM outbox.message($rq_new)"),
	'requeue: new message sent');
is(sql($node, "SELECT requeued_at IS NOT NULL AND requeued_as = $rq_new FROM dlq.dead_letters WHERE id = $dl_id"),
	't', 'requeue: dead letter records requeued_at and requeued_as');

# ---------------------------------------------------------------------------
# 12. Plain INSERTs: a row with a non-string header is dead-lettered
#     (INVALID_MESSAGE) and the worker goes on; a valid row is delivered.

endpoint($node, $recv, 'plain', '/hooks/plain');
my $bad_id = sql($node, q{INSERT INTO outbox.messages (endpoint, event_type, payload, headers)
                   VALUES ('plain', 'plain.bad', '{"n": "bad"}', '{"X-Num": 5}') RETURNING id});
my $good_id = sql($node, q{INSERT INTO outbox.messages (endpoint, event_type, payload, headers)
                    VALUES ('plain', 'plain.good', '{"n": "good"}', '{"X-Str": "five"}') RETURNING id});
ok(wait_sql($node, "SELECT count(*) = 1 FROM dlq.dead_letters WHERE message_id = $bad_id"),
	'non-string header: dead-lettered');
is(sql($node, "SELECT reason_code FROM dlq.dead_letters WHERE message_id = $bad_id"),
	'INVALID_MESSAGE', 'non-string header: reason INVALID_MESSAGE');
like(sql($node, "SELECT error_message FROM dlq.dead_letters WHERE message_id = $bad_id"),
	qr/header/i, 'non-string header: error_message says it is about a header');
is(sql($node, "SELECT attempts FROM dlq.dead_letters WHERE message_id = $bad_id"), '0',
	'non-string header: attempts 0 (never sent, so no attempt was made)');
is(sql($node, "SELECT count(*) FROM outbox.messages WHERE id = $bad_id"), '0',
	'non-string header: message gone from outbox.messages');
ok($recv->wait_requests('/hooks/plain', 1), 'plain INSERT of a valid row: delivered');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($good_id)"),
	'plain INSERT of a valid row: sent');
my @plain = @{ $recv->requests(path => '/hooks/plain') };
is(scalar(@plain), 1, 'only the valid row reached the receiver');
is(body_bytes($plain[0]), '{"n": "good"}', 'plain INSERT: body');
is($plain[0]{headers}{'x-str'}, 'five', 'plain INSERT: message header');
is($plain[0]{headers}{'webhook-id'}, "$W$good_id", 'plain INSERT: webhook-id');
# The worker still delivers afterwards.
my $after_id = sql($node, q{SELECT outbox.enqueue('plain', '{"n": "after"}')});
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($after_id)"),
	'the worker keeps delivering after an invalid message');

# ---------------------------------------------------------------------------
# 13. Counters: worker_status() and metrics() reflect what happened.

# Nothing may still be moving.
ok(wait_sql($node, q{SELECT NOT EXISTS (SELECT FROM outbox.messages) AND NOT EXISTS (SELECT FROM outbox.claims)}),
	'everything settled (the queue is empty, no claim left)');
# Every sent message counts once, every dead letter once, and every attempt that
# did not end a message counts as a retry (a dead letter never sent, such as the
# INVALID_MESSAGE one, made no attempt at all).
my ($exp_sent, $exp_dead, $exp_retried) = split /\|/, sql($node, q{
	SELECT (SELECT count(*) FROM outbox.history),
	       (SELECT count(*) FROM dlq.dead_letters),
	       (SELECT sum(attempts - 1) FROM outbox.history)
	     + (SELECT coalesce(sum(attempts - 1), 0) FROM dlq.dead_letters WHERE attempts > 0)});
# The worker publishes its counters just after the settle commits: wait for them.
ok(wait_until(sub { sql($node, 'SELECT sent, dead_lettered FROM outbox.worker_status()') eq "$exp_sent|$exp_dead" }),
	'worker_status() publishes the counts of the settled messages');
my ($sent, $retried, $dead) = split /\|/,
  sql($node, 'SELECT sent, retried, dead_lettered FROM outbox.worker_status()');
is($sent,    $exp_sent,    "worker_status().sent = $exp_sent (rows in the history)");
is($dead,    $exp_dead,    "worker_status().dead_lettered = $exp_dead (dead letters)");
is($retried, $exp_retried, "worker_status().retried = $exp_retried (attempts that were retried)");
# The same from the receivers' side: each HTTP request is exactly one of them,
# except the INVALID_MESSAGE one that was never sent.  (closer went to the second
# receiver; closer2 may have been re-sent once by libcurl itself, which the worker
# rightly does not count as an attempt.)
my $close2_extra = @close2 - sql($node, "SELECT attempts FROM outbox.message($close2_id)");
is($recv->stats->{requests} + scalar(@close) - $close2_extra, $sent + $retried + $dead - 1,
	'requests received = sent + retried + dead-lettered over HTTP');
# Per endpoint, counted by hand from the scenarios above.
my $metrics = sql($node, 'SELECT outbox.metrics()');
my %delivered;
while ($metrics =~ /^pg_outbox_deliveries_total\{endpoint="([^"]+)",result="([^"]+)"\} (\d+)$/mg)
{
	$delivered{"$1/$2"} = $3;
}
my %expect = (
	'main/sent' => 1,   'main/retry' => 0,  'main/dead' => 0,
	'retry/sent' => 1,  'retry/retry' => 2, 'retry/dead' => 0,
	'c400/sent' => 0,   'c400/retry' => 0,  'c400/dead' => 1,
	'c413/dead' => 1,
	'c500/sent' => 0,   'c500/retry' => 2,  'c500/dead' => 1,
	'slow/sent' => 1,   'slow/retry' => 1,
	'closer/sent' => 1, 'closer/retry' => 1,
	'closer2/sent' => 1,
	'ra/sent' => 1,     'ra/retry' => 1,
	'idem/sent' => 3,   'idem/retry' => 0,
	'rq/sent' => 1,     'rq/dead' => 1,
	'plain/sent' => 2,  'plain/dead' => 1,
	'rb/sent' => 1,     'rb/dead' => 0);
for my $k (sort keys %expect)
{
	my ($ep, $res) = split m{/}, $k;
	is($delivered{$k}, $expect{$k},
		qq{metrics: pg_outbox_deliveries_total{endpoint="$ep",result="$res"} $expect{$k}});
}
like($metrics, qr/^pg_outbox_dead_letters\{endpoint="c500",reason_code="RETRY_EXHAUSTED"\} 1$/m,
	'metrics: pg_outbox_dead_letters for the exhausted message');
like($metrics, qr/^pg_outbox_messages\{endpoint="retry",status="sent"\} 1$/m,
	'metrics: pg_outbox_messages sent for an endpoint');
unlike($metrics, qr/\Q$SECRET\E/, 'metrics never show the secret');

# ---------------------------------------------------------------------------
# 14. Wake at commit: with poll_interval = 60s, a commit is delivered within a few
#     seconds (in practice milliseconds: bench/ measures the latency).  Three rounds,
#     each started only once the worker has nothing more to do, so that only the
#     commit's wake can explain a prompt delivery.

my $wake = new_outbox_node(
	'wake',
	'pg_outbox.poll_interval'     => '60s',
	'pg_outbox.backoff_base'      => '50ms',
	'pg_outbox.backoff_max'       => '200ms',
	'pg_outbox.breaker_threshold' => '1000');
$wake->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
$wake->safe_psql('postgres',
	sprintf("SELECT outbox.create_endpoint('wake', url => '%s')", $recv->url('/hooks/wake')));
# Warm-up: the worker may first have to notice the extension.
$wake->safe_psql('postgres', q{SELECT outbox.enqueue('wake', '{"round": 0}')});
ok($recv->wait_requests('/hooks/wake', 1), 'wake node: warm-up message delivered');
my $producer = $wake->background_psql('postgres');
for my $round (1 .. 3)
{
	# Idle: everything sent, and a loop has ended since (the claim that follows a
	# settle has run); the next claim without a wake is a poll, 60 s away.
	ok(wait_sql($wake, q{SELECT state = 'idle' AND in_flight = 0
		AND last_loop_at > (SELECT max(sent_at) FROM outbox.history)
		AND NOT EXISTS (SELECT FROM outbox.messages) FROM outbox.worker_status()}),
		"wake at commit, round $round: the worker is idle");
	my $before = @{ $recv->requests(path => '/hooks/wake') };
	$producer->query_safe(qq{BEGIN; SELECT outbox.enqueue('wake', '{"round": $round}')});
	my $t0 = time;
	$producer->query_safe('COMMIT');
	my $ok = $recv->wait_requests('/hooks/wake', $before + 1);
	my $got = $recv->requests(path => '/hooks/wake')->[$before];
	my $latency = $ok ? $got->{time} - $t0 : 99;
	note(sprintf('wake at commit, round %d: received %.3f s after COMMIT was sent', $round, $latency));
	ok($latency < 5, "wake at commit, round $round: delivered within seconds, not at the 60 s poll");
}
$producer->quit;

# A retry is due after its backoff (here under 200 ms), not at the next poll:
# with poll_interval = 60s a worker that only looked again at its poll would
# retry a minute late.
$wake->safe_psql('postgres',
	sprintf("SELECT outbox.create_endpoint('wake503', url => '%s')", $recv->url('/hooks/wake503')));
$recv->add_rule(path => '/hooks/wake503', status => 503, times => 1);
my $w503 = $wake->safe_psql('postgres', q{SELECT outbox.enqueue('wake503', '{"w": 503}')});
ok($recv->wait_requests('/hooks/wake503', 2), 'wake node: 503 retried');
my @w503 = @{ $recv->requests(path => '/hooks/wake503') };
my $w503_gap = @w503 >= 2 ? $w503[1]{time} - $w503[0]{time} : 99;
note(sprintf('wake node (poll 60s, backoff <= 200 ms): retry after %.3f s', $w503_gap));
ok($w503_gap < 5, 'wake node: the retry follows its backoff, not poll_interval');

# ---------------------------------------------------------------------------
for my $n ($node, $wake)
{
	my @bad = grep { /PANIC|terminated by signal/ } split /\n/, slurp_file($n->logfile);
	ok(!@bad, $n->name . ': no PANIC, no crash in the server log') or diag(join "\n", @bad);
}
$wake->stop;
$node->stop;
$recv->stop;
done_testing();
