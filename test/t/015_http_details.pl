#!/usr/bin/perl
# HTTP delivery details that t/010 does not pin down (docs/delivery.md, "HTTP requests",
# "Dead letters", "Configuration"):
#
#  1. keep-alive connections are reused: 20 messages at max_concurrency 2 travel
#     over at most 2 TCP connections (control: a client that does not keep its
#     connections alive shows up as one connection per request);
#  2. a message whose endpoint does not exist (a plain INSERT: there is no foreign
#     key) is dead-lettered INVALID_MESSAGE "endpoint does not exist" by the
#     worker's periodic orphan check, and leaves outbox.messages (the queue)
#     (control: a pending message of an existing, paused endpoint is left alone);
#  3. Retry-After on 429 (seconds and HTTP date) is honoured, and a huge
#     Retry-After on 503 is capped at pg_outbox.backoff_max (control: a 429
#     without Retry-After is retried after the short backoff);
#  4. dlq.dead_letters.response_body keeps the first 1 KiB of the body: exactly
#     1024 bytes of a long ASCII body, and for a multibyte character that
#     straddles byte 1024 the longest prefix made of whole characters;
#  5. the DLQ timestamps of a RETRY_EXHAUSTED row are those of its attempts:
#     created <= first failure < last failure <= dead;
#  6. a TLS error (https:// to a plain-HTTP port) is retried up to max_attempts,
#     named as SSL/TLS in error_message, and never reaches the receiver as an
#     HTTP request;
#  7. an endpoint without max_attempts / timeout_ms uses pg_outbox.max_attempts /
#     pg_outbox.http_timeout.
#
# Network: 127.0.0.1 only (no DNS name anywhere).
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use Encode ();
use HTTP::Tiny;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

# backoff_base 50 ms: a retry without Retry-After comes back within ~50 ms, so
#   every Retry-After gap below is the header's doing, not the backoff's.
# backoff_max 4s: the cap of the 503 "Retry-After: 3600" case.
# max_attempts 3, http_timeout 300ms: the GUC fallbacks of scenario 7.  Every
#   other endpoint sets timeout_ms explicitly, so that a loaded machine cannot
#   turn a slow answer into a timeout there.
# max_concurrency 2: scenario 1.
# breaker_threshold 1000: no circuit opens on the always-failing endpoints.
my $BACKOFF_MAX = 4;
my $node = new_outbox_node(
	'details',
	'pg_outbox.backoff_base'      => '50ms',
	'pg_outbox.backoff_max'       => "${BACKOFF_MAX}s",
	'pg_outbox.max_attempts'      => '3',
	'pg_outbox.http_timeout'      => '300ms',
	'pg_outbox.max_concurrency'   => '2',
	'pg_outbox.breaker_threshold' => '1000');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $recv = start_receiver();

# ---------------------------------------------------------------------------
# helpers

# The endpoints of this file take a 30 s timeout_ms (guc_timeout leaves it out, so
# that the GUC applies).
my %T30 = (timeout_ms => 30000);

