#!/usr/bin/perl
# A corpus of bad (and borderline) input through every SQL function and every GUC
# (docs/testing.md, "Bad input"; docs/operations.md, "Configuration": "Bad values are refused with PostgreSQL's usual GUC
# errors"):
#
#  - every call either works or fails with a clean error: a SQLSTATE of its own (never
#    XX000, never a lost connection), and the promised SQLSTATE where there is one;
#  - every message that is accepted ends sent or dead-lettered within a bounded time,
#    as the corpus says (the body byte for byte for JSON edge cases, unicode, 1 MB and
#    10 MB payloads (pg_outbox.max_payload_size is raised to 16 MB for them);
#    INVALID_MESSAGE, never sent, for rows a plain INSERT wrote that cannot be sent: a
#    header that is not a string, CR/LF, a bad header name, an endpoint that does not
#    exist; PAYLOAD_TOO_LARGE for a receiver's 413 and for NOTIFY): the worker never
#    loops on a bad row;
#  - every GUC at its bounds is accepted and past them refused (22023) by ALTER
#    SYSTEM; after pg_reload_conf() with all of them at their minimum, then at their
#    maximum, then reset, the worker still delivers;
#  - afterwards the server never crashed: the postmaster and the worker have the pids
#    they had at the start, and the log has no crash and no PANIC.
#
# Section 7 keeps the rows that once stalled the worker (deliver_at => 'infinity', an
# event type too large for the DLQ's index): now refused at enqueue, and the worker
# keeps delivering.
#
# Section 8: pg_outbox.max_payload_size.  enqueue refuses a larger payload (54000) and
# inserts nothing; a row over it written by a plain INSERT is dead-lettered as
# PAYLOAD_TOO_LARGE without being sent, and the worker goes on delivering.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use Digest::MD5 qw(md5_hex);
use Encode ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $node = new_outbox_node(
	'badinput',
	'pg_outbox.backoff_base'      => '50ms',
	'pg_outbox.backoff_max'       => '200ms',
	'pg_outbox.breaker_threshold' => '1000',
	'pg_outbox.max_attempts'      => '3',
	'pg_outbox.max_payload_size'  => '16MB',       # the corpus's 1 MB and 10 MB payloads
	'log_min_messages'            => 'warning',    # ERROR lines in the log too
	'restart_after_crash'         => 'on');        # a crash is a failed check, not the end
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $W = webhook_prefix($node);    # webhook-id = $W<id> (docs/delivery.md, Webhook id)
my $recv = start_receiver();

sub postmaster_pid
{
	my ($pid) = split /\n/, slurp_file($node->data_dir . '/postmaster.pid');
	return $pid;
}

ok(wait_until(sub { worker_pid($node) =~ /^\d+$/ }), 'worker running');
my $postmaster0 = postmaster_pid();
my $worker0     = worker_pid($node);

