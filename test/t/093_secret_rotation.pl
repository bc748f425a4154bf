#!/usr/bin/perl
# Secret rotation and asymmetric signatures (docs/delivery.md, "Signatures";
# docs/operations.md, "Rotating a secret"), judged by implementations that are not ours:
# Standard Webhooks' own verifier (npm standardwebhooks) for "v1" and Node's crypto for
# "v1a" (test/node/*.js).
#
#  1. HMAC to HMAC with a grace of 5 s: every request of the grace verifies with the old
#     secret AND with the new one (two signatures in one header); requests made after
#     the grace verify with the new one only, and the worker deletes the old secret on
#     its own, with no SQL call;
#  2. requests already queued in the worker when the rotation commits (a rate-limited
#     endpoint) are signed again: each one started after it verifies with both secrets;
#  3. an ed25519 ("whsk_") secret signs "v1a": the public key endpoint_public_key gives
#     is the one Node derives from the seed, and every request verifies with it; the
#     HMAC verifier finds nothing to accept;
#  4. whsk_ -> whsk_ (grace 1 h), then -> whsec_ (grace 5 s) within the first grace: only
#     the two newest sign (the first key stops at once), each in its own scheme; after
#     the grace, the HMAC secret alone;
#  5. a secret stored past the checks dead-letters its endpoint's messages (INVALID_MESSAGE)
#     and stops nothing else;
#  6. no request, dead letter or line of the server log carries a secret.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use JSON::PP ();
use MIME::Base64 ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

# Fresh random keys for each run: 32 bytes each (an HMAC key, or an ed25519 seed).
sub random_bytes { return join '', map { chr(int(rand(256))) } 1 .. 32 }
my %KEY = (
	hmac_a => 'whsec_' . MIME::Base64::encode_base64(random_bytes(), ''),
	hmac_c => 'whsec_' . MIME::Base64::encode_base64(random_bytes(), ''),
	ed_b   => 'whsk_' . MIME::Base64::encode_base64(random_bytes(), ''),
	ed_d   => 'whsk_' . MIME::Base64::encode_base64(random_bytes(), ''),
	# 9 bytes: no ed25519 key; only a superuser's direct INSERT can store it (section 5).
	broken => 'whsk_' . MIME::Base64::encode_base64(substr(random_bytes(), 0, 9), ''),);

my $node = new_outbox_node('rotation');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
my $recv = start_receiver();

# The secrets travel as custom settings of the session, so that no statement (which
# the test cluster logs) contains one: the SQL says current_setting('rot.hmac_a').
my $PGOPTIONS = join ' ', map { "-c rot.$_=$KEY{$_}" } sort keys %KEY;

sub sql_s
{
	local $ENV{PGOPTIONS} = $PGOPTIONS;
	return sql($node, $_[0]);
}

sub reqs { return @{ $recv->requests(path => $_[0]) } }

sub enqueue_many
{
	my ($endpoint, $n) = @_;
	sql($node, qq{SELECT outbox.enqueue('$endpoint', jsonb_build_object('n', g, 'note', 'rotation'))
		FROM generate_series(1, $n) g});
}

# The receiver's records as the node scripts take them.
sub as_input { return [ map { { headers => $_->{headers}, body => $_->{body} } } @_ ] }

# How many of @requests the Standard Webhooks verifier accepts with $secret.
sub npm_accepts
{
	my ($secret, @requests) = @_;
	return 0 unless @requests;
	my $out = run_node('verify_standard_webhooks.js', { secret => $secret, requests => as_input(@requests) });
	return scalar grep { $_ } @{ $out->{verified} };
}

# How many of @requests carry a v1a signature that Node's crypto verifies with $public_key.
sub node_ed25519_accepts
{
	my ($public_key, @requests) = @_;
	return 0 unless @requests;
	my $out = run_node('verify_ed25519.js', { public_key => $public_key, requests => as_input(@requests) });
	return scalar grep { $_ } @{ $out->{verified} };
}

