#!/usr/bin/perl
# Least privilege at delivery time (docs/operations.md, "Privileges" and "Egress policy"; SECURITY.md):
#
#  - the egress policy (pg_outbox.egress_deny / egress_allow) is checked on the address
#    the worker actually connects to: an endpoint whose host NAME resolves to a denied
#    address (localhost -> 127.0.0.1 / ::1; libcurl resolves "localhost" itself, no DNS)
#    is never contacted, and its messages are dead-lettered EGRESS_DENIED naming the
#    rule, while an allowed endpoint beside it (on 127.0.0.2) keeps delivering;
#  - create_endpoint refuses an address literal the policy denies (IPv4-mapped IPv6
#    included), with 42501 naming the rule;
#  - an allow list admits only what it names; a policy made stricter applies to a
#    connection already open (reused keep-alive connections are checked too);
#  - the settings are the superuser's: bad rules are refused with PostgreSQL's GUC error
#    naming the rule, other roles can neither set nor read them;
#  - a message header cannot replace (nor remove) a header the endpoint sets,
#    Authorization included.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $denied  = start_receiver();                         # 127.0.0.1: denied below
my $allowed = start_receiver(host => '127.0.0.2');      # 127.0.0.2: allowed
my $node = new_outbox_node(
	'egress',
	'pg_outbox.egress_deny'  => '127.0.0.1/32, ::1/128',
	'pg_outbox.backoff_base' => '50ms',
	'pg_outbox.backoff_max'  => '200ms',
	'pg_outbox.max_attempts' => '3');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');

