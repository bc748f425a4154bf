#!/usr/bin/perl
# Security at delivery time (SECURITY.md), with a real worker, real libcurl and a
# real receiver:
#
#  - proxy environment variables are ignored: the server runs with http_proxy,
#    https_proxy and all_proxy pointing at a second receiver, which never sees a
#    request (the curl command line, given the same environment, does use it);
#  - redirects are never followed: 301/302/303/307/308 with a Location on the same
#    receiver are dead letters HTTP_CLIENT_ERROR with that status, and the Location
#    is never requested;
#  - a URL with another scheme, written into outbox.endpoints directly (past
#    create_endpoint's check), is never fetched: libcurl refuses the protocol, the
#    message ends as RETRY_EXHAUSTED saying so, and a listener that gopher://, dict://,
#    ftp://... point at never sees a connection;
#  - CR/LF written directly into message headers, an event type, an idempotency key or
#    endpoint headers never reach the wire: those messages are dead letters
#    INVALID_MESSAGE, the worker goes on, and no request carries an injected header,
#    nor a producer's Host header;
#  - secrets never appear in pg_stat_activity (sampled while create_endpoint waits on a
#    lock and while signed messages are delivered), in metrics() and the views, in the
#    error of a call with a malformed secret, in any request, nor anywhere in the
#    server log; the calls pass the secrets as server-side values (custom settings
#    given in PGOPTIONS), the way a bind parameter would, never as literals in the
#    statement text.  The limit of that promise is shown too: a literal secret in a
#    failing statement is logged by log_min_error_statement;
#  - the worker's own queries cannot be redirected by objects planted in its
#    search_path (the worker pins search_path = pg_catalog, pg_temp);
#  - TLS is verified (libcurl's defaults): an https receiver with a self-signed
#    certificate never gets a request, while the same receiver serves a client that
#    skips verification (the control).
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use IO::Socket::INET;
use JSON::PP;
use MIME::Base64 qw(decode_base64);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $SECRET1 = 'whsec_dGFwLXNlY3JldC1rZXktbmV2ZXItaW4tbG9ncy0wMDAx';
my $SECRET2 = 'whsec_dGFwLXNlY3JldC1rZXktbmV2ZXItaW4tbG9ncy0wMDAy';
# Malformed: not base64, no prefix, a key too short, a key too long.
my %BAD = (
	bad1 => 'whsec_TAP!MALFORMED!SECRET!0001',
	bad2 => 'NOPREFIX-dGFwLXNlY3JldC1rZXktbmV2ZXItaW4tbG9ncy0wMDAx',
	bad3 => 'whsec_VEFQLVNIT1JULVNFQ1JFVA==',
	bad4 => 'whsec_'
	  . MIME::Base64::encode_base64('TAP-LONG-SECRET-0004-' x 4, ''));
# For the documented limit only: a literal in a failing statement is logged.
my $LITERAL = 'whsec_dGFwLWxpdGVyYWwtc2VjcmV0LWluLWxvZy0wMDAzeHg=';

# Every string that must never show up: the secrets, their base64 part, their key.
my @never;
for my $s ($SECRET1, $SECRET2, values %BAD)
{
	push @never, $s;
	(my $b64 = $s) =~ s/^(whsec_|NOPREFIX-)//;
	push @never, $b64;
	my $key = decode_base64($b64);
	push @never, $key if defined $key && $key =~ /^[ -~]{12,}$/;
}

# ---------------------------------------------------------------------------
# The node runs with proxy variables pointing at a second receiver.

my $recv  = start_receiver();
my $proxy = start_receiver();
my %PROXY_ENV = (
	http_proxy  => $proxy->url('/'),
	HTTP_PROXY  => $proxy->url('/'),
	https_proxy => $proxy->url('/'),
	HTTPS_PROXY => $proxy->url('/'),
	all_proxy   => $proxy->url('/'),
	ALL_PROXY   => $proxy->url('/'),
	no_proxy    => undef,
	NO_PROXY    => undef);