sub wait_dead
{
	my ($id, $timeout) = @_;
	return wait_sql($node,
		"SELECT count(*) = 1 FROM dlq.dead_letters WHERE message_id = $id",
		$timeout // 30);
}

# Gap in seconds between the receipt of request $i and $j of a path; undef when
# one is missing (callers use // -1 for a lower bound, // 9e9 for an upper one, so
# that a missing request fails both).
sub gap
{
	my ($path, $i, $j) = @_;
	my @r = @{ $recv->requests(path => $path) };
	return undef unless @r > $j;
	return $r[$j]{time} - $r[$i]{time};
}

# RFC 7231 IMF-fixdate, built by hand: strftime's %a/%b follow the locale.
sub http_date
{
	my ($t) = @_;
	my @d = gmtime($t);
	my @wd = qw(Sun Mon Tue Wed Thu Fri Sat);
	my @mo = qw(Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec);
	return sprintf('%s, %02d %s %04d %02d:%02d:%02d GMT',
		$wd[ $d[6] ], $d[3], $mo[ $d[4] ], $d[5] + 1900, $d[2], $d[1], $d[0]);
}

# The raw bytes of a dead letter's response_body (hex avoids any client-side
# encoding question).
sub response_body_bytes
{
	my ($id) = @_;
	my $hex = sql($node, "SELECT encode(convert_to(response_body, 'UTF8'), 'hex')
	                 FROM dlq.dead_letters WHERE message_id = $id");
	return pack('H*', $hex);
}

sub valid_utf8
{
	my ($bytes) = @_;
	my $copy = $bytes;
	return eval { Encode::decode('UTF-8', $copy, Encode::FB_CROAK); 1 } ? 1 : 0;
}

is(sql($node, 'SHOW server_encoding'), 'UTF8', 'the cluster is UTF8 (scenario 4 depends on it)');

# ---------------------------------------------------------------------------
# 2 (started first, checked later). An orphan message: its endpoint does not
#   exist.  The orphan check runs every 10 s, so the row is inserted now and
#   checked once the rest is done.  In the same statement, a message for an
#   existing but paused endpoint: the orphan check must not touch it.

endpoint($node, $recv, 'parked', '/parked', %T30);
sql($node, q{SELECT outbox.pause_endpoint('parked')});
my ($orphan_id, $parked_id) = split /\n/, sql($node, q{
	INSERT INTO outbox.messages (endpoint, payload, event_type)
	VALUES ('no_such_endpoint', '{"orphan": true}', 'orphan.test'),
	       ('parked', '{"parked": true}', 'parked.test')
	RETURNING id});
like($orphan_id, qr/^\d+$/, 'orphan: a plain INSERT for a missing endpoint is accepted (no FK)');

# ---------------------------------------------------------------------------
# 1. Keep-alive: 20 messages, max_concurrency 2, a path never used before.
#    Without reuse every request would open its own connection (20); with
#    reuse, at most max_concurrency connections carry them all.

endpoint($node, $recv, 'ka', '/ka', %T30);
sql($node, q{BEGIN;
	SELECT outbox.enqueue('ka', format('{"n": %s}', g)::jsonb) FROM generate_series(1, 20) g;
	COMMIT;});
ok($recv->wait_requests('/ka', 20), 'keep-alive: 20 requests received');
ok(wait_sql($node, q{SELECT (SELECT count(*) FROM outbox.history WHERE endpoint = 'ka') = 20
                        AND NOT EXISTS (SELECT FROM outbox.messages WHERE endpoint = 'ka')}),
	'keep-alive: all 20 messages sent (in the history, none left in the queue)');
my @ka = @{ $recv->requests(path => '/ka') };
is(scalar(@ka), 20, 'keep-alive: exactly 20 requests (one per message)');
my %ka_conns = map { $_->{conn} => 1 } @ka;
note('keep-alive: 20 requests over ' . scalar(keys %ka_conns) . ' connection(s)');
cmp_ok(scalar(keys %ka_conns), '<=', 2,
	'keep-alive: the 20 requests travelled over at most 2 TCP connections (max_concurrency 2)');

# Control: the receiver's conn ids do tell connections apart.  A client that
# closes after each request (HTTP::Tiny without keep-alive) shows as 3 ids.
my $noreuse = HTTP::Tiny->new(keep_alive => 0, timeout => 30);
$noreuse->post($recv->url('/noreuse'), { content => '{}' }) for 1 .. 3;
my %nr_conns = map { $_->{conn} => 1 } @{ $recv->requests(path => '/noreuse') };
is(scalar(keys %nr_conns), 3,
	'keep-alive control: 3 requests without keep-alive arrive over 3 distinct connections');

# ---------------------------------------------------------------------------
# Scenarios 3, 4, 5 and 7 run side by side (they are independent and each is
# mostly waiting).

# 3. Retry-After.
endpoint($node, $recv, 'ra429', '/ra429', %T30);
$recv->add_rule(path => '/ra429', status => 429, retry_after => '2', times => 1);
endpoint($node, $recv, 'ra429_none', '/ra429_none', %T30);
$recv->add_rule(path => '/ra429_none', status => 429, times => 1);
endpoint($node, $recv, 'ra_date', '/ra_date', %T30);
# 4 s ahead, truncated to the second: the worker sees 3-4 s (minus the time until
# it parses the answer), below the 4 s cap.
my $ra_date = http_date(int(time) + 4);
note("Retry-After HTTP date: $ra_date");
$recv->add_rule(path => '/ra_date', status => 429, retry_after => $ra_date, times => 1);
endpoint($node, $recv, 'ra_cap', '/ra_cap', %T30);
$recv->add_rule(path => '/ra_cap', status => 503, retry_after => '3600', times => 1);

# 4. Response bodies of a 400 (dead at once, HTTP_CLIENT_ERROR).  The ASCII body
#    is varied (a counter) so that "prefix" means something.
my $ascii = join '', map { sprintf('%04d:', $_) } 0 .. 999;    # 5000 bytes
my %bodies = (ascii => $ascii);
# A multibyte character starting at $off, so that it straddles byte 1024 (the
# last byte kept is index 1023): every alignment of 2-, 3- and 4-byte characters.
# The cut character must be dropped, not stored as something else: mb4_1021 is
# the one alignment where a 3-byte U+FFFD in place of the 3 cut bytes would still
# fit in 1024 bytes, and it is not part of the body.
my %straddle = (
	mb2_1023 => [ "\x{e9}",    1023 ],    # é, 2 bytes
	mb3_1022 => [ "\x{20ac}",  1022 ],    # €, 3 bytes
	mb3_1023 => [ "\x{20ac}",  1023 ],
	mb4_1021 => [ "\x{1f600}", 1021 ],    # 😀, 4 bytes
	mb4_1022 => [ "\x{1f600}", 1022 ],
	mb4_1023 => [ "\x{1f600}", 1023 ]);
for my $case (sort keys %straddle)
{
	my ($char, $off) = @{ $straddle{$case} };
	$bodies{$case} = substr($ascii, 0, $off) . $char . substr($ascii, $off);
}
my %body_id;
for my $case (sort keys %bodies)
{
	endpoint($node, $recv, "body_$case", "/body/$case", %T30);
	$recv->add_rule(path => "/body/$case", status => 400, body => $bodies{$case});
}

# 5 and 7. Always 500, no max_attempts on the endpoint: pg_outbox.max_attempts (3)
#    applies (the default would be 10).
endpoint($node, $recv, 'guc_attempts', '/guc_attempts', %T30);
$recv->add_rule(path => '/guc_attempts', status => 500, body => 'always failing');

# 7. No timeout_ms on the endpoint: pg_outbox.http_timeout (300 ms) applies (the
#    default would be 5 s).  The first request hangs 5 s.  max_attempts 10, so
#    that a 300 ms timeout on a loaded machine cannot exhaust it.
endpoint($node, $recv, 'guc_timeout', '/guc_timeout', max_attempts => 10);    # the GUC's timeout
$recv->add_rule(path => '/guc_timeout', action => 'hang', hang_ms => 5000, times => 1);

my %id;
for my $ep (qw(ra429 ra429_none ra_date ra_cap guc_attempts guc_timeout))
{
	$id{$ep} = sql($node, "SELECT outbox.enqueue('$ep', '{\"ep\": \"$ep\"}', event_type => '$ep')");
}
for my $case (sort keys %bodies)
{
	$body_id{$case} = sql($node, "SELECT outbox.enqueue('body_$case', '{\"case\": \"$case\"}')");
}

# ---------------------------------------------------------------------------
# 3. Retry-After: checks.

ok($recv->wait_requests('/ra429', 2), '429 Retry-After 2: second attempt arrives');
my $g = gap('/ra429', 0, 1);
note(sprintf('429 Retry-After: 2 -> second attempt after %.3f s', $g // -1));
cmp_ok($g // -1, '>=', 1.9, '429 Retry-After: 2 -> second attempt no sooner than 2 s after the first');
is($recv->requests(path => '/ra429')->[0]{answered}, 429, '429 Retry-After 2: the worker did get the 429');
ok(wait_sql($node, "SELECT status = 'sent' AND attempts = 2 FROM outbox.message($id{ra429})"),
	'429 Retry-After 2: sent on the second attempt');

ok($recv->wait_requests('/ra429_none', 2), '429 without Retry-After: second attempt arrives');
$g = gap('/ra429_none', 0, 1);
note(sprintf('429 without Retry-After -> second attempt after %.3f s', $g // -1));
cmp_ok($g // 9e9, '<', 1.5, '429 without Retry-After (control): retried after the short backoff (< 1.5 s)');

ok($recv->wait_requests('/ra_date', 2), '429 Retry-After HTTP date: second attempt arrives');
$g = gap('/ra_date', 0, 1);
note(sprintf('429 Retry-After: <date ~4 s ahead> -> second attempt after %.3f s', $g // -1));
cmp_ok($g // -1, '>=', 1.5, '429 Retry-After HTTP date ~3-4 s ahead: second attempt no sooner than 1.5 s');
is($recv->requests(path => '/ra_date')->[0]{answered}, 429, '429 Retry-After HTTP date: the worker did get the 429');

ok($recv->wait_requests('/ra_cap', 2, 60), '503 Retry-After 3600: second attempt arrives');
$g = gap('/ra_cap', 0, 1);
note(sprintf('503 Retry-After: 3600 (backoff_max %d s) -> second attempt after %.3f s',
	$BACKOFF_MAX, $g // -1));
cmp_ok($g // -1, '>=', $BACKOFF_MAX - 0.1,
	"503 Retry-After 3600: the header is honoured up to the cap (>= backoff_max ${BACKOFF_MAX}s)");
cmp_ok($g // 9e9, '<', 20,
	"503 Retry-After 3600: capped at backoff_max (${BACKOFF_MAX}s): second attempt within 20 s, not an hour");
ok(wait_sql($node, "SELECT status = 'sent' AND attempts = 2 FROM outbox.message($id{ra_cap})"),
	'503 Retry-After 3600: sent on the second attempt');

# ---------------------------------------------------------------------------
# 4. response_body: checks.

for my $case (sort keys %bodies)
{
	ok(wait_dead($body_id{$case}), "body $case: dead letter created");
}
is(sql($node, "SELECT concat_ws('|', reason_code, http_status, attempts)
          FROM dlq.dead_letters WHERE message_id = $body_id{ascii}"),
	'HTTP_CLIENT_ERROR|400|1', 'body ascii: HTTP_CLIENT_ERROR, 400, one attempt');
is($recv->requests(path => '/body/ascii')->[0]{answered}, 400, 'body ascii: the receiver sent the whole 400 answer');
my $kept = response_body_bytes($body_id{ascii});
is(length($kept), 1024, 'body ascii: response_body is 1024 bytes (of 5000)');
is(sql($node, "SELECT octet_length(response_body) FROM dlq.dead_letters WHERE message_id = $body_id{ascii}"),
	'1024', 'body ascii: octet_length(response_body) = 1024');
ok($kept eq substr($ascii, 0, 1024), 'body ascii: response_body is the first 1024 bytes of the body');

for my $case (sort keys %straddle)
{
	my ($char, $off) = @{ $straddle{$case} };
	my $body_bytes = Encode::encode_utf8($bodies{$case});
	$kept = response_body_bytes($body_id{$case});
	note(sprintf('body %s: %d bytes kept, last bytes %s', $case, length($kept),
		unpack('H*', substr($kept, -6))));
	ok(valid_utf8($kept), "body $case: response_body is valid UTF-8");
	cmp_ok(length($kept), '<=', 1024, "body $case: response_body is at most 1024 bytes");
	ok(substr($body_bytes, 0, length($kept)) eq $kept,
		"body $case: response_body is a prefix of the body (no byte the body did not have)");
	is(length($kept), $off,
		"body $case: every whole character within the first 1024 bytes is kept ($off bytes)");
}

# ---------------------------------------------------------------------------
# 7 (max_attempts) and 5 (timestamps): the always-500 endpoint without
#   max_attempts.

ok(wait_dead($id{guc_attempts}), 'GUC max_attempts: dead letter created');
is(sql($node, "SELECT concat_ws('|', reason_code, attempts, http_status)
          FROM dlq.dead_letters WHERE message_id = $id{guc_attempts}"),
	'RETRY_EXHAUSTED|3|500',
	'GUC max_attempts: endpoint without max_attempts -> RETRY_EXHAUSTED after pg_outbox.max_attempts = 3');
# The row is out of outbox.messages: no further attempt can start.
is(sql($node, "SELECT count(*) FROM outbox.messages WHERE id = $id{guc_attempts}"), '0',
	'GUC max_attempts: message gone from outbox.messages');
my @ga = @{ $recv->requests(path => '/guc_attempts') };
is(scalar(@ga), 3, 'GUC max_attempts: exactly 3 requests');
is_deeply([ map { $_->{answered} } @ga ], [ 500, 500, 500 ],
	'GUC max_attempts: the worker got 500 each time');

is(sql($node, "SELECT message_created_at <= first_failed_at AND first_failed_at < last_failed_at
               AND last_failed_at <= dead_at
          FROM dlq.dead_letters WHERE message_id = $id{guc_attempts}"),
	't', 'DLQ timestamps: message_created_at <= first_failed_at < last_failed_at <= dead_at');
# Tied to the requests themselves (same machine clock): the first failure was
# written after the first request arrived and before the second was sent; the
# last failure after the third request arrived.
my ($ff, $lf) = split /\|/, sql($node, "SELECT extract(epoch FROM first_failed_at) || '|' ||
                                        extract(epoch FROM last_failed_at)
                                   FROM dlq.dead_letters WHERE message_id = $id{guc_attempts}");
note(sprintf('requests at +0, +%.3f, +%.3f s; first_failed_at +%.3f, last_failed_at +%.3f s',
	$ga[1]{time} - $ga[0]{time}, $ga[2]{time} - $ga[0]{time}, $ff - $ga[0]{time}, $lf - $ga[0]{time}))
  if @ga == 3;
ok(@ga == 3 && $ff >= $ga[0]{time} && $ff <= $ga[1]{time},
	'DLQ timestamps: first_failed_at lies between the first and the second attempt');
ok(@ga == 3 && $lf >= $ga[2]{time}, 'DLQ timestamps: last_failed_at is after the last attempt');

# 7 (http_timeout).
ok($recv->wait_requests('/guc_timeout', 2), 'GUC http_timeout: second attempt arrives');
ok(wait_until(sub { defined $recv->requests(path => '/guc_timeout')->[0]{outcome} }, 30, 'first request settled'),
	'GUC http_timeout: the receiver has settled the hanging request');
my @gt = @{ $recv->requests(path => '/guc_timeout') };
ok(@gt && !defined $gt[0]{answered}, 'GUC http_timeout: the first request was never answered');
is($gt[0]{outcome}, 'hang', 'GUC http_timeout: ... it hung until the client went away');
$g = gap('/guc_timeout', 0, 1);
note(sprintf('GUC http_timeout 300ms, receiver hanging 5 s: second attempt after %.3f s', $g // -1));
cmp_ok($g // -1, '>=', 0.25, 'GUC http_timeout: the first attempt was given its 300 ms');
cmp_ok($g // 9e9, '<', 3,
	'GUC http_timeout: endpoint without timeout_ms gave up after pg_outbox.http_timeout (second attempt < 3 s, not 5 s)');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($id{guc_timeout})"),
	'GUC http_timeout: sent in the end');

# ---------------------------------------------------------------------------
# 2. The orphan: checks (the check runs every 10 s; 60 s is generous).

ok(wait_dead($orphan_id, 60), 'orphan: dead-lettered');
is(sql($node, "SELECT concat_ws('|', reason_code, error_message, endpoint, payload::text, event_type)
          FROM dlq.dead_letters WHERE message_id = $orphan_id"),
	'INVALID_MESSAGE|endpoint does not exist|no_such_endpoint|{"orphan": true}|orphan.test',
	'orphan: INVALID_MESSAGE, "endpoint does not exist", message kept');
is(sql($node, "SELECT count(*) FROM outbox.messages WHERE id = $orphan_id"), '0',
	'orphan: gone from outbox.messages');
# Control: the check that removed the orphan saw this row too (same INSERT) and
# left it: its endpoint exists.
is(sql($node, "SELECT concat_ws('|', status, attempts) FROM outbox.message($parked_id)"),
	'pending|0', 'orphan control: a message of an existing (paused) endpoint stays pending');
is(sql($node, "SELECT count(*) FROM dlq.dead_letters WHERE message_id = $parked_id"), '0',
	'orphan control: ... and is not dead-lettered');
is(scalar(@{ $recv->requests(path => '/parked') }), 0, 'orphan control: ... nor delivered (paused)');

# ---------------------------------------------------------------------------
# 6. TLS error: https:// to the receiver's plain-HTTP port.  Run alone, so that
#    the receiver's counters show only this.  The receiver answers the
#    ClientHello (not an HTTP request line) with a plain 400 and records nothing.

ok(wait_sql($node, q{SELECT count(*) = 0 FROM outbox.messages WHERE endpoint <> 'parked'}),
	'TLS: nothing else in flight (the queue holds only the parked message)');
my $before = $recv->stats;
my $tls_url = sprintf('https://127.0.0.1:%d/tls', $recv->port);
create_endpoint($node, 'tls', $tls_url, %T30, max_attempts => 2);
my $tls_id = sql($node, q{SELECT outbox.enqueue('tls', '{"tls": 1}')});
ok(wait_dead($tls_id), 'TLS: dead letter created');
my ($tls_reason, $tls_attempts, $tls_status, $tls_error) = split /\|/,
  sql($node, "SELECT concat_ws('|', reason_code, attempts, coalesce(http_status::text, 'null'), error_message)
         FROM dlq.dead_letters WHERE message_id = $tls_id"), 4;
note("TLS: error_message: $tls_error");
is($tls_reason, 'RETRY_EXHAUSTED', 'TLS: the handshake error is retryable: RETRY_EXHAUSTED');
is($tls_attempts, '2', 'TLS: ... after max_attempts = 2 attempts');
is($tls_status, 'null', 'TLS: no HTTP status');
like($tls_error, qr/SSL|TLS/, 'TLS: error_message names SSL/TLS');
my $after = $recv->stats;
cmp_ok($after->{accepted} - $before->{accepted}, '>=', 2,
	'TLS: both attempts did connect to the receiver');
is($after->{requests}, $before->{requests},
	'TLS: the receiver recorded no HTTP request (a ClientHello is not one)');
is(scalar(@{ $recv->requests(path => '/tls') }), 0, 'TLS: nothing recorded on /tls');

# ---------------------------------------------------------------------------
my @bad = grep { /PANIC|terminated by signal/ } split /\n/, slurp_file($node->logfile);
ok(!@bad, 'no PANIC, no crash in the server log') or diag(join "\n", @bad);
$node->stop;
$recv->stop;
done_testing();