sub try_sql
{
	my ($query) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql('postgres', "\\set VERBOSITY verbose\n$query", stdout => \$out, stderr => \$err);
	my ($state) = $err =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return ($rc == 0 ? '00000' : $state // 'UNKNOWN', $err);
}

sub dead_reason
{
	my ($id) = @_;
	return sql($node, "SELECT reason_code || ' ' || attempts || ' ' || error_message FROM dlq.dead_letters WHERE message_id = $id");
}

my $port = $denied->port;

# ---------------------------------------------------------------------------
# 1. create_endpoint: an address literal the policy denies is refused.

for my $case ([ 'ipv4', "http://127.0.0.1:$port/x", '127.0.0.1/32' ],
	[ 'ipv6', "http://[::1]:$port/x", '::1/128' ],
	[ 'mapped', "http://[::ffff:127.0.0.1]:$port/x", '127.0.0.1/32' ])
{
	my ($label, $url, $rule) = @$case;
	my ($state, $err) = try_sql("SELECT outbox.create_endpoint('lit-$label', url => '$url')");
	is($state, '42501', "create_endpoint with a denied $label literal: 42501");
	like($err, qr/rule "\Q$rule\E"/, "... naming the rule $rule");
}
is(sql($node, q{SELECT count(*) FROM outbox.endpoints}), '0', 'nothing was created');
my ($state) = try_sql(q{SELECT outbox.alter_endpoint('nope', url => 'http://127.0.0.1:1/')});
is($state, '42704', 'alter_endpoint of an unknown endpoint: still 42704');

# ---------------------------------------------------------------------------
# 2. A name that resolves to a denied address: never contacted, EGRESS_DENIED.

sql($node, "SELECT outbox.create_endpoint('by-name', url => 'http://localhost:$port/hooks/by-name')");
create_endpoint($node, 'ok', $allowed->url('/hooks/ok'),
	headers => q{'{"Authorization": "Bearer endpoint-token", "X-Env": "prod"}'});
my @named = map { sql($node, qq{SELECT outbox.enqueue('by-name', '{"n": $_}')}) } 1 .. 3;
my $ok1 = sql($node, q{SELECT outbox.enqueue('ok', '{"n": "beside"}',
	headers => '{"authorization": "Bearer producer", "X-Env": "", "X-Extra": "1"}')});
ok(wait_sql($node, 'SELECT count(*) = 3 FROM dlq.dead_letters WHERE message_id IN (' . join(',', @named) . ')'),
	'the messages to a name resolving to a denied address are dead-lettered');
for my $id (@named)
{
	like(dead_reason($id), qr/^EGRESS_DENIED 1 .*rule "(127\.0\.0\.1\/32|::1\/128)"/,
		"message $id: EGRESS_DENIED after one attempt, naming the rule");
}
is($denied->stats->{accepted}, 1, 'the denied receiver was never contacted (its one connection is our stats call)');
is(scalar @{ $denied->requests }, 0, '... and recorded no request');

ok($allowed->wait_requests('/hooks/ok', 1), 'the allowed endpoint beside it delivers');
my $r = $allowed->requests(path => '/hooks/ok')->[0];
is($r->{headers}{authorization}, 'Bearer endpoint-token', "a message header cannot replace the endpoint's Authorization");
is($r->{headers}{'x-env'}, 'prod', '... nor remove an endpoint header with an empty value');
is($r->{headers}{'x-extra'}, '1', '... while its other headers are sent');

# ---------------------------------------------------------------------------
# 3. A stricter policy applies to the connection already open to the allowed
#    receiver (keep-alive): checked on the address of a reused connection too.

# First, the connection is reused: a second message goes over the connection that
# carried the first, so the connection the stricter policy meets is an open one.
my $ok1b = sql($node, q{SELECT outbox.enqueue('ok', '{"n": "reused"}')});
ok($allowed->wait_requests('/hooks/ok', 2), 'a second message to the allowed endpoint arrives');
my @ok_reqs = @{ $allowed->requests(path => '/hooks/ok') };
is($ok_reqs[1]{headers}{'webhook-id'}, webhook_prefix($node) . $ok1b, '... it is the second message');
is($ok_reqs[1]{conn}, $ok_reqs[0]{conn}, '... over the TCP connection of the first (keep-alive: reused)');
is($allowed->stats->{connections}, 1, '... the receiver saw one connection carry every request');
my $before = scalar @ok_reqs;
ok(reload_conf($node, 'pg_outbox.egress_deny' => '127.0.0.0/8, ::1/128'), 'deny all of 127.0.0.0/8 (reloaded)');
my $ok2 = sql($node, q{SELECT outbox.enqueue('ok', '{"n": "after the stricter policy"}')});
ok(wait_sql($node, "SELECT count(*) = 1 FROM dlq.dead_letters WHERE message_id = $ok2"),
	'a message to the now-denied receiver is dead-lettered');
like(dead_reason($ok2), qr/^EGRESS_DENIED .*rule "127\.0\.0\.0\/8"/, '... EGRESS_DENIED naming 127.0.0.0/8');
is(scalar @{ $allowed->requests(path => '/hooks/ok') }, $before, '... and nothing more reached the receiver');

# ---------------------------------------------------------------------------
# 4. An allow list admits only what it names.

ok(reload_conf($node, 'pg_outbox.egress_deny' => '', 'pg_outbox.egress_allow' => '127.0.0.2/32'),
	'no deny rule, allow only 127.0.0.2 (reloaded)');
my $ok3 = sql($node, q{SELECT outbox.enqueue('ok', '{"n": "allowed by the allow list"}')});
my $named4 = sql($node, q{SELECT outbox.enqueue('by-name', '{"n": 4}')});
ok($allowed->wait_requests('/hooks/ok', $before + 1), 'the allow list admits 127.0.0.2');
ok(wait_sql($node, "SELECT count(*) = 1 FROM dlq.dead_letters WHERE message_id = $named4"),
	'localhost, not in the allow list, is dead-lettered');
like(dead_reason($named4), qr/^EGRESS_DENIED .*not in pg_outbox\.egress_allow/, '... saying it is not in the allow list');
is(scalar @{ $denied->requests }, 0, 'the denied receiver never recorded a request');

# ---------------------------------------------------------------------------
# 5. The settings are the superuser's, and checked.

($state, my $err) = try_sql(q{ALTER SYSTEM SET pg_outbox.egress_deny = '10.0.0.0/33'});
is($state, '22023', 'a bad rule is refused (22023)');
like($err, qr/10\.0\.0\.0\/33/, '... naming it');
sql($node, q{CREATE ROLE regress_egress_user LOGIN});
($state) = try_sql(q{SET ROLE regress_egress_user; SET pg_outbox.egress_allow = ''});
is($state, '55P02', 'another role cannot set it (reload-time setting)');
($state) = try_sql(q{SET ROLE regress_egress_user; SHOW pg_outbox.egress_allow});
is($state, '42501', 'nor read it');

my @bad = grep { /PANIC|terminated by signal/ } split /\n/, slurp_file($node->logfile);
ok(!@bad, 'no PANIC, no crash in the server log') or diag(join "\n", @bad);

$node->stop;
$denied->stop;
$allowed->stop;
done_testing();