{
	# The control: libcurl, left to itself, does use these variables for 127.0.0.1.
	# The test command installs the curl command line (test/lib.sh).
	local @ENV{ keys %PROXY_ENV } = values %PROXY_ENV;
	delete @ENV{qw(no_proxy NO_PROXY)};
	system('curl', '-s', '-o', '/dev/null', '-m', '60', '-d', '{}',
		$recv->url('/control-via-curl'));
	ok($proxy->stats->{requests} >= 1,
		'control: the curl command line, with the same environment, goes through the proxy');
	$proxy->reset;
	$recv->reset;
}

my $node;
{
	local @ENV{ keys %PROXY_ENV } = values %PROXY_ENV;
	delete @ENV{qw(no_proxy NO_PROXY)};
	$node = new_outbox_node(
		'security',
		'pg_outbox.backoff_base'      => '50ms',
		'pg_outbox.backoff_max'       => '200ms',
		'pg_outbox.breaker_threshold' => '1000',
		'pg_outbox.max_attempts'      => '3',
		# Everything a server may log goes to the log: the harness's 'log' would
		# hide ERROR and WARNING lines (log_min_messages ranks LOG above ERROR).
		'log_min_messages'            => 'debug1',
		'log_error_verbosity'         => 'verbose',
		'log_min_error_statement'     => 'error');
}
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $W = webhook_prefix($node);    # webhook-id = $W<id> (docs/delivery.md, Webhook id)
my $json = JSON::PP->new->utf8->canonical;

# The secrets travel as custom settings of the session (PGOPTIONS), so that a
# statement says current_setting('sectest.secret1') and never the secret itself.
my $PGOPTIONS = join ' ',
  "-c sectest.secret1=$SECRET1", "-c sectest.secret2=$SECRET2",
  map { "-c sectest.$_=$BAD{$_}" } sort keys %BAD;

sub sql_s
{
	local $ENV{PGOPTIONS} = $PGOPTIONS;
	my ($rc, $out, $err) = $node->psql('postgres', $_[0]);
	return ($rc, $out, $err);
}

# sql_s for a query that must succeed: its output.
sub sql_s_out
{
	my ($rc, $out, $err) = sql_s($_[0]);
	die "query failed: $_[0]\n$err" if $rc != 0;
	return $out;
}

sub all_requests { return $recv->requests }

# ---------------------------------------------------------------------------
# 1. Redirects are never followed.

my @redirects = (
	[ 301, 'relative' ], [ 302, 'absolute' ], [ 302, 'relative' ],
	[ 303, 'absolute' ], [ 307, 'absolute' ], [ 308, 'relative' ]);
my %redirect_target;
for my $r (@redirects)
{
	my ($code, $kind) = @$r;
	my $name   = "redir-$code-$kind";
	my $target = "/redirected/$code-$kind";
	$redirect_target{$name} = $target;
	$recv->add_rule(
		path    => "/hooks/$name",
		status  => $code,
		headers => { Location => $kind eq 'absolute' ? $recv->url($target) : $target });
	create_endpoint($node, $name, $recv->url("/hooks/$name"));
	sql($node, "SELECT outbox.enqueue('$name', '{\"redirect\": $code}')");
}
ok( wait_sql($node, 
		q{SELECT count(*) = 6 FROM dlq.dead_letters WHERE endpoint LIKE 'redir-%'}),
	'every redirected message is a dead letter');