# Runs one statement; returns (sqlstate or '00000', output, error text). A lost
# connection is reported as 'LOST'.
sub try_sql
{
	my ($query) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$query");
	return ('00000', $out, '') if $rc == 0;
	return ('LOST', $out, $err)
	  if $err =~ /server closed the connection|connection to server was lost|could not connect/;
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return ($state // 'UNKNOWN', $out, $err);
}

# One corpus entry: [label, sql, expected], expected is 'ok', 'error' (any clean
# error), a SQLSTATE, or 'ok|SQLSTATE'.
sub check_call
{
	my ($label, $query, $expected) = @_;
	my ($state, $out, $err) = try_sql($query);
	my $clean = $state ne 'LOST' && $state ne 'UNKNOWN' && $state !~ /^(XX|58)/;
	my $fits =
	    $expected eq 'ok'    ? $state eq '00000'
	  : $expected eq 'error' ? $state ne '00000'
	  :                        grep { $_ eq $state } map { $_ eq 'ok' ? '00000' : $_ } split /\|/, $expected;
	ok($clean && $fits, "$label: $state (expected $expected)")
	  or diag("$query\n$err");
	return ($state, $out);
}

# ---------------------------------------------------------------------------
# Endpoints used by the corpus.

my %url = map { $_ => $recv->url("/hooks/$_") } qw(plain big big413 hdr);
sql($node, "SELECT outbox.create_endpoint('plain', url => '$url{plain}')");
sql($node, "SELECT outbox.create_endpoint('big', url => '$url{big}', timeout_ms => 60000)");
sql($node, "SELECT outbox.create_endpoint('big413', url => '$url{big413}', timeout_ms => 60000)");
sql($node, "SELECT outbox.create_endpoint('hdr', url => '$url{hdr}')");
sql($node, "SELECT outbox.create_endpoint('feed', channel => 'badinput_feed')");
sql($node, "SELECT outbox.create_endpoint('ord', url => '$url{plain}', ordered => true)");
$recv->add_rule(path => '/hooks/big413', status => 413, body => 'too large');

# ---------------------------------------------------------------------------
# 1. Endpoint administration.

my $long_path = 'p' x 100_000;
my @endpoint_corpus = (
	# names
	[ 'name NULL',             q{SELECT outbox.create_endpoint(NULL, url => 'http://127.0.0.1:1/')}, '22004' ],
	[ 'name empty',            q{SELECT outbox.create_endpoint('', url => 'http://127.0.0.1:1/')}, '42602' ],
	[ 'name blank',            q{SELECT outbox.create_endpoint(' ', url => 'http://127.0.0.1:1/')}, '42602' ],
	[ 'name 64 chars',         q{SELECT outbox.create_endpoint(repeat('a', 64), url => 'http://127.0.0.1:1/')}, '42602' ],
	[ 'name 1 MB',             q{SELECT outbox.create_endpoint(repeat('a', 1048576), url => 'http://127.0.0.1:1/')}, '42602' ],
	[ 'name SQL',              q{SELECT outbox.create_endpoint('a''; DROP TABLE outbox.messages; --', url => 'http://127.0.0.1:1/')}, '42602' ],
	[ 'name LF',               q{SELECT outbox.create_endpoint(E'a\nb', url => 'http://127.0.0.1:1/')}, '42602' ],
	[ 'name emoji',            q{SELECT outbox.create_endpoint('hook-😀', url => 'http://127.0.0.1:1/')}, '42602' ],
	[ 'name path',             q{SELECT outbox.create_endpoint('../../etc', url => 'http://127.0.0.1:1/')}, '42602' ],
	[ 'name 63 chars',         q{SELECT outbox.create_endpoint(repeat('z', 63), url => 'http://127.0.0.1:1/')}, 'ok' ],
	# url / channel
	[ 'neither url nor channel', q{SELECT outbox.create_endpoint('x1')}, '22023' ],
	[ 'url empty',             q{SELECT outbox.create_endpoint('x1', url => '')}, '22023' ],
	[ 'url 10 KB host',        q{SELECT outbox.create_endpoint('x1', url => 'http://' || repeat('a', 10240) || '.com/')}, '22023' ],
	[ 'url port 0',            q{SELECT outbox.create_endpoint('x1', url => 'http://127.0.0.1:0/')}, '22023' ],
	[ 'url port 65536',        q{SELECT outbox.create_endpoint('x1', url => 'http://127.0.0.1:65536/')}, '22023' ],
	[ 'url port huge',         q{SELECT outbox.create_endpoint('x1', url => 'http://127.0.0.1:99999999999999999999/')}, '22023' ],
	[ 'url port negative',     q{SELECT outbox.create_endpoint('x1', url => 'http://127.0.0.1:-1/')}, '22023' ],
	[ 'url IPv6 unclosed',     q{SELECT outbox.create_endpoint('x1', url => 'http://[::1/')}, '22023' ],
	[ 'url IPv6 bad',          q{SELECT outbox.create_endpoint('x1', url => 'http://[zz::1]/')}, '22023' ],
	[ 'url IPv4 octal',        q{SELECT outbox.create_endpoint('x1', url => 'http://0127.0.0.1/')}, '22023' ],
	[ 'url IPv4 300',          q{SELECT outbox.create_endpoint('x1', url => 'http://300.0.0.1/')}, '22023' ],
	[ 'url unicode host',      q{SELECT outbox.create_endpoint('x1', url => 'http://bücher.example/')}, '22023' ],
	[ 'url bad percent',       q{SELECT outbox.create_endpoint('x1', url => 'http://127.0.0.1/%zz')}, '22023' ],
	[ 'url NUL escape',        q{SELECT outbox.create_endpoint('x1', url => 'http://127.0.0.1/%00')}, 'ok' ],
	[ 'channel empty',         q{SELECT outbox.create_endpoint('x2', channel => '')}, '22023' ],
	[ 'channel 64 bytes',      q{SELECT outbox.create_endpoint('x2', channel => repeat('c', 64))}, '22023' ],
	[ 'channel control',       q{SELECT outbox.create_endpoint('x2', channel => E'c\x01')}, '22023' ],
	[ 'channel emoji',         q{SELECT outbox.create_endpoint('x2', channel => 'c😀')}, 'ok' ],
	# headers
	[ 'headers array',         q{SELECT outbox.create_endpoint('x3', url => 'http://127.0.0.1:1/', headers => '[]')}, '22023' ],
	[ 'headers null',          q{SELECT outbox.create_endpoint('x3', url => 'http://127.0.0.1:1/', headers => 'null')}, '22023' ],
	[ 'headers number',        q{SELECT outbox.create_endpoint('x3', url => 'http://127.0.0.1:1/', headers => '123')}, '22023' ],
	[ 'headers nested',        q{SELECT outbox.create_endpoint('x3', url => 'http://127.0.0.1:1/', headers => '{"a": {"b": "c"}}')}, '22023' ],
	[ 'header value 8193 B',   q{SELECT outbox.create_endpoint('x3', url => 'http://127.0.0.1:1/', headers => jsonb_build_object('X-A', repeat('v', 8193)))}, '22023' ],
	[ 'header value 1 MB',     q{SELECT outbox.create_endpoint('x3', url => 'http://127.0.0.1:1/', headers => jsonb_build_object('X-A', repeat('v', 1048576)))}, '22023' ],
	[ 'header value 8192 B',   q{SELECT outbox.create_endpoint('x4', url => 'http://127.0.0.1:1/', headers => jsonb_build_object('X-A', repeat('v', 8192)))}, 'ok' ],
	[ 'header name 10 KB',     q{SELECT outbox.create_endpoint('x5', url => 'http://127.0.0.1:1/', headers => jsonb_build_object(repeat('N', 10240), 'v'))}, 'ok|22023' ],
	[ '10000 headers',         q{SELECT outbox.create_endpoint('x6', url => 'http://127.0.0.1:1/', headers => (SELECT jsonb_object_agg('X-H' || i, 'v') FROM generate_series(1, 10000) i))}, 'ok|22023' ],
	(map {
		my $c = $_;
		(my $shown = $c) =~ s/([^ -~])/sprintf('\\x%02x', ord $1)/ge;
		[ "header name with '$shown'",
		  "SELECT outbox.create_endpoint('x7', url => 'http://127.0.0.1:1/', headers => jsonb_build_object('X' || chr(" . ord($c) . ") || 'A', 'v'))",
		  '22023' ]
	} ('(', ')', ',', '/', ':', ';', '<', '=', '>', '?', '@', '[', '\\', ']', '{', '}', '"', ' ', "\t", "\x7f", "\x{e9}")),
	[ "header name with every tchar", q{SELECT outbox.create_endpoint('x8', url => 'http://127.0.0.1:1/', headers => jsonb_build_object('!#$%&''*+-.^_`|~', 'v'))}, 'ok' ],
	[ 'header value UTF-8',    q{SELECT outbox.create_endpoint('x9', url => 'http://127.0.0.1:1/', headers => '{"X-A": "café 😀 שלום"}')}, 'ok' ],
	# secrets and limits
	[ 'secret 1 MB',           q{SELECT outbox.create_endpoint('x10', url => 'http://127.0.0.1:1/', secret => 'whsec_' || repeat('QUFB', 349525))}, '22023' ],
	[ 'secret whsec_ only',    q{SELECT outbox.create_endpoint('x10', url => 'http://127.0.0.1:1/', secret => 'whsec_')}, '22023' ],
	[ 'timeout_ms 0',          q{SELECT outbox.create_endpoint('x10', url => 'http://127.0.0.1:1/', timeout_ms => 0)}, '22023' ],
	[ 'timeout_ms -1',         q{SELECT outbox.create_endpoint('x10', url => 'http://127.0.0.1:1/', timeout_ms => -1)}, '22023' ],
	[ 'max_attempts 0',        q{SELECT outbox.create_endpoint('x10', url => 'http://127.0.0.1:1/', max_attempts => 0)}, '22023' ],
	[ 'max_attempts -2^31',    q{SELECT outbox.create_endpoint('x10', url => 'http://127.0.0.1:1/', max_attempts => -2147483648)}, '22023' ],
	[ 'max_pending 0',         q{SELECT outbox.create_endpoint('x10', url => 'http://127.0.0.1:1/', max_pending => 0)}, '22023' ],
	[ 'max_pending -2^63',     q{SELECT outbox.create_endpoint('x10', url => 'http://127.0.0.1:1/', max_pending => -9223372036854775808)}, '22023' ],
	[ 'timeout_ms over 5 min', q{SELECT outbox.create_endpoint('x10', url => 'http://127.0.0.1:1/', timeout_ms => 300001)}, '22023' ],
	[ 'concurrency 0',         q{SELECT outbox.create_endpoint('x10', url => 'http://127.0.0.1:1/', concurrency => 0)}, '22023' ],
	[ 'rate_limit -2^31',      q{SELECT outbox.create_endpoint('x10', url => 'http://127.0.0.1:1/', rate_limit => -2147483648)}, '22023' ],
	[ 'limits at their max',   q{SELECT outbox.create_endpoint('x10', url => 'http://127.0.0.1:1/', timeout_ms => 300000, max_attempts => 2147483647, max_pending => 9223372036854775807, concurrency => 2147483647, rate_limit => 2147483647)}, 'ok' ],
	[ 'ordered NULL',          q{SELECT outbox.create_endpoint('x11', url => 'http://127.0.0.1:1/', ordered => NULL)}, 'ok' ],
	[ 'duplicate',             q{SELECT outbox.create_endpoint('plain', url => 'http://127.0.0.1:1/')}, '42710' ],
	# alter / drop / pause / resume
	[ 'alter NULL',            q{SELECT outbox.alter_endpoint(NULL)}, '22004' ],
	[ 'alter unknown',         q{SELECT outbox.alter_endpoint('nope', max_attempts => 1)}, '42704' ],
	[ 'alter 1 MB name',       q{SELECT outbox.alter_endpoint(repeat('a', 1048576), max_attempts => 1)}, '42704' ],
	[ 'alter nothing',         q{SELECT outbox.alter_endpoint('x11')}, 'ok' ],
	[ 'alter url file',        q{SELECT outbox.alter_endpoint('x11', url => 'file:///etc/passwd')}, '22023' ],
	[ 'alter channel + url',   q{SELECT outbox.alter_endpoint('feed', url => 'http://127.0.0.1:1/')}, '22023' ],
	[ 'alter headers LF',      q{SELECT outbox.alter_endpoint('x11', headers => '{"X-A": "a\nb"}')}, '22023' ],
	[ 'alter secret empty',    q{SELECT outbox.alter_endpoint('x11', secret => '')}, 'ok' ],
	[ 'drop NULL',             q{SELECT outbox.drop_endpoint(NULL)}, '22004' ],
	[ 'drop unknown',          q{SELECT outbox.drop_endpoint('nope')}, '42704' ],
	[ 'drop force NULL',       q{SELECT outbox.drop_endpoint('x11', force => NULL)}, 'ok' ],
	[ 'pause NULL',            q{SELECT outbox.pause_endpoint(NULL)}, '22004' ],
	[ 'pause unknown',         q{SELECT outbox.pause_endpoint('')}, '42704' ],
	[ 'resume NULL',           q{SELECT outbox.resume_endpoint(NULL)}, '22004' ],
	[ 'resume 1 MB name',      q{SELECT outbox.resume_endpoint(repeat('a', 1048576))}, '42704' ]);
check_call(@$_) for @endpoint_corpus;
is(sql($node, q{SELECT count(*) FROM outbox.endpoints WHERE name LIKE 'x%' AND name NOT IN
           ('x1', 'x2', 'x4', 'x5', 'x6', 'x8', 'x9', 'x10')}), '0',
	'no refused call left an endpoint behind');

# A 100 KB URL path is a valid URL; its messages settle whatever the receiver says.
check_call('url with a 100 KB path',
	"SELECT outbox.create_endpoint('longurl', url => '$url{plain}?$long_path')", 'ok');

# ---------------------------------------------------------------------------
# 2. enqueue.  Each accepted message is tracked with what must become of it:
#    'sent' (with an optional check of the request), 'dead:REASON', or 'settled'.

my %track;    # id => [label, expectation, check]

sub enqueue_case
{
	my ($label, $query, $expected, $final, $check) = @_;
	my ($state, $out) = check_call($label, $query, $expected);
	if ($state eq '00000' && defined $final)
	{
		my ($id) = $out =~ /^(\d+)$/m;
		if (defined $id) { $track{$id} = [ $label, $final, $check ] }
		else { fail("$label: enqueue returned no id ($out)") }
	}
}

# A message's row wherever it lives: the queue, the history (once delivered) or the DLQ.
sub message_row
{
	my ($id, $columns) = @_;
	return qq{(SELECT $columns FROM outbox.messages WHERE id = $id
	           UNION ALL SELECT $columns FROM outbox.history WHERE id = $id
	           UNION ALL SELECT $columns FROM dlq.dead_letters WHERE message_id = $id)};
}

sub body_is_payload
{
	my ($id) = @_;
	# The worker may have delivered it already: read it from wherever it is.
	my $expected = sql($node, "SELECT md5(payload::text) FROM " . message_row($id, 'payload') . " m");
	return sub {
		my ($r) = @_;
		return md5_hex(Encode::encode_utf8($r->{body})) eq $expected;
	};
}

# JSON edge cases, deep nesting, unicode: delivered byte for byte.
my @payloads = (
	[ 'empty string',     q{'""'} ],
	[ 'empty object',     q{'{}'} ],
	[ 'JSON null',        q{'null'} ],
	[ 'empty array',      q{'[]'} ],
	[ 'zero',             q{'0'} ],
	[ 'minus zero',       q{'-0'} ],
	[ 'true',             q{'true'} ],
	[ 'big number',       q{'123456789012345678901234567890.123456789012345678901234567890'} ],
	[ '1e308',            q{'1e308'} ],
	[ '1e-400',           q{'1e-400'} ],
	[ 'nesting 1000',     q{(repeat('[', 1000) || repeat(']', 1000))} ],
	[ 'nesting objects',  q{(repeat('{"a":', 500) || '1' || repeat('}', 500))} ],
	[ 'emoji',            q{'{"t": "😀👍🏽👨‍👩‍👧‍👦🇫🇷"}'} ],
	[ 'RTL',              q{'{"t": "שלום עולם مرحبا بالعالم \u202eevil\u202c"}'} ],
	[ 'combining',        q{('{"t": "e' || repeat(E'\u0301', 200) || '"}')} ],
	[ 'zero width, BOM',  q{'{"t": "a\u200bb\u200dc\ufeffd\u2028e\u2029f"}'} ],
	[ 'surrogate pair',   q{'{"t": "\ud83d\ude00"}'} ],
	[ 'escapes',          q{'{"t": "\"\\\\\/\b\f\n\r\t\u0001\u001f"}'} ],
	[ 'key order, dups',  q{'{"b": 1, "a": 2, "b": 3}'} ]);
for my $p (@payloads)
{
	my ($label, $expr) = @$p;
	my ($state, $out) = check_call("payload $label",
		"SELECT outbox.enqueue('plain', ${expr}::jsonb, event_type => 'corpus')", 'ok');
	my ($id) = $out =~ /^(\d+)$/m;
	$track{$id} = [ "payload $label", 'sent', body_is_payload($id) ] if defined $id;
}
# jsonb refuses these itself, with a clean error.
enqueue_case('payload text empty', q{SELECT outbox.enqueue('plain', ''::jsonb)}, '22P02');
enqueue_case('payload \u0000', q{SELECT outbox.enqueue('plain', '"a\u0000b"'::jsonb)}, '22P05');
enqueue_case('payload lone surrogate', q{SELECT outbox.enqueue('plain', '"\ud800"'::jsonb)}, '22P02|22P05');
enqueue_case('payload nesting 100000', q{SELECT outbox.enqueue('plain', (repeat('[', 100000) || repeat(']', 100000))::jsonb)}, '54001');
enqueue_case('payload 1e1000000', q{SELECT outbox.enqueue('plain', '1e1000000'::jsonb)}, '22003|22P02');
enqueue_case('payload NULL', q{SELECT outbox.enqueue('plain', NULL)}, '22004');
enqueue_case('endpoint NULL', q{SELECT outbox.enqueue(NULL, '{}')}, '22004');
enqueue_case('endpoint unknown', q{SELECT outbox.enqueue('nope', '{}')}, '42704');
enqueue_case('endpoint 1 MB', q{SELECT outbox.enqueue(repeat('e', 1048576), '{}')}, '42704');

# 1 MB and 10 MB payloads: delivered (the body checked), or 413 -> PAYLOAD_TOO_LARGE;
# over NOTIFY, PAYLOAD_TOO_LARGE.
my $mb1  = q{(SELECT jsonb_agg(md5(i::text)) FROM generate_series(1, 30000) i)};
my $mb10 = q{(SELECT jsonb_agg(md5(i::text)) FROM generate_series(1, 300000) i)};
for my $case ([ '1 MB', $mb1 ], [ '10 MB', $mb10 ])
{
	my ($size, $expr) = @$case;
	my ($state, $out) = check_call("payload $size to a receiver",
		"SELECT outbox.enqueue('big', $expr, event_type => 'big')", 'ok');
	my ($id) = $out =~ /^(\d+)$/m;
	$track{$id} = [ "payload $size", 'sent', body_is_payload($id) ] if defined $id;
	enqueue_case("payload $size answered 413",
		"SELECT outbox.enqueue('big413', $expr)", 'ok', 'dead:PAYLOAD_TOO_LARGE');
	enqueue_case("payload $size over NOTIFY",
		"SELECT outbox.enqueue('feed', $expr)", 'ok', 'dead:PAYLOAD_TOO_LARGE');
}
is(sql($node, q{SELECT octet_length(payload::text) > 10000000
          FROM (SELECT id, payload FROM outbox.messages WHERE endpoint = 'big'
                UNION ALL SELECT id, payload FROM outbox.history WHERE endpoint = 'big') m
         ORDER BY id DESC LIMIT 1}), 't', 'the 10 MB payload is over 10 MB');

# event_type: sent in the outbox-event-type header and indexed in the DLQ, so it is
# 1..200 characters without control characters, refused at enqueue otherwise.
enqueue_case('event_type NULL',  q{SELECT outbox.enqueue('hdr', '{}', event_type => NULL)}, 'ok', 'sent');
enqueue_case('event_type empty', q{SELECT outbox.enqueue('hdr', '{}', event_type => '')}, '22023');
enqueue_case('event_type 200',   q{SELECT outbox.enqueue('hdr', '{}', event_type => repeat('e', 200))}, 'ok', 'sent',
	sub { length($_[0]{headers}{'outbox-event-type'} // '') == 200 });
enqueue_case('event_type 8 KB',  q{SELECT outbox.enqueue('hdr', '{}', event_type => repeat('e', 8192))}, '22023');
enqueue_case('event_type 10 KB', q{SELECT outbox.enqueue('hdr', '{}', event_type => repeat('e', 10240))}, '22023');
enqueue_case('event_type \x01',  q{SELECT outbox.enqueue('hdr', '{}', event_type => E'order\x01created')}, '22023');
enqueue_case('event_type \x7f',  q{SELECT outbox.enqueue('hdr', '{}', event_type => E'order\x7fcreated')}, '22023');
enqueue_case('event_type CRLF',  q{SELECT outbox.enqueue('hdr', '{}', event_type => E'a\r\nb')}, '22023');
enqueue_case('event_type NUL',   q{SELECT outbox.enqueue('hdr', '{}', event_type => E'a\000b')}, '22021');
enqueue_case('event_type emoji', q{SELECT outbox.enqueue('hdr', '{}', event_type => 'order.😀')}, 'ok', 'sent');

# ordering_key: 1..200 characters (it is indexed), a clean refusal otherwise.
enqueue_case('ordering_key 200', q{SELECT outbox.enqueue('ord', '{}', ordering_key => repeat('k', 200))},
	'ok', 'sent');
enqueue_case('ordering_key 10 KB', q{SELECT outbox.enqueue('ord', '{}', ordering_key => repeat('k', 10240))},
	'22023');
enqueue_case('ordering_key 10 KB random',
	q{SELECT outbox.enqueue('ord', '{}', ordering_key => (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 320) i))},
	'22023');
enqueue_case('ordering_key empty', q{SELECT outbox.enqueue('ord', '{}', ordering_key => '')}, '22023');

# idempotency keys: 1..200 characters.
my $k200 = 'k' x 200;
enqueue_case('idempotency_key 200', "SELECT outbox.enqueue('hdr', '{}', idempotency_key => '$k200')", 'ok', 'sent',
	sub { ($_[0]{headers}{'webhook-id'} // '') eq $k200 });
enqueue_case('idempotency_key 201', "SELECT outbox.enqueue('hdr', '{}', idempotency_key => '${k200}k')", '22023');
enqueue_case('idempotency_key 200 emoji',
	q{SELECT outbox.enqueue('hdr', '{}', idempotency_key => repeat('😀', 200))}, 'ok', 'sent',
	sub { Encode::decode('UTF-8', Encode::encode('latin-1', $_[0]{headers}{'webhook-id'} // '')) eq ("\x{1F600}" x 200) });
enqueue_case('idempotency_key 201 emoji', q{SELECT outbox.enqueue('hdr', '{}', idempotency_key => repeat('😀', 201))}, '22023');
enqueue_case('idempotency_key empty', q{SELECT outbox.enqueue('hdr', '{}', idempotency_key => '')}, '22023');
enqueue_case('idempotency_key dot',   q{SELECT outbox.enqueue('hdr', '{}', idempotency_key => 'a.b')}, '22023');
enqueue_case('idempotency_key NBSP',  q{SELECT outbox.enqueue('hdr', '{}', idempotency_key => E'a\u00a0b')}, '22023');
enqueue_case('idempotency_key 1 MB',  q{SELECT outbox.enqueue('hdr', '{}', idempotency_key => repeat('k', 1048576))}, '22023');

# Message headers.
enqueue_case('header value 8192 B', q{SELECT outbox.enqueue('hdr', '{}', headers => jsonb_build_object('X-Big', repeat('v', 8192)))},
	'ok', 'sent', sub { length($_[0]{headers}{'x-big'} // '') == 8192 });
enqueue_case('header value 8193 B', q{SELECT outbox.enqueue('hdr', '{}', headers => jsonb_build_object('X-Big', repeat('v', 8193)))}, '22023');
enqueue_case('header value UTF-8', q{SELECT outbox.enqueue('hdr', '{}', headers => '{"X-Utf8": "café 😀 שלום"}')},
	'ok', 'sent',
	sub { Encode::decode('UTF-8', Encode::encode('latin-1', $_[0]{headers}{'x-utf8'} // '')) eq "caf\x{e9} \x{1F600} \x{5e9}\x{5dc}\x{5d5}\x{5dd}" });
enqueue_case('header overriding a reserved name', q{SELECT outbox.enqueue('hdr', '{}', headers => '{"Content-Length": "0", "webhook-id": "x", "Transfer-Encoding": "chunked"}')},
	'ok', 'sent', sub { ($_[0]{headers}{'webhook-id'} // '') =~ /^\Q$W\E\d+$/ && !defined $_[0]{headers}{'transfer-encoding'} });
enqueue_case('300 headers', q{SELECT outbox.enqueue('hdr', '{}', headers => (SELECT jsonb_object_agg('X-H' || i, repeat('v', 100)) FROM generate_series(1, 300) i))},
	'ok|22023', 'settled');
enqueue_case('headers not an object', q{SELECT outbox.enqueue('hdr', '{}', headers => '["a"]')}, '22023');
enqueue_case('header number value', q{SELECT outbox.enqueue('hdr', '{}', headers => '{"X-A": 1}')}, '22023');
enqueue_case('header empty name', q{SELECT outbox.enqueue('hdr', '{}', headers => '{"": "v"}')}, '22023');

# deliver_at.
enqueue_case('deliver_at -infinity', q{SELECT outbox.enqueue('plain', '{}', deliver_at => '-infinity')}, 'ok', 'sent');
enqueue_case('deliver_at epoch',     q{SELECT outbox.enqueue('plain', '{}', deliver_at => 'epoch')}, 'ok', 'sent');
sql($node, "SELECT outbox.create_endpoint('sched', url => '$url{plain}')");
enqueue_case('deliver_at 294276 AD', q{SELECT outbox.enqueue('sched', '{}', deliver_at => '294276-12-31 23:59:59+00')}, 'ok|22023');
enqueue_case('deliver_at past range', q{SELECT outbox.enqueue('sched', '{}', deliver_at => '294277-01-01 00:00:00+00')}, '22008');

# The long URL endpoint.
enqueue_case('message to a 100 KB URL', q{SELECT outbox.enqueue('longurl', '{}')}, 'ok', 'settled');

# Rows that enqueue would refuse, written by a plain INSERT (a privileged role may):
# the worker must dead-letter each as INVALID_MESSAGE without ever sending it, and go
# on.  The last one names an endpoint that does not exist (there is no foreign key).
for my $case (
	[ 'header number value', q{'hdr', '{"X-A": 1}'} ],
	[ 'headers an array',    q{'hdr', '["X-A"]'} ],
	[ 'header CR/LF value',  q{'hdr', '{"X-A": "a\r\nInjected: 1"}'} ],
	[ 'header empty name',   q{'hdr', '{"": "v"}'} ],
	[ 'header name with a colon', q{'hdr', '{"X-A:B": "v"}'} ],
	[ 'endpoint that does not exist', q{'no_such_endpoint', NULL} ])
{
	my ($label, $values) = @$case;
	enqueue_case("plain INSERT: $label",
		"INSERT INTO outbox.messages (endpoint, headers, payload) VALUES ($values, '{}') RETURNING id",
		'ok', 'dead:INVALID_MESSAGE');
}

# ---------------------------------------------------------------------------
# 3. Every accepted message settles as the corpus says, within a bounded time.

my $ids = join ',', keys %track;
# Undelivered = still in the queue (pending or in flight).
ok( wait_sql($node, 
		"SELECT count(*) = 0 FROM outbox.messages WHERE id IN ($ids)", 120),
	scalar(keys %track) . ' corpus messages are all sent or dead-lettered');
my %sent = map { $_ => 1 } split /\n/,
  sql($node, "SELECT s.id FROM unnest('{$ids}'::bigint[]) AS i(id) CROSS JOIN LATERAL outbox.message(i.id) s
        WHERE s.status = 'sent'");
my %dead = map { my ($id, $reason) = split /\|/; ($id => $reason) } split /\n/,
  sql($node, "SELECT message_id, reason_code FROM dlq.dead_letters WHERE message_id IN ($ids)");
# Fetched path by path: the receiver also holds 10 MB bodies of 413 answers that
# need not be decoded here.
my @hdr_requests = @{ $recv->requests(path => '/hooks/hdr') };
my %request_of;
for my $r (@{ $recv->requests(path => '/hooks/plain') }, @hdr_requests,
	@{ $recv->requests(path => '/hooks/big') })
{
	$request_of{$1} = $r if ($r->{headers}{'webhook-id'} // '') =~ /^\Q$W\E(\d+)$/;
}
# Keyed messages: find them by webhook-id too.
for my $id (keys %track)
{
	next if $request_of{$id};
	my $key = sql($node, "SELECT coalesce(idempotency_key, '') FROM " . message_row($id, 'idempotency_key') . " m");
	next unless length $key;
	($request_of{$id}) = grep {
		Encode::decode('UTF-8', Encode::encode('latin-1', $_->{headers}{'webhook-id'} // '')) eq
		  Encode::decode('UTF-8', $key)
	} @hdr_requests;
}
for my $id (sort { $a <=> $b } keys %track)
{
	my ($label, $final, $check) = @{ $track{$id} };
	my $got = $sent{$id} ? 'sent' : defined $dead{$id} ? "dead:$dead{$id}" : 'missing';
	if ($final eq 'settled')
	{
		like($got, qr/^(sent|dead:)/, "$label: settled ($got)");
		next;
	}
	is($got, $final, "$label: $final");
	if ($final eq 'sent' && $check)
	{
		ok($request_of{$id} && $check->($request_of{$id}), "$label: the request is right");
	}
	if ($final eq 'dead:INVALID_MESSAGE')
	{
		ok(!$request_of{$id}, "$label: never sent");
	}
}
# Scheduled messages wait (they are not stuck, they are early); drop them.
is(sql($node, q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'sched' AND next_attempt_at < now() + interval '1000 years'}),
	'0', 'messages scheduled at the end of time are not due');
sql($node, q{SELECT outbox.drop_endpoint('sched', force => true)});

# ---------------------------------------------------------------------------
# 4. The DLQ functions, purge, metrics and status.

my $a_dead = sql($node, q{SELECT min(id) FROM dlq.dead_letters WHERE endpoint = 'feed' AND requeued_at IS NULL AND discarded_at IS NULL});
check_call(@$_) for (
	[ 'requeue NULL',        q{SELECT dlq.requeue(NULL)}, '22004' ],
	[ 'requeue -1',          q{SELECT dlq.requeue(-1)}, '42704' ],
	[ 'requeue 0',           q{SELECT dlq.requeue(0)}, '42704' ],
	[ 'requeue 2^63-1',      q{SELECT dlq.requeue(9223372036854775807)}, '42704' ],
	[ 'requeue_all bad reason', q{SELECT dlq.requeue_all(reason_code => '')}, '22023' ],
	[ 'requeue_all 1 MB reason', q{SELECT dlq.requeue_all(reason_code => repeat('R', 1048576))}, '22023' ],
	[ 'requeue_all no match', q{SELECT dlq.requeue_all(endpoint => repeat('e', 1048576), since => '-infinity')}, 'ok' ],
	[ 'requeue_all future',  q{SELECT dlq.requeue_all(endpoint => 'nope', since => 'infinity')}, 'ok' ],
	[ 'discard NULL',        q{SELECT dlq.discard(NULL)}, '22004' ],
	[ 'discard -1',          q{SELECT dlq.discard(-1)}, '42704' ],
	[ 'discard, 1 MB note',  "SELECT dlq.discard($a_dead, repeat('n', 1048576))", 'ok' ],
	[ 'discard twice',       "SELECT dlq.discard($a_dead)", '55000' ],
	[ 'requeue discarded',   "SELECT dlq.requeue($a_dead)", '55000' ],
	[ 'purge negative',      q{SELECT outbox.purge(interval '-1 second')}, '22023' ],
	[ 'purge 1000000 years', q{SELECT outbox.purge(interval '1000000 years')}, 'ok|22008' ],
	[ 'purge 0',             q{SELECT outbox.purge(interval '0')}, 'ok' ],
	[ 'purge NULL',          q{SELECT outbox.purge(NULL)}, 'ok' ],
	[ 'metrics',             q{SELECT length(outbox.metrics()) > 0}, 'ok' ],
	[ 'worker_status',       q{SELECT count(*) FROM outbox.worker_status()}, 'ok' ],
	[ 'requeue with a bad payload', "SELECT dlq.requeue((SELECT min(id) FROM dlq.dead_letters WHERE requeued_at IS NULL AND discarded_at IS NULL AND endpoint = 'sched'), '\"a\\u0000\"')", '22P05' ]);
# A requeue of the 10 MB dead letter with a 10 MB corrected payload settles too.
my $big_dead = sql($node, q{SELECT min(id) FROM dlq.dead_letters WHERE endpoint = 'big413' AND requeued_at IS NULL AND discarded_at IS NULL});
my ($rq_state, $rq_out) = check_call('requeue a 413 dead letter with a 10 MB payload',
	"SELECT dlq.requeue($big_dead, $mb10)", 'ok');
ok(wait_sql($node, "SELECT status IN ('sent', 'dead') FROM outbox.message(" . ($rq_out =~ /(\d+)/)[0] . ")"),
	'... and settles');

# ---------------------------------------------------------------------------
# 5. GUCs: bounds accepted, beyond refused with 22023, the worker lives through reloads.

sql($node, "SELECT outbox.create_endpoint('probe', url => '$url{plain}', timeout_ms => 10000, max_attempts => 1000)");

sub probe_delivered
{
	my ($what) = @_;
	my $id = sql($node, q{SELECT outbox.enqueue('probe', '{"probe": true}')});
	ok(wait_until(sub { grep { ($_->{headers}{'webhook-id'} // '') eq "$W$id" } @{ $recv->requests(path => '/hooks/plain') } }),
		"the worker delivers after $what");
}

my @bounds = (
	[ 'pg_outbox.batch_size',        [ '1', '100000' ],             [ '0', '100001', '-1', 'abc' ] ],
	[ 'pg_outbox.poll_interval',     [ '10ms', '1h' ],              [ '9ms', '0', '3600001ms', '-1', '10 parsecs' ] ],
	[ 'pg_outbox.max_concurrency',   [ '1', '4096' ],               [ '0', '4097' ] ],
	[ 'pg_outbox.http_timeout',      [ '1ms', '5min' ],             [ '0', '300001ms' ] ],
	[ 'pg_outbox.max_attempts',      [ '1', '1000000' ],            [ '0', '1000001' ] ],
	[ 'pg_outbox.backoff_base',      [ '1ms', '2147483647ms' ],     [ '0', '-1ms', '2147483648ms' ] ],
	[ 'pg_outbox.backoff_max',       [ '1ms', '2147483647ms' ],     [ '0' ] ],
	[ 'pg_outbox.lease',             [ '1s', '2147483s' ],          [ '0', '2147484s', '400ms' ] ],
	[ 'pg_outbox.breaker_threshold', [ '1', '1000000' ],            [ '0', '1000001' ] ],
	[ 'pg_outbox.sent_retention',    [ '0', '2147483647s' ],        [ '-1' ] ],
	[ 'pg_outbox.dlq_retention',     [ '-1', '0', '2147483647s' ],  [ '-2' ] ],
	[ 'pg_outbox.enabled',           [ 'on', 'off' ],               [ 'maybe', '2' ] ],
	[ 'pg_outbox.max_payload_size',  [ '1', '1kB', '2147483647' ],  [ '0', '-1', '2147483648', '1 parsec' ] ],
	[ 'pg_outbox.max_inflight_bytes', [ '1MB', '2147483647' ],      [ '1048575', '0', '-1', '2147483648' ] ]);
for my $b (@bounds)
{
	my ($guc, $good, $bad) = @$b;
	check_call("ALTER SYSTEM SET $guc = '$_'", "ALTER SYSTEM SET $guc = '$_'", 'ok') for @$good;
	check_call("ALTER SYSTEM SET $guc = '$_'", "ALTER SYSTEM SET $guc = '$_'", '22023') for @$bad;
	check_call("SET $guc (session)", "SET $guc = '$good->[0]'", '55P02');
	sql($node, "ALTER SYSTEM RESET $guc");
}
check_call('an unknown pg_outbox GUC', q{ALTER SYSTEM SET pg_outbox.no_such_setting = 1}, '42704|42602');
is(slurp_file($node->data_dir . '/postgresql.auto.conf') =~ /pg_outbox/ ? 'changed' : 'clean', 'clean',
	'postgresql.auto.conf holds no pg_outbox setting after the refusals and resets');

my %minimum = (
	'pg_outbox.batch_size' => '1', 'pg_outbox.poll_interval' => '10ms',
	'pg_outbox.max_concurrency' => '1', 'pg_outbox.http_timeout' => '1ms',
	'pg_outbox.max_attempts' => '1', 'pg_outbox.backoff_base' => '1ms',
	'pg_outbox.backoff_max' => '1ms', 'pg_outbox.lease' => '1s',
	'pg_outbox.breaker_threshold' => '1', 'pg_outbox.sent_retention' => '0',
	'pg_outbox.dlq_retention' => '0', 'pg_outbox.max_inflight_bytes' => '1MB');
# (pg_outbox.max_payload_size at its minimum, 1 byte, refuses every payload: by design
# nothing could be delivered; section 8 checks it small.)
my %maximum = (
	'pg_outbox.batch_size' => '100000', 'pg_outbox.poll_interval' => '1h',
	'pg_outbox.max_concurrency' => '4096', 'pg_outbox.http_timeout' => '5min',
	'pg_outbox.max_attempts' => '1000000', 'pg_outbox.backoff_base' => '2147483647ms',
	'pg_outbox.backoff_max' => '2147483647ms', 'pg_outbox.lease' => '2147483s',
	'pg_outbox.breaker_threshold' => '1000000', 'pg_outbox.sent_retention' => '2147483647s',
	'pg_outbox.dlq_retention' => '2147483647s', 'pg_outbox.max_payload_size' => '2147483647',
	'pg_outbox.max_inflight_bytes' => '2147483647');
for my $set ([ 'every GUC at its minimum', \%minimum ], [ 'every GUC at its maximum', \%maximum ])
{
	my ($what, $values) = @$set;
	# reload_conf waits until the worker itself has re-read its configuration.
	ok(reload_conf($node, map { ($_ => $values->{$_}) } sort keys %$values), "$what: the worker reloaded");
	probe_delivered($what);
}
ok(reload_conf($node, map { ($_ => undef) } sort keys %{ { %minimum, %maximum } }), 'settings reset: the worker reloaded');
is(sql($node, q{SELECT current_setting('pg_outbox.batch_size')}), '500', 'settings reset');
probe_delivered('the reset');

# ---------------------------------------------------------------------------
# 6. The server never crashed and the worker never died.

is(postmaster_pid(), $postmaster0, 'the postmaster is the one that started');
is(worker_pid($node), $worker0, 'the worker is the one that started: it never died');
my $final = sql($node, q{SELECT outbox.enqueue('plain', '{"final": "normal message"}')});
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($final)"),
	'a final normal message is delivered');
is(sql($node, q{SELECT count(*) FROM outbox.messages}), '0',
	'nothing is left pending or in flight');
is(sql($node, q{SELECT count(*) FROM outbox.claims}), '0', 'no claim of the worker is left');
my $log = slurp_file($node->logfile);
unlike($log, qr/terminated by signal|PANIC|was terminated|server process .* exited with exit code/,
	'no crash, no PANIC in the server log');
unlike($log, qr/pg_outbox internal error/, 'no internal error in the server log');

# ---------------------------------------------------------------------------
# 7. Rows that once stalled the worker (bugs found by this file, now fixed).
#
#    An event type too large for a btree entry of dead_letters_event_type_idx made
#    the move to the DLQ fail and with it every settle; deliver_at => 'infinity'
#    made every claim fail.  Both are now refused at enqueue (22023), and the table's
#    CHECK constraints refuse them from a plain INSERT too; the worker keeps going.
sql($node, "SELECT outbox.create_endpoint('never', url => '$url{plain}')");
my ($inf_state) = try_sql(q{SELECT outbox.enqueue('never', '{}', deliver_at => 'infinity')});
my $next = sql($node, q{SELECT outbox.enqueue('plain', '{"next to": "infinity"}')});
{
	is($inf_state, '22023', "deliver_at infinity is refused at enqueue");
	ok($inf_state ne '00000'
		  || wait_sql($node, "SELECT status = 'sent' FROM outbox.message($next)"),
		"deliver_at infinity: refused at enqueue, or another endpoint's message is marked sent");
	ok($inf_state ne '00000'
		  || scalar(grep { ($_->{headers}{'webhook-id'} // '') eq "$W$next" } @{ $recv->requests(path => '/hooks/plain') }) == 1,
		'... and delivered once');
}
sql($node, q{SELECT outbox.drop_endpoint('never', force => true)});
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($next)"),
	'once that message is gone, the worker recovers');

my $before_poison = worker_pid($node);
sql($node, "SELECT outbox.create_endpoint('poison', url => '" . $recv->url('/hooks/poison') . "')");
$recv->add_rule(path => '/hooks/poison', status => 400);
my ($p1_state, $p1_out) = try_sql(q{SELECT outbox.enqueue('poison', '{}',
                     event_type => (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 100) i))});
my ($p2_state, $p2_out) = try_sql(q{SELECT outbox.enqueue('hdr', '{}', event_type => repeat('e', 1048576))});
my $after = sql($node, q{SELECT outbox.enqueue('plain', '{"after": "poison"}')});
{
	for my $p ([ '3 kB hex event_type', $p1_state, $p1_out ], [ '1 MB event_type', $p2_state, $p2_out ])
	{
		my ($what, $state, $out) = @$p;
		my ($id) = ($out // '') =~ /^(\d+)$/m;
		is($state, '22023', "$what: refused at enqueue");
		ok( $state ne '00000' || wait_until(
				sub { sql($node, "SELECT count(*) FROM dlq.dead_letters WHERE message_id = $id") eq '1' }),
			"$what: refused at enqueue, or dead-lettered");
	}
	ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($after)"),
		'a normal message after them is delivered');
}
is(worker_pid($node), $before_poison, 'the worker did not crash on them');
note('after the poison messages: '
	  . join(' | ', (grep { /terminated by signal|pg_outbox worker:/ } split /\n/, slurp_file($node->logfile))[0 .. 2]));

# ---------------------------------------------------------------------------
# 8. pg_outbox.max_payload_size, set small (1 kB).  enqueue refuses a payload over it
#    and inserts nothing; a row over it that a plain INSERT wrote is dead-lettered as
#    PAYLOAD_TOO_LARGE without being read or sent (over HTTP and over NOTIFY), with
#    its payload kept whole in the DLQ, and the worker goes on delivering.

my $log_offset = -s $node->logfile;
my $before_size = worker_pid($node);
ok(reload_conf($node, 'pg_outbox.max_payload_size' => '1kB'), 'max_payload_size 1 kB: the worker reloaded');
is(sql($node, q{SELECT current_setting('pg_outbox.max_payload_size')}), '1kB', 'max_payload_size is 1 kB');
my $oversize = q{jsonb_build_object('oversize', repeat('x', 2000))};
my $payload_size = sql($node, "SELECT outbox._payload_size($oversize)");
my ($en_state, undef, $en_err) = try_sql("SELECT outbox.enqueue('plain', $oversize, idempotency_key => 'oversize-1')");
is($en_state, '54000', 'enqueue of a payload over max_payload_size: 54000');
like($en_err, qr/payload of $payload_size bytes exceeds pg_outbox\.max_payload_size \(1024 bytes\)/,
	'... saying by how much');
# A payload of exactly 1 kB is accepted, and delivered.
my $at_limit = "jsonb_build_object('at_the_limit', repeat('y', 1024 - "
  . sql($node, q{SELECT outbox._payload_size(jsonb_build_object('at_the_limit', ''))}) . '))';
is(sql($node, "SELECT outbox._payload_size($at_limit)"), '1024', 'a payload of exactly 1 kB');
my (undef, $at_out) = check_call('enqueue at max_payload_size', "SELECT outbox.enqueue('plain', $at_limit)", 'ok');
my ($at_id) = ($at_out // '') =~ /^(\d+)$/m;
is(sql($node, q{SELECT count(*) FROM (SELECT payload, idempotency_key FROM outbox.messages
                               UNION ALL SELECT payload, idempotency_key FROM outbox.history
                               UNION ALL SELECT payload, idempotency_key FROM dlq.dead_letters) m
          WHERE m.payload ? 'oversize' OR m.idempotency_key = 'oversize-1'}),
	'0', '... and inserts nothing');

my ($big_http, $big_notify) = split /\n/, sql($node, qq{
	INSERT INTO outbox.messages (endpoint, payload, event_type)
	VALUES ('plain', $oversize, 'oversize.http'), ('feed', $oversize, 'oversize.notify')
	RETURNING id});
my $after_big = sql($node, q{SELECT outbox.enqueue('plain', '{"after": "oversize"}')});
ok(wait_sql($node, "SELECT count(*) = 2 FROM (SELECT * FROM outbox.message($big_http)
                     UNION ALL SELECT * FROM outbox.message($big_notify)) s WHERE s.status = 'dead'"),
	'rows over max_payload_size (HTTP, NOTIFY) are dead-lettered');
is(sql($node, "SELECT message_id, reason_code, attempts, http_status IS NULL, payload = $oversize
          FROM dlq.dead_letters WHERE message_id IN ($big_http, $big_notify) ORDER BY message_id"),
	"$big_http|PAYLOAD_TOO_LARGE|0|t|t\n$big_notify|PAYLOAD_TOO_LARGE|0|t|t",
	'... as PAYLOAD_TOO_LARGE, after no attempt, with the payload kept whole');
like(sql($node, "SELECT error_message FROM dlq.dead_letters WHERE message_id = $big_http"),
	qr/^payload of $payload_size bytes exceeds pg_outbox\.max_payload_size \(1024 bytes\)$/,
	'... saying why');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($after_big)"),
	'the next message is delivered');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message(" . ($at_id // 0) . ")"),
	'the message of exactly max_payload_size is delivered');
ok(!grep({ ($_->{headers}{'webhook-id'} // '') eq "$W$big_http" } @{ $recv->requests(path => '/hooks/plain') }),
	'the row over max_payload_size was never sent');
ok(scalar(grep { ($_->{headers}{'webhook-id'} // '') eq "$W$after_big" } @{ $recv->requests(path => '/hooks/plain') }) == 1,
	'... and the next one was, once');
ok(reload_conf($node, 'pg_outbox.max_payload_size' => undef), 'max_payload_size reset: the worker reloaded');
is(worker_pid($node), $before_size, 'the worker did not crash on them');
my $log_tail = substr(slurp_file($node->logfile), $log_offset);
unlike($log_tail, qr/\[$before_size\][^\n]*(ERROR|FATAL)|terminated by signal|PANIC/,
	'no error of the worker in the server log meanwhile');

$node->stop('immediate');
done_testing();