sub signatures { return split / /, ($_[0]{headers}{'webhook-signature'} // '') }

# The old secret's expiry, as a unix time.
sub old_expiry
{
	my ($endpoint) = @_;
	return sql($node, qq{SELECT extract(epoch FROM expires_at) FROM outbox.endpoint_secrets
		WHERE endpoint = '$endpoint' AND expires_at IS NOT NULL});
}

# ---------------------------------------------------------------------------
# 1. HMAC -> HMAC, grace 5 s.

sql_s(sprintf(q{SELECT outbox.create_endpoint('hmac', url => '%s', secret => current_setting('rot.hmac_a'))},
	$recv->url('/hooks/hmac')));
enqueue_many('hmac', 2);
ok($recv->wait_requests('/hooks/hmac', 2, 30), 'before the rotation: delivered');
my @before = reqs('/hooks/hmac');
is(npm_accepts($KEY{hmac_a}, @before), 2, 'before the rotation: the Standard Webhooks verifier accepts the secret');
is(npm_accepts($KEY{hmac_c}, @before), 0, '... and not the one to come');

sql_s(q{SELECT outbox.rotate_secret('hmac', current_setting('rot.hmac_c'), grace => '5s')});
my $expiry = old_expiry('hmac');
enqueue_many('hmac', 5);
ok($recv->wait_requests('/hooks/hmac', 7, 30), 'during the grace: delivered');
my @grace = grep { $_->{time} < $expiry } (reqs('/hooks/hmac'))[ 2 .. 6 ];
is(scalar @grace, 5, 'all five arrived within the grace');
is(scalar(grep { signatures($_) == 2 } @grace), 5, '... each with two signatures in its webhook-signature');
is(npm_accepts($KEY{hmac_a}, @grace), 5, '... every one verifies with the old secret');
is(npm_accepts($KEY{hmac_c}, @grace), 5, '... and every one with the new secret');

# After the grace, without any SQL call that touches the secrets.
sleep($expiry - time + 1) if $expiry + 1 > time;
ok(wait_sql($node, q{SELECT count(*) = 1 FROM outbox.endpoint_secrets WHERE endpoint = 'hmac'}, 30),
	'after the grace, the worker deleted the old secret on its own');
enqueue_many('hmac', 3);
ok($recv->wait_requests('/hooks/hmac', 10, 30), 'after the grace: delivered');
my @after = (reqs('/hooks/hmac'))[ 7 .. 9 ];
is(scalar(grep { signatures($_) == 1 } @after), 3, 'after the grace: one signature');
is(npm_accepts($KEY{hmac_c}, @after), 3, '... which verifies with the new secret');
is(npm_accepts($KEY{hmac_a}, @after), 0, '... and the old secret no longer verifies');

# ---------------------------------------------------------------------------
# 2. Requests queued in the worker when the rotation commits are signed again.

sql_s(sprintf(q{SELECT outbox.create_endpoint('queued', url => '%s', rate_limit => 2,
	secret => current_setting('rot.hmac_a'))}, $recv->url('/hooks/queued')));
enqueue_many('queued', 8);
ok($recv->wait_requests('/hooks/queued', 2, 30), 'a rate-limited endpoint: two requests out, the rest queued');
my $t_rotate = time;
sql_s(q{SELECT outbox.rotate_secret('queued', current_setting('rot.hmac_c'), grace => '1h')});
ok(wait_sql($node, q{SELECT count(*) = 0 FROM outbox.messages WHERE endpoint = 'queued'}, 30), 'all delivered');
my @late = grep { $_->{time} > $t_rotate + 0.5 } reqs('/hooks/queued');
cmp_ok(scalar @late, '>=', 4, 'most requests started after the rotation');
is(npm_accepts($KEY{hmac_c}, @late), scalar @late, '... each verifies with the new secret');
is(npm_accepts($KEY{hmac_a}, @late), scalar @late, '... and with the old one, for the grace');

# ---------------------------------------------------------------------------
# 3. ed25519: v1a, verified with the public key.

sql_s(sprintf(q{SELECT outbox.create_endpoint('asym', url => '%s', secret => current_setting('rot.ed_b'))},
	$recv->url('/hooks/asym')));
my $pub_b = sql($node, q{SELECT outbox.endpoint_public_key('asym')});
like($pub_b, qr{^whpk_[A-Za-z0-9+/]{43}=$}, 'endpoint_public_key gives a whpk_ key');
my $derived = run_node('verify_ed25519.js', { public_key => $pub_b, seed => $KEY{ed_b}, requests => [] });
is($derived->{derived_public_key}, $pub_b, '... the one Node derives from the secret');
enqueue_many('asym', 3);
ok($recv->wait_requests('/hooks/asym', 3, 30), 'ed25519: delivered');
my @asym = reqs('/hooks/asym');
is(scalar(grep { my @s = signatures($_); @s == 1 && $s[0] =~ m{^v1a,[A-Za-z0-9+/]{86}==$} } @asym), 3,
	'each carries one v1a,<base64 of 64 bytes> signature');
is(node_ed25519_accepts($pub_b, @asym), 3, 'Node crypto.verify accepts each with the public key');
is(npm_accepts($KEY{hmac_a}, @asym), 0, 'the HMAC verifier finds no v1 signature to accept');

# ---------------------------------------------------------------------------
# 4. whsk_ -> whsk_, then -> whsec_ within the grace: the two newest sign, each in its
#    own scheme.

sql_s(q{SELECT outbox.rotate_secret('asym', current_setting('rot.ed_d'), grace => '1h')});
my $pub_d = sql($node, q{SELECT outbox.endpoint_public_key('asym')});
isnt($pub_d, $pub_b, 'after a rotation endpoint_public_key gives the new key');
enqueue_many('asym', 2);
ok($recv->wait_requests('/hooks/asym', 5, 30), 'whsk_ -> whsk_: delivered');
my @two_keys = (reqs('/hooks/asym'))[ 3 .. 4 ];
is(scalar(grep { signatures($_) == 2 } @two_keys), 2, '... two v1a signatures each');
is(node_ed25519_accepts($pub_d, @two_keys), 2, '... verified with the new public key');
is(node_ed25519_accepts($pub_b, @two_keys), 2, '... and with the old one');

sql_s(q{SELECT outbox.rotate_secret('asym', current_setting('rot.hmac_a'), grace => '5s')});
is(sql($node, q{SELECT count(*) FROM outbox.endpoint_secrets WHERE endpoint = 'asym'}), 2,
	'a second rotation within the grace keeps two secrets');
is(sql($node, q{SELECT outbox.endpoint_public_key('asym') IS NULL}), 't',
	'endpoint_public_key is NULL while the current secret is an HMAC one');
$expiry = old_expiry('asym');
enqueue_many('asym', 3);
ok($recv->wait_requests('/hooks/asym', 8, 30), 'whsk_ -> whsec_: delivered');
my @mixed = grep { $_->{time} < $expiry } (reqs('/hooks/asym'))[ 5 .. 7 ];
is(scalar @mixed, 3, 'all three arrived within the grace');
is(scalar(grep { join(' ', map { (split /,/)[0] } signatures($_)) eq 'v1 v1a' } @mixed), 3,
	'... each signed "v1,... v1a,...": the new HMAC secret first, then the ed25519 key');
is(npm_accepts($KEY{hmac_a}, @mixed), 3, '... the Standard Webhooks verifier accepts the new HMAC secret');
is(node_ed25519_accepts($pub_d, @mixed), 3, '... Node verifies the v1a one with the previous public key');
is(node_ed25519_accepts($pub_b, @mixed), 0, '... and the first key, the third newest, signs no more');

sleep($expiry - time + 1) if $expiry + 1 > time;
enqueue_many('asym', 2);
ok($recv->wait_requests('/hooks/asym', 10, 30), 'after the grace: delivered');
my @hmac_only = (reqs('/hooks/asym'))[ 8 .. 9 ];
is(scalar(grep { my @s = signatures($_); @s == 1 && $s[0] =~ /^v1,/ } @hmac_only), 2, 'after the grace: v1 only');
is(npm_accepts($KEY{hmac_a}, @hmac_only), 2, '... which the Standard Webhooks verifier accepts');
is(node_ed25519_accepts($pub_d, @hmac_only), 0, '... and the ed25519 key signs no more');
ok(wait_sql($node, q{SELECT count(*) = 1 FROM outbox.endpoint_secrets WHERE endpoint = 'asym'}, 30),
	'... and its row is gone');

# ---------------------------------------------------------------------------
# 5. A secret written past the checks (a superuser's INSERT): the endpoint's messages
#    are dead-lettered INVALID_MESSAGE, saying why without the secret; others flow.

# In one transaction, so that the worker never sees the endpoint without its secret.
sql_s(sprintf(q{BEGIN; SELECT outbox.create_endpoint('broken', url => '%s');
	INSERT INTO outbox.endpoint_secrets (endpoint, secret) VALUES ('broken', current_setting('rot.broken')); COMMIT},
	$recv->url('/hooks/broken')));
sql($node, q{SELECT outbox.enqueue('broken', '{"n": 1}')});
enqueue_many('hmac', 1);
ok(wait_sql($node, q{SELECT count(*) = 1 FROM dlq.dead_letters WHERE endpoint = 'broken'}, 30),
	'a message of an endpoint with an unusable secret is dead-lettered');
is( sql($node, q{SELECT reason_code || ': ' || error_message FROM dlq.dead_letters WHERE endpoint = 'broken'}),
	'INVALID_MESSAGE: endpoint secret: an ed25519 secret key ("whsk_") must be 32 bytes (the seed) or 64 bytes '
	  . '(seed and public key) long',
	'... INVALID_MESSAGE, saying why');
ok($recv->wait_requests('/hooks/hmac', 11, 30), '... and the other endpoints are delivered');
is(scalar(reqs('/hooks/broken')), 0, '... nothing was sent unsigned');

# ---------------------------------------------------------------------------
# 6. No secret in any request, dead letter or in the server log.

my @never = map { my $s = $_; ($s, substr($s, index($s, '_') + 1)) } values %KEY;
my $all = JSON::PP->new->canonical->encode($recv->requests);
is(scalar(grep { index($all, $_) >= 0 } @never), 0, 'no request carried a secret');
my $dlq = sql($node, q{SELECT string_agg(d::text, ' ') FROM dlq.dead_letters d});
is(scalar(grep { index($dlq, $_) >= 0 } @never), 0, 'no dead letter contains a secret');
my $log = slurp_file($node->logfile);
is(scalar(grep { index($log, $_) >= 0 } @never), 0, 'the server log contains no secret');

done_testing();