for my $r (@redirects)
{
	my ($code, $kind) = @$r;
	my $name = "redir-$code-$kind";
	is( sql($node, 
			"SELECT reason_code || ' ' || http_status || ' ' || attempts
			   FROM dlq.dead_letters WHERE endpoint = '$name'"),
		"HTTP_CLIENT_ERROR $code 1",
		"$code with a Location ($kind): HTTP_CLIENT_ERROR, http_status $code, one attempt");
}
sleep(1);    # a follow-up request would have been made at once
my @followed = grep { $_->{path} =~ m{^/redirected/} } @{ all_requests() };
is(scalar(@followed), 0, 'no Location was ever requested')
  or diag(explain \@followed);
is(scalar(@{ $recv->requests(path => '/hooks/redir-302-absolute') }), 1,
	'the redirecting endpoint itself was asked exactly once');

# ---------------------------------------------------------------------------
# 2. Other schemes, written past create_endpoint, are never fetched.

my $listener = IO::Socket::INET->new(
	LocalAddr => '127.0.0.1',
	LocalPort => 0,
	Proto     => 'tcp',
	Listen    => 16,
	ReuseAddr => 1) or die "listen: $!";
$listener->blocking(0);
my $lport = $listener->sockport;

sub listener_connections
{
	my $n = 0;
	while (my $c = $listener->accept) { $n++; close $c }
	return $n;
}

my %schemes = (
	'file-passwd' => 'file:///etc/passwd',
	'file-host'   => 'file://localhost/etc/passwd',
	'gopher'      => "gopher://127.0.0.1:$lport/_GET%20/",
	'dict'        => "dict://127.0.0.1:$lport/info",
	'ftp'         => "ftp://127.0.0.1:$lport/x",
	'ldap'        => "ldap://127.0.0.1:$lport/dc=x",
	'smtp'        => "smtp://127.0.0.1:$lport/",
	'telnet'      => "telnet://127.0.0.1:$lport/",
	'imap'        => "imap://127.0.0.1:$lport/",
	'pop3'        => "pop3://127.0.0.1:$lport/",
	'rtsp'        => "rtsp://127.0.0.1:$lport/",
	'mqtt'        => "mqtt://127.0.0.1:$lport/");
for my $name (sort keys %schemes)
{
	sql($node, "INSERT INTO outbox.endpoints (name, url, max_attempts, timeout_ms)
	     VALUES ('scheme-$name', '$schemes{$name}', 2, 1000)");
	sql($node, "SELECT outbox.enqueue('scheme-$name', '{\"scheme\": \"$name\"}')");
}
my $n_schemes = keys %schemes;
ok( wait_sql($node, 
		"SELECT count(*) = $n_schemes FROM dlq.dead_letters WHERE endpoint LIKE 'scheme-%'"),
	'every message to another scheme ends in the DLQ');
my %dead = map { my @f = split /\|/; ($f[0] => [ @f[ 1 .. $#f ] ]) } split /\n/,
  sql($node, q{SELECT endpoint, reason_code, coalesce(http_status, 0), attempts,
               coalesce(response_body, ''), error_message
          FROM dlq.dead_letters WHERE endpoint LIKE 'scheme-%'});
for my $name (sort keys %schemes)
{
	my $d = $dead{"scheme-$name"} // [ 'missing', 0, 0, '', '' ];
	is("$d->[0] $d->[1] $d->[2]", 'RETRY_EXHAUSTED 0 2',
		"$schemes{$name}: RETRY_EXHAUSTED after 2 attempts, no HTTP status");
	like($d->[4] // '', qr/protocol/i,
		"$schemes{$name}: the error says the protocol is refused ($d->[4])");
	is($d->[3], '', "$schemes{$name}: no response body kept");
}
# Sent, one would be in the history; undelivered, still in the queue.
is(sql($node, q{SELECT (SELECT count(*) FROM outbox.messages WHERE endpoint LIKE 'scheme-%')
              + (SELECT count(*) FROM outbox.history WHERE endpoint LIKE 'scheme-%')}),
	'0', 'none of them was ever sent');
is(listener_connections(), 0,
	'the listener that gopher/dict/ftp/ldap/smtp/telnet/... point at saw no connection');
# Control: the same listener as an http:// URL is connected to (so the check above
# could see a connection).
sql($node, "INSERT INTO outbox.endpoints (name, url, max_attempts, timeout_ms)
     VALUES ('scheme-http-control', 'http://127.0.0.1:$lport/x', 1, 300)");
sql($node, q{SELECT outbox.enqueue('scheme-http-control', '{}')});
my $control_connections = 0;
ok(wait_until(sub { ($control_connections += listener_connections()) > 0 }),
	'control: an http:// URL to the listener does connect');
ok(wait_sql($node, q{SELECT count(*) = 1 FROM dlq.dead_letters WHERE endpoint = 'scheme-http-control'}),
	'control message settles (timeout, RETRY_EXHAUSTED)');

# ---------------------------------------------------------------------------
# 3. CR/LF written directly into a row never reaches the wire.

create_endpoint($node, 'inj', $recv->url('/hooks/inj'));
my %bad_rows = (
	'value CRLF'      => q{headers => '{"X-A": "1\r\nX-Injected: value-crlf"}'},
	'value LF'        => q{headers => '{"X-A": "1\nX-Injected: value-lf"}'},
	'value CR'        => q{headers => '{"X-A": "1\rX-Injected: value-cr"}'},
	'value CRLFCRLF'  => q{headers => '{"X-A": "1\r\n\r\nPOST /smuggled HTTP/1.1\r\nX-Injected: smuggled"}'},
	'name CRLF'       => q{headers => '{"X-A\r\nX-Injected": "name-crlf"}'},
	'key CRLF'        => q{idempotency_key => E'k\r\nX-Injected: key'},
	'key LF'          => q{idempotency_key => E'k2\nX-Injected: key-lf'});
my %bad_id;
for my $what (sort keys %bad_rows)
{
	my ($col, $value) = split / => /, $bad_rows{$what}, 2;
	$bad_id{$what} = sql($node, 
		"INSERT INTO outbox.messages (endpoint, payload, $col)
		 VALUES ('inj', '{\"case\": \"$what\"}', $value) RETURNING id");
}
# An event type with CR/LF cannot even be inserted: the table's CHECK refuses it.
for my $value (q{E'e\r\nX-Injected: event-type'}, q{E'e\nX-Injected: event-type-lf'})
{
	my ($rc, $out, $err) = $node->psql('postgres',
		"INSERT INTO outbox.messages (endpoint, payload, event_type) VALUES ('inj', '{}', $value)");
	like($err, qr/messages_event_type_check/, "a plain INSERT of event_type $value is refused");
}
# Endpoint headers and URL edited directly.  outbox._request_wake() in the same
# transaction tells the worker, at commit, to re-read the endpoints before its next
# claim (as the endpoint functions do), so no sleep is needed.
create_endpoint($node, 'inj-ep-headers', $recv->url('/hooks/inj-ep-headers'));
create_endpoint($node, 'inj-ep-url', $recv->url('/hooks/inj-ep-url'), max_attempts => 2);
sql($node, sprintf(q{BEGIN;
	UPDATE outbox.endpoints SET headers = '{"X-A": "1\r\nX-Injected: endpoint-header"}'
	 WHERE name = 'inj-ep-headers';
	UPDATE outbox.endpoints SET url = E'%s\r\nX-Injected: url' WHERE name = 'inj-ep-url';
	SELECT outbox._request_wake();
	COMMIT;}, $recv->url('/hooks/inj-ep-url')));
my $ep_headers_id = sql($node, q{SELECT outbox.enqueue('inj-ep-headers', '{"case": "endpoint headers"}')});
my $ep_url_id     = sql($node, q{SELECT outbox.enqueue('inj-ep-url', '{"case": "endpoint url"}')});
my $good_id       = sql($node, q{SELECT outbox.enqueue('inj', '{"case": "good"}', headers => '{"X-Good": "1"}')});

ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($good_id)"),
	'a good message after the bad ones is delivered: the worker goes on');
my $n_bad = keys %bad_rows;
ok( wait_sql($node, 
		"SELECT count(*) = $n_bad + 1 FROM dlq.dead_letters
		  WHERE endpoint IN ('inj', 'inj-ep-headers') AND reason_code = 'INVALID_MESSAGE'"),
	'every row with CR/LF in a header is a dead letter INVALID_MESSAGE');
for my $what (sort keys %bad_id)
{
	is( sql($node, 
			"SELECT reason_code || ' ' || coalesce(http_status::text, '-')
			   FROM dlq.dead_letters WHERE message_id = $bad_id{$what}"),
		'INVALID_MESSAGE -',
		"$what: INVALID_MESSAGE without an HTTP exchange");
}
like(
	sql($node, "SELECT reason_code FROM dlq.dead_letters WHERE message_id = $ep_headers_id"),
	qr/^INVALID_MESSAGE$/, 'endpoint headers with CR/LF: INVALID_MESSAGE');
ok(wait_sql($node, "SELECT count(*) = 1 FROM dlq.dead_letters WHERE message_id = $ep_url_id"),
	'endpoint url with CR/LF: the message settles in the DLQ');
note('endpoint url with CR/LF: '
	  . sql($node, "SELECT reason_code || ': ' || error_message FROM dlq.dead_letters WHERE message_id = $ep_url_id"));
is(sql($node, "SELECT (SELECT count(*) FROM outbox.messages WHERE id = $ep_url_id)
             + (SELECT count(*) FROM outbox.history WHERE id = $ep_url_id)"), '0',
	'endpoint url with CR/LF: never sent');
my @inj_requests = grep { $_->{path} =~ m{^/hooks/inj} } @{ all_requests() };
is(scalar(@inj_requests), 1, 'the receiver saw one request on the /hooks/inj* paths: the good one')
  or diag(explain \@inj_requests);
my @injected = grep {
	my $r = $_;
	grep { /x-injected/i } keys %{ $r->{headers} }, values %{ $r->{headers} }
} @{ all_requests() };
is(scalar(@injected), 0, 'no request ever carried an injected header');
ok(!grep({ $_->{path} =~ /smuggled/ } @{ all_requests() }), 'no smuggled request');

# A producer chooses headers for an existing endpoint, not another destination: a
# message header must not change the Host the request is addressed to (a reverse
# proxy in front of the endpoint would route it to another virtual host).
create_endpoint($node, 'vhost', $recv->url('/hooks/vhost'));
my $vhost_id = sql($node, q{SELECT outbox.enqueue('vhost', '{}', headers => '{"Host": "admin.internal.example"}')});
ok(wait_sql($node, "SELECT count(*) = 0 FROM outbox.messages WHERE id = $vhost_id"),
	'a message with a Host header settles');
my ($vhost_req) = @{ $recv->requests(path => '/hooks/vhost') };
{
	is($vhost_req && $vhost_req->{headers}{host}, '127.0.0.1:' . $recv->port,
		"a message header cannot change the request's Host");
}

# ---------------------------------------------------------------------------
# 4. Secrets.

$recv->add_rule(path => '/hooks/signed', status => 200, delay_ms => 2000);
my ($rc, $out, $err) = sql_s(sprintf(
	q{SELECT outbox.create_endpoint('signed', url => '%s', secret => current_setting('sectest.secret1'))},
	$recv->url('/hooks/signed')));
is($rc, 0, 'create_endpoint with a secret given as a server-side value') or diag($err);
is(sql_s_out(q{SELECT secret = current_setting('sectest.secret1') FROM outbox.endpoint_secrets
                 WHERE endpoint = 'signed'}), 't', 'secret stored');

# pg_stat_activity while signed messages are delivered (each answer takes 2 s),
# sampled from one open session (no process start per sample).
sql($node, q{SELECT outbox.enqueue('signed', jsonb_build_object('n', i)) FROM generate_series(1, 12) i});
my @samples;
my $sampler = $node->background_psql('postgres');
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
while (time() < $deadline)
{
	push @samples, $sampler->query_safe(q{SELECT pg_stat_clear_snapshot(), string_agg(a::text, E'\n') FROM pg_stat_activity a});
	last if $sampler->query_safe(q{SELECT count(*) FROM outbox.messages WHERE endpoint = 'signed'}) eq '0';
	sleep(0.05);
}
$sampler->quit;
ok(scalar(@samples) >= 5, scalar(@samples) . ' samples of pg_stat_activity during delivery');
ok(grep({ /pg_outbox: / } @samples),
	"the samples include the worker's own activity");
ok(!grep({ my $s = $_; grep { index($s, $_) >= 0 } @never } @samples),
	'no sample of pg_stat_activity contains a secret');
my @signed = @{ $recv->requests(path => '/hooks/signed') };
is(scalar(@signed), 12, 'twelve signed deliveries');
is(scalar(grep { verify_webhook_signature($SECRET1, $_->{headers}, $_->{body}) } @signed),
	12, 'every one verifies with the secret');

# pg_stat_activity while create_endpoint waits on a lock with a secret in hand.
my $blocker = $node->background_psql('postgres');
$blocker->query_safe(sprintf(
	q{BEGIN; SELECT outbox.create_endpoint('blocked', url => '%s')}, $recv->url('/hooks/blocked')));
my $waiter;
{
	local $ENV{PGOPTIONS} = $PGOPTIONS;
	$waiter = $node->background_psql('postgres', on_error_stop => 0);
}
$waiter->query_until(qr/waiting/, sprintf(
	qq{\\echo waiting\nSELECT outbox.create_endpoint('blocked', url => '%s', secret => current_setting('sectest.secret2'));\n},
	$recv->url('/hooks/blocked')));
ok( wait_sql($node, 
		q{SELECT count(*) = 1 FROM pg_stat_activity
		   WHERE wait_event_type = 'Lock' AND query LIKE '%create_endpoint(''blocked''%'}),
	'a create_endpoint with a secret is waiting on a lock');
my $activity = sql($node, q{SELECT string_agg(a::text, E'\n') FROM pg_stat_activity a});
ok(!grep({ index($activity, $_) >= 0 } @never),
	'pg_stat_activity (every column of every row) shows no secret while it waits');
$blocker->query_safe('ROLLBACK');
$blocker->quit;
$waiter->query('SELECT 1');
$waiter->quit;
is(sql_s_out(q{SELECT secret = current_setting('sectest.secret2') FROM outbox.endpoint_secrets
                 WHERE endpoint = 'blocked'}), 't', 'the waiting create_endpoint went through after the rollback');

# alter_endpoint with a new secret: new deliveries verify with it.
($rc, $out, $err) =
  sql_s(q{SELECT outbox.alter_endpoint('signed', secret => current_setting('sectest.secret2'))});
is($rc, 0, 'alter_endpoint with a new secret') or diag($err);
$recv->clear_rules;
my $after_alter = sql($node, q{SELECT outbox.enqueue('signed', '{"after": "alter"}')});
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($after_alter)"),
	'delivered after the secret changed');
my ($last) = grep { $_->{headers}{'webhook-id'} eq "$W$after_alter" }
  @{ $recv->requests(path => '/hooks/signed') };
ok($last && verify_webhook_signature($SECRET2, $last->{headers}, $last->{body}),
	'it verifies with the new secret');

# Failing calls with malformed secrets, and with a good secret failing for another
# reason: the error never contains the secret.
my @failing = (
	(map {
		[ "create_endpoint, $_",
		  sprintf(q{SELECT outbox.create_endpoint('leaky', url => '%s', secret => current_setting('sectest.%s'))},
			$recv->url('/hooks/leaky'), $_) ]
	} sort keys %BAD),
	(map {
		[ "alter_endpoint, $_",
		  "SELECT outbox.alter_endpoint('signed', secret => current_setting('sectest.$_'))" ]
	} sort keys %BAD),
	[ 'create_endpoint, duplicate name',
	  q{SELECT outbox.create_endpoint('signed', url => 'http://127.0.0.1:1/', secret => current_setting('sectest.secret1'))} ],
	[ 'create_endpoint, bad url',
	  q{SELECT outbox.create_endpoint('leaky', url => 'file:///etc/passwd', secret => current_setting('sectest.secret1'))} ],
	[ 'create_endpoint, NOTIFY endpoint',
	  q{SELECT outbox.create_endpoint('leaky', channel => 'leaky', secret => current_setting('sectest.secret1'))} ],
	[ 'alter_endpoint, unknown endpoint',
	  q{SELECT outbox.alter_endpoint('nope', secret => current_setting('sectest.secret1'))} ],
	[ 'alter_endpoint, bad timeout',
	  q{SELECT outbox.alter_endpoint('signed', secret => current_setting('sectest.secret1'), timeout_ms => 0)} ]);
for my $f (@failing)
{
	my ($what, $query) = @$f;
	my ($frc, $fout, $ferr) = sql_s("\\set VERBOSITY verbose\n$query");
	isnt($frc, 0, "$what: refused");
	my @leaks = grep { index($ferr, $_) >= 0 } @never;
	is(scalar(@leaks), 0, "$what: the error does not contain the secret")
	  or diag($ferr);
}
is(sql($node, q{SELECT count(*) FROM outbox.endpoints WHERE name = 'leaky'}), '0',
	'no failing call created anything');

# The operator's views and metrics() never show a secret.
for my $q (
	'SELECT outbox.metrics()',
	q{SELECT string_agg(e::text, E'\n') FROM outbox.endpoints e},
	q{SELECT string_agg(s::text, E'\n') FROM outbox.endpoint_stats s},
	q{SELECT string_agg(m::text, E'\n') FROM outbox.messages m},
	q{SELECT string_agg(h::text, E'\n') FROM outbox.history h},
	q{SELECT string_agg(c::text, E'\n') FROM outbox.claims c},
	q{SELECT string_agg(s::text, E'\n') FROM (SELECT id FROM outbox.messages UNION SELECT id FROM outbox.history
	                                         UNION SELECT message_id FROM dlq.dead_letters) i
	                                   CROSS JOIN LATERAL outbox.message(i.id) s},
	q{SELECT string_agg(d::text, E'\n') FROM dlq.dead_letters d},
	q{SELECT string_agg(w::text, E'\n') FROM outbox.worker_status() w})
{
	my $text = sql($node, $q);
	ok(!grep({ index($text, $_) >= 0 } @never), "no secret in: $q");
}

# No request ever carried a secret (the signature only).
my $all_json = $json->encode(all_requests());
ok(!grep({ index($all_json, $_) >= 0 } @never), 'no request carried a secret');

# The whole server log so far.
my $log = slurp_file($node->logfile);
my @in_log = grep { index($log, $_) >= 0 } @never;
is(scalar(@in_log), 0, 'the server log never contains a secret, its base64 or its key')
  or diag(explain \@in_log);
like($log, qr/secret must be "whsec_" followed by standard base64/,
	'(the refused calls are in the log, with their errors)');

# The documented limit: a literal in a failing statement is logged with it, through
# log_min_error_statement (SECURITY.md: pass secrets as bind parameters).
my $log_offset = -s $node->logfile;
$node->psql('postgres',
	"SET log_statement = 'none'; SELECT outbox.create_endpoint('signed', url => 'http://127.0.0.1:1/', secret => '$LITERAL')");
my $log_tail = substr(slurp_file($node->logfile), $log_offset);
like($log_tail, qr/STATEMENT:.*\Q$LITERAL\E/,
	'documented limit: a literal secret in a failing statement reaches the log (log_min_error_statement)');
unlike($log_tail, qr/ERROR:.*\Q$LITERAL\E/,
	'... through the statement text only, never through the error message');

# ---------------------------------------------------------------------------
# 5. Proxies: nothing ever reached the proxy receiver, though the worker delivered
#    throughout with http_proxy, https_proxy and all_proxy set.

{
	# The worker is forked from the postmaster, whose environment it inherits (its
	# own environ area is overwritten by its process title).  The test runs as the
	# server's OS user, so the postmaster's environment is readable.
	my ($postmaster_pid) = split /\n/, slurp_file($node->data_dir . '/postmaster.pid');
	ok(-r "/proc/$postmaster_pid/environ", "the postmaster's environment is readable");
	my $environ = slurp_file("/proc/$postmaster_pid/environ");
	like($environ, qr/(^|\0)http_proxy=\Q$PROXY_ENV{http_proxy}\E(\0|$)/,
		"the postmaster's environment, which the worker inherits, has http_proxy set");
}
ok(scalar(@{ all_requests() }) >= 19, 'the worker delivered throughout');
is($proxy->stats->{requests}, 0, 'the proxy receiver never saw a request');

# ---------------------------------------------------------------------------
# 6. The worker's own SQL runs as the bootstrap superuser.  A database owner (not a
#    superuser) owns the public schema and can plant functions there that are better
#    matches than pg_catalog's for the worker's calls (unnest(text[]) against
#    unnest(anyarray), make_interval(integer) against make_interval(..., double)).  The
#    worker must pin its search_path (pg_catalog, pg_temp) so that it never calls them.

sql($node, q{CREATE ROLE regress_app_owner LOGIN NOSUPERUSER});
sql($node, q{ALTER DATABASE postgres OWNER TO regress_app_owner});
$node->safe_psql('postgres', q{
	CREATE TABLE public.hijack_log (fn text, as_role text, escalated boolean);
	GRANT INSERT ON public.hijack_log TO PUBLIC;
	CREATE FUNCTION public.hijack(fn text) RETURNS boolean LANGUAGE plpgsql AS $$
	DECLARE
	    escalated boolean := false;
	BEGIN
	    BEGIN
	        ALTER ROLE regress_app_owner SUPERUSER;
	        escalated := true;
	    EXCEPTION WHEN OTHERS THEN
	        NULL;
	    END;
	    INSERT INTO public.hijack_log VALUES (fn, current_user, escalated);
	    RETURN true;
	END $$;
	CREATE FUNCTION public.unnest(a text[]) RETURNS SETOF text LANGUAGE sql
	    BEGIN ATOMIC SELECT x FROM pg_catalog.unnest(a) x WHERE public.hijack('unnest(text[])'); END;
	CREATE FUNCTION public.make_interval(secs integer) RETURNS interval LANGUAGE sql
	    RETURN CASE WHEN public.hijack('make_interval(integer)') THEN pg_catalog.make_interval(secs => secs) END;
}, extra_params => [ '-U', 'regress_app_owner' ]);
is(sql($node, q{SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_app_owner'}), 'f',
	'the database owner is not a superuser');
# The worker's statements are planned once and kept; a database owner may ANALYZE
# every table of its database (no privilege on the schema needed), which invalidates
# those plans: the next claim is planned again, with the planted functions in sight.
$node->safe_psql('postgres', 'ANALYZE', extra_params => [ '-U', 'regress_app_owner' ]);
my $planted_id = sql($node, q{SELECT outbox.enqueue('inj', '{"case": "after planting"}')});
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($planted_id)"),
	'a message is delivered after the planting');
sleep(1);    # a few more claims and housekeeping rounds
{
	is(sql($node, q{SELECT count(*) FROM public.hijack_log}), '0',
		'the worker never called a function planted in public');
	is(sql($node, q{SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_app_owner'}), 'f',
		'the database owner did not become a superuser through the worker');
}
note('planted calls: '
	  . sql($node, q{SELECT string_agg(DISTINCT fn || ' as ' || as_role || CASE WHEN escalated THEN ' (escalated)' ELSE '' END, ', ')
	            FROM public.hijack_log}));
sql($node, q{DROP FUNCTION public.unnest(text[]), public.make_interval(integer)});
sql($node, q{ALTER ROLE regress_app_owner NOSUPERUSER});
sql($node, q{ALTER DATABASE postgres OWNER TO postgres});

# ---------------------------------------------------------------------------
# 7. TLS: peer verification is on.  A receiver serving HTTPS with a self-signed
#    certificate for 127.0.0.1 (openssl, made here) is refused by the worker before
#    any request; curl -k, which skips verification, is served (the control).

{
	my $dir = PostgreSQL::Test::Utils::tempdir('tls');
	system('openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1',
		'-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1',
		'-keyout', "$dir/key.pem", '-out', "$dir/cert.pem") == 0
	  or BAIL_OUT('openssl could not make a certificate');
	my $tls = start_receiver(tls_cert => "$dir/cert.pem", tls_key => "$dir/key.pem");
	my $records = sub {
		my @lines = -e $tls->log_file ? split /\n/, slurp_file($tls->log_file) : ();
		return scalar grep { /"path": "\/hooks\/tls/ } @lines;
	};
	system('curl', '-s', '-k', '-o', '/dev/null', '-m', '60', '-d', '{}', $tls->url('/hooks/tls-control'));
	ok(wait_until(sub { $records->() >= 1 }), 'control: the https receiver serves a client that skips verification');
	create_endpoint($node, 'tls', $tls->url('/hooks/tls'), max_attempts => 2);
	my $tls_id = sql($node, q{SELECT outbox.enqueue('tls', '{"case": "self-signed"}')});
	ok(wait_sql($node, "SELECT count(*) = 1 FROM dlq.dead_letters WHERE message_id = $tls_id"),
		'self-signed certificate: the message is dead-lettered');
	like(sql($node, "SELECT reason_code || ' ' || attempts || ' ' || error_message FROM dlq.dead_letters WHERE message_id = $tls_id"),
		qr/^RETRY_EXHAUSTED 2 .*certificate/i, '... RETRY_EXHAUSTED after 2 attempts, naming the certificate');
	is($records->(), 1, 'the worker never sent a request over the unverified connection');
	$tls->stop;
}

# ---------------------------------------------------------------------------
# The server never crashed.

$log = slurp_file($node->logfile);
unlike($log, qr/terminated by signal|PANIC|server process .* was terminated/,
	'no crash, no PANIC in the server log');

$node->stop;
done_testing();
