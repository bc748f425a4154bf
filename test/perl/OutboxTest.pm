
=pod

=head1 NAME

OutboxTest - helpers for the pg_outbox TAP tests

=head1 SYNOPSIS

  use lib "$FindBin::RealBin/../perl";      # or prove -I test/perl
  use OutboxTest;                           # exports the functions below

  my $node = new_outbox_node('main', 'pg_outbox.max_concurrency' => 8);
  my $recv = start_receiver();
  $recv->add_rule(path => '/hooks/a', status => 503, times => 2);
  ... insert messages pointing at $recv->url('/hooks/a') ...
  ok(wait_until(sub { @{ $recv->requests(path => '/hooks/a') } >= 3 }, 30),
     'three attempts');
  ok(verify_webhook_signature($secret, $r->{headers}, $r->{body}), 'signed');

=head1 FUNCTIONS (exported)

=over

=item start_receiver(%opts)

Starts test/webhook_receiver.py (found relative to this file) in the
background with IPC::Run, with its ready-file and request log
(C<requests.jsonl>) in a fresh PostgreSQL::Test::Utils::tempdir, waits up to
10 s for it to listen and returns an C<OutboxTest::Receiver> object.
Options: C<port> (default 0 = ephemeral), C<log> (path of the jsonl log),
C<max_seconds> (default 3600), C<idle_timeout> (seconds; default never),
C<host> (a loopback address to listen on; default 127.0.0.1), C<backlog> (the
listen backlog; default 1024, 5 mimics a small service),
C<tls_cert> and C<tls_key> (PEM files: serve HTTPS; control calls then need
C<https>, so use the record log rather than the control API),
C<python> (default C<$ENV{PYTHON}> or C<python3>).
Every receiver still running is stopped in an END block.

=item wait_until($code, $timeout_s = timeout_default, $what = '')

Calls C<$code> every 50 ms until it returns true (then returns 1) or
C<$timeout_s> seconds have passed (then returns 0; if Test::More is loaded
it emits a C<note>, never a failure or a diag - that is left to the caller).
Exceptions thrown by C<$code> count as false.

Waits that end as soon as their condition holds take the harness's
C<$PostgreSQL::Test::Utils::timeout_default> (180 s, C<PG_TEST_TIMEOUT_DEFAULT>)
unless told otherwise: a bound that only matters when something is broken
should not fail a slow but correct run on a loaded machine.

=item verify_webhook_signature($secret_whsec, $headers_hashref, $body)

Independent Standard Webhooks check: base64-decodes the secret after its
C<whsec_> prefix, computes base64(HMAC-SHA256(key,
"<webhook-id>.<webhook-timestamp>.<body>")) (standard alphabet, padded) and
returns 1 if any space-separated C<v1,E<lt>sigE<gt>> entry of the
C<webhook-signature> header matches, else 0.  Header names are matched
case-insensitively.  C<$body> may be raw bytes or a character string (such as
the C<body> of a record from C<requests()>), which is UTF-8 encoded first.
The timestamp is not checked against the current time.

=item new_outbox_node($name, %gucs)

Returns a PostgreSQL::Test::Cluster node, init'ed, with
C<shared_preload_libraries = 'pg_outbox'> (every database with the extension is
served, as by default),
C<pg_outbox.poll_interval = '200ms'>, C<pg_outbox.http_timeout = '60s'> (a receiver
starved of CPU on a loaded machine must not turn into a client timeout, a retry and
a duplicate that an exact count would trip over; tests of timeouts set the
endpoint's timeout_ms or this GUC themselves) (the server log keeps its default
level, which records ERROR and LOG lines) and then each
given GUC (in the given order, as C<key = 'value'>, later lines win) appended
to postgresql.conf, and started.  Does not create the extension.

=item worker_pid($node, $db = 'postgres')

The pid of the pg_outbox worker of database C<$db> in C<pg_stat_activity>, or
undef (none, several, or the server not accepting connections).

=item wait_for_worker($node, $old_pid = undef, $timeout_s = timeout_default, $db = 'postgres')

Waits (bounded) until a worker runs in C<$db> whose pid differs from C<$old_pid>
(any worker when undef); returns its pid or undef.

=item webhook_prefix($node, $db = 'postgres')

C<msg_E<lt>instanceE<gt>_>: the webhook-id of a message without an idempotency key is
this prefix followed by its id (docs/delivery.md, "Webhook id": unique across databases, clusters and
re-created extensions). Ask again after DROP/CREATE EXTENSION.

=item wait_sql($node, $query, $timeout_s = timeout_default, $db = 'postgres')

Runs C<$query> every 50 ms until it returns C<t>; returns 1, or 0 on timeout.
A query that fails (a server restarting) counts as not yet.

=item reload_conf($node, NAME => VALUE, ...)

C<ALTER SYSTEM SET> each setting (C<RESET> when VALUE is undef), then
C<pg_reload_conf()>, then waits until the worker has read its configuration
again (C<outbox.worker_status().config_loaded_at> later than the moment the
settings were written).  Synchronises on the worker's own report, never on a
sleep.  Returns 1, or 0 if the worker did not report within 60 s.  The
extension must exist in the worker's database (C<db> option: C<< db => 'x' >>
as the first pair).

=item create_endpoint($node, $name, $url, OPTION => SQL, ...)

C<SELECT outbox.create_endpoint('$name', url => '$url', OPTION => SQL ...)> in
database postgres; each option's value is an SQL expression (C<< timeout_ms => 500 >>,
C<< ordered => 'true' >>); an undef value leaves the option out.

=item listen_for_notifications($node, @channels)

A C<OutboxTest::Listener>: a background psql session that LISTENs on the channels.
C<< $l->poll >> collects what has arrived and returns how many so far; C<< $l->notes >>
is the arrayref of them, in arrival order (hashrefs: channel, payload (raw text), pid,
envelope (the payload decoded as JSON, or undef)); C<< $l->wait($n, $timeout) >> waits
until C<$n> have arrived; C<< $l->quit >> ends the session.

=item sql($node, $query, $db = 'postgres')

C<< $node->safe_psql($db, $query) >>: the query's output (dies on an error).

=item endpoint($node, $recv, $name, $path, OPTION => SQL, ...)

C<create_endpoint> of an endpoint whose URL is C<< $recv->url($path) >>.

=item states($node, @ids)

Where the messages stand, wherever their rows live (C<outbox.message()>): their
C<status/attempts>, comma-separated, in id order; C<''> for no ids.

=item count_sent($node, $endpoint)

How many messages of C<$endpoint> are in C<outbox.history> (delivered).

=item keys_out_of_order($recv, $path)

How many requests the receiver got at C<$path> (in the order they arrived) carried a
payload C<{"key": ..., "seq": n}> whose C<seq> is not above the one before of its key:
0 when every key arrived in its order, once.

=item breaker_state($node, $endpoint)

C<outbox.endpoint_stats.breaker_state> of C<$endpoint>.

=item log_since($node, $offset = 0)

The server log from byte C<$offset> on (take the offset as C<< -s $node->logfile >>).

=item log_count($node, $regex)

How many times C<$regex> matches in the whole server log (a C</g> match in list
context: with capture groups, the number of captures).

=item poll_notifications($listener, \@notes)

C<< $listener->poll >>, then copies what has arrived so far into C<@notes> (when
given); returns how many have arrived.

=back

=head1 RECEIVER METHODS (OutboxTest::Receiver)

=over

=item $recv->port, $recv->url($path)

The listening port; C<http://127.0.0.1:PORT$path> (C<$path> defaults to "/").
C<< $recv->{port} >> works too.

=item $recv->add_rule(%rule)

POST /_control/rules, e.g. C<< (path => '/a', status => 503, times => 2,
retry_after => '2', body => 'x', delay_ms => 100, action => 'respond'|'close'|'hang',
hang_ms => 5000, fail_ratio => 0.2, seed => 1, headers => {...}) >>.
Path C<'*'> matches any path without rules of its own.  Dies on an error.

=item $recv->clear_rules / $recv->reset

Clear the rules only / rules, records, counters and the log file.

=item $recv->requests(path => '/a', since => $seq)

Arrayref of recorded requests (hashrefs: seq, time, method, path, query,
conn, headers (lower-cased names, repeated values joined with ", "), body,
response), optionally only one path and only C<seq E<gt> since>.

=item $recv->wait_requests($path, $n, $timeout_s = timeout_default)

Waits until at least C<$n> requests of C<$path> were recorded; returns 1 or 0.

=item $recv->answered_2xx($path)

Hashref C<webhook-id =E<gt> time> of the first 2xx each message actually got: the
receiver logs a response as C<answered> only once it finished writing it while the
client was still connected, so a request whose client timed out first, or a close
or hang rule, never counts as a 2xx whatever the rule planned.

=item $recv->in_flight_at($path, $unix_time)

How many requests of C<$path> had arrived by C<$unix_time> and were not answered
by then (the worker's deliveries in flight at that moment).

=item $recv->stats

Hashref: requests, connections (distinct TCP connections that carried
recorded requests since the last reset), by_path, accepted (all TCP
connections, including the control ones), open, max_open.

=item $recv->stop / $recv->stop_listening

Stop the process (TERM, then KILL after 5 s).  C<stop_listening> is for an
outage: the port stays held by a bound socket that does not listen (clients are
refused, as by a stopped server, and no other process can take the port) until
C<restart>.

=item $recv->restart

Stops the process if it is running and starts a new one on the SAME port
(SO_REUSEADDR), then lets go of the placeholder of C<stop_listening>.  The new process is started with C<--resume> on the same
jsonl log, so recorded requests (and seq numbering, C<requests> and
C<by_path> in stats) survive the restart; rules and connection counters do
not (they start empty).

=item $recv->running, $recv->log_file, $recv->dir

Whether the process is running; path of the jsonl log; its temp dir.

=back

=cut

package OutboxTest;

use strict;
use warnings;

use Carp;
use Cwd qw(abs_path);
use Digest::SHA qw(hmac_sha256);
use Encode ();
use Exporter 'import';
use File::Basename qw(dirname);
use File::Copy ();
use File::Spec;
use HTTP::Tiny;
use IO::Socket::INET;
use IPC::Run;
use JSON::PP;
use MIME::Base64 qw(encode_base64 decode_base64);
use Scalar::Util ();
use Time::HiRes ();

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils ();

our @EXPORT = qw(start_receiver wait_until verify_webhook_signature
  new_outbox_node worker_pid wait_for_worker wait_sql reload_conf create_endpoint
  listen_for_notifications webhook_prefix sql endpoint states count_sent
  keys_out_of_order breaker_state log_since log_count poll_notifications describe_schema run_node);

# test/perl/OutboxTest.pm -> test/webhook_receiver.py
our $RECEIVER_SCRIPT =
  File::Spec->catfile(dirname(abs_path(__FILE__)), File::Spec->updir,
	'webhook_receiver.py');

my %LIVE;              # refaddr => receiver, for the END block
my $OWNER_PID = $$;

sub start_receiver
{
	my %opts = @_;
	croak "webhook receiver not found at $RECEIVER_SCRIPT"
	  unless -f $RECEIVER_SCRIPT;
	my $dir = PostgreSQL::Test::Utils::tempdir('receiver');
	my $self = bless {
		dir         => $dir,
		port        => $opts{port} // 0,
		log         => $opts{log} // "$dir/requests.jsonl",
		ready_file  => "$dir/receiver.port",
		out_file    => "$dir/receiver.out",
		max_seconds => $opts{max_seconds} // 3600,
		idle_timeout => $opts{idle_timeout},
		backlog      => $opts{backlog},
		tls_cert     => $opts{tls_cert},
		host         => $opts{host} // '127.0.0.1',
		tls_key      => $opts{tls_key},
		python      => $opts{python} // $ENV{PYTHON} // 'python3',
		json        => JSON::PP->new->utf8->canonical,
	}, 'OutboxTest::Receiver';
	$self->_spawn(0);
	$LIVE{"$self"} = $self;
	return $self;
}

sub wait_until
{
	my ($code, $timeout, $what) = @_;
	$timeout //= $PostgreSQL::Test::Utils::timeout_default;
	my $deadline = Time::HiRes::time() + $timeout;
	while (1)
	{
		my $ok = eval { $code->() };
		return 1 if $ok;
		last if Time::HiRes::time() >= $deadline;
		Time::HiRes::sleep(0.05);
	}
	Test::More::note("wait_until: timed out after ${timeout}s"
		  . (defined $what ? ": $what" : ''))
	  if defined &Test::More::note;
	return 0;
}

sub verify_webhook_signature
{
	my ($secret, $headers, $body) = @_;
	return 0 unless defined $secret && ref $headers eq 'HASH';

	my %h;
	for my $k (keys %$headers)
	{
		my $v = $headers->{$k};
		$v = join(' ', @$v) if ref $v eq 'ARRAY';
		$h{ lc $k } = $v;
	}
	my ($id, $ts, $sigs) =
	  @h{qw(webhook-id webhook-timestamp webhook-signature)};
	return 0 unless defined $id && defined $ts && defined $sigs;

	(my $b64 = $secret) =~ s/^whsec_//;
	my $key = decode_base64($b64);
	return 0 unless length $key;

	my @parts = ($id, $ts, $body // '');
	for (@parts) { utf8::encode($_) if utf8::is_utf8($_) }
	my $expected =
	  encode_base64(hmac_sha256(join('.', @parts), $key), '');

	for my $entry (split /[\s,]*\s+/, $sigs)    # "v1,a v1,b" (also "v1,a, v1,b")
	{
		my ($version, $sig) = split /,/, $entry, 2;
		next unless defined $sig && $version eq 'v1';
		return 1 if _const_eq($sig, $expected);
	}
	return 0;
}

sub _const_eq
{
	my ($x, $y) = @_;
	return 0 unless length($x) == length($y);
	my $diff = 0;
	$diff |= ord(substr($x, $_, 1)) ^ ord(substr($y, $_, 1))
	  for 0 .. length($x) - 1;
	return $diff == 0 ? 1 : 0;
}

sub new_outbox_node
{
	my ($name, @gucs) = @_;
	croak "new_outbox_node: odd number of GUC arguments" if @gucs % 2;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	my $conf = join '',
	  "shared_preload_libraries = 'pg_outbox'\n",
	  "pg_outbox.poll_interval = '200ms'\n",
	  "pg_outbox.http_timeout = '60s'\n";
	while (my ($k, $v) = splice(@gucs, 0, 2))
	{
		$v //= '';
		$v =~ s/'/''/g;
		$conf .= "$k = '$v'\n";
	}
	$node->append_conf('postgresql.conf', $conf);
	$node->start;
	return $node;
}

sub worker_pid
{
	my ($node, $db) = @_;
	my ($out, $err) = ('', '');
	my $rc = $node->psql($db // 'postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker' AND datname = current_database()",
		stdout => \$out, stderr => \$err);
	return ($rc == 0 && $out =~ /^(\d+)$/) ? $1 : undef;
}

sub wait_for_worker
{
	my ($node, $old, $timeout, $db) = @_;
	my $pid;
	wait_until(
		sub {
			my $p = worker_pid($node, $db);
			return 0 unless defined $p && (!defined $old || $p != $old);
			$pid = $p;
			return 1;
		},
		$timeout // $PostgreSQL::Test::Utils::timeout_default,
		'a pg_outbox worker' . (defined $old ? " other than $old" : ''));
	return $pid;
}

sub webhook_prefix
{
	my ($node, $db) = @_;
	return $node->safe_psql($db // 'postgres', q{SELECT 'msg_' || id || '_' FROM outbox._instance()});
}

sub wait_sql
{
	my ($node, $query, $timeout, $db) = @_;
	return wait_until(
		sub {
			my ($out, $err) = ('', '');
			my $rc = $node->psql($db // 'postgres', $query, stdout => \$out, stderr => \$err);
			return $rc == 0 && $out eq 't';
		},
		$timeout // $PostgreSQL::Test::Utils::timeout_default,
		$query);
}

sub reload_conf
{
	my ($node, @settings) = @_;
	croak "reload_conf: odd number of arguments" if @settings % 2;
	my $db = 'postgres';
	if (@settings && $settings[0] eq 'db') { (undef, $db) = splice(@settings, 0, 2) }
	while (my ($name, $value) = splice(@settings, 0, 2))
	{
		if (defined $value)
		{
			$value =~ s/'/''/g;
			$node->safe_psql($db, "ALTER SYSTEM SET $name = '$value'");
		}
		else { $node->safe_psql($db, "ALTER SYSTEM RESET $name") }
	}
	my $written = $node->safe_psql($db, 'SELECT clock_timestamp()');
	$node->safe_psql($db, 'SELECT pg_reload_conf()');
	return wait_sql($node, "SELECT config_loaded_at > '$written' FROM outbox.worker_status()", undef, $db);
}

sub create_endpoint
{
	my ($node, $name, $url, %opt) = @_;
	my $args = join '', map { defined $opt{$_} ? ", $_ => $opt{$_}" : '' } sort keys %opt;
	return $node->safe_psql('postgres', "SELECT outbox.create_endpoint('$name', url => '$url'$args)");
}

sub listen_for_notifications
{
	my ($node, @channels) = @_;
	my $session = $node->background_psql('postgres');
	$session->query_safe("LISTEN $_") for @channels;
	return bless { session => $session, notes => [], json => JSON::PP->new->utf8 }, 'OutboxTest::Listener';
}

# The shared helpers take the node first: a call that misses it (or passes it twice)
# dies here instead of quietly asking about something else.
sub _check_args
{
	my ($what, $node, @plain) = @_;
	croak "$what: the first argument must be a PostgreSQL::Test::Cluster"
	  unless Scalar::Util::blessed($node) && $node->isa('PostgreSQL::Test::Cluster');
	croak "$what: unexpected reference argument" if grep { ref $_ } @plain;
	return;
}

sub sql
{
	my ($node, $query, $db) = @_;
	_check_args('sql', $node, $query, $db);
	return $node->safe_psql($db // 'postgres', $query);
}

sub endpoint
{
	my ($node, $recv, $name, $path, %opt) = @_;
	_check_args('endpoint', $node, $name, $path);
	croak 'endpoint: the second argument must be a receiver' unless Scalar::Util::blessed($recv) && $recv->can('url');
	return create_endpoint($node, $name, $recv->url($path), %opt);
}

sub states
{
	my ($node, @ids) = @_;
	_check_args('states', $node, @ids);
	return sql($node,
		sprintf(q{SELECT coalesce(string_agg(s.status || '/' || s.attempts, ',' ORDER BY i.id), '')
		            FROM unnest('{%s}'::bigint[]) AS i(id) CROSS JOIN LATERAL outbox.message(i.id) s},
			join(',', @ids)));
}

sub count_sent
{
	my ($node, $endpoint) = @_;
	_check_args('count_sent', $node, $endpoint);
	return sql($node, "SELECT count(*) FROM outbox.history WHERE endpoint = '$endpoint'");
}

sub keys_out_of_order
{
	my ($recv, $path) = @_;
	croak 'keys_out_of_order: the first argument must be a receiver'
	  unless Scalar::Util::blessed($recv) && $recv->can('requests');
	my $json = JSON::PP->new->utf8;
	my %seen;
	my $out_of_order = 0;
	for my $r (sort { $a->{seq} <=> $b->{seq} } @{ $recv->requests(path => $path) })
	{
		my $p = $json->decode(Encode::encode('UTF-8', $r->{body}));
		$out_of_order++ if defined $seen{ $p->{key} } && $seen{ $p->{key} } >= $p->{seq};
		$seen{ $p->{key} } = $p->{seq};
	}
	return $out_of_order;
}

sub breaker_state
{
	my ($node, $endpoint) = @_;
	_check_args('breaker_state', $node, $endpoint);
	return sql($node, "SELECT breaker_state FROM outbox.endpoint_stats WHERE endpoint = '$endpoint'");
}

sub log_since
{
	my ($node, $offset) = @_;
	_check_args('log_since', $node, $offset);
	return PostgreSQL::Test::Utils::slurp_file($node->logfile, $offset // 0);
}

sub log_count
{
	my ($node, $re) = @_;
	_check_args('log_count', $node);
	my @m = PostgreSQL::Test::Utils::slurp_file($node->logfile) =~ /$re/g;
	return scalar @m;
}

sub poll_notifications
{
	my ($listener, $notes) = @_;
	my $n = $listener->poll;
	@$notes = @{ $listener->notes } if $notes;
	return $n;
}

# One line per property of every object of the extension, sorted: what a fresh install
# and an updated database must agree on (t/095, t/096).  The history's time partitions
# are data (the worker makes them) and left out.
sub describe_schema
{
	my ($node, $db) = @_;
	_check_args('describe_schema', $node);
	return sql($node, q{
SELECT line FROM (
  SELECT 'schema ' || nspname || ' acl=' || coalesce(nspacl::text, '') || ' comment=' || coalesce(obj_description(oid, 'pg_namespace'), '') AS line
    FROM pg_namespace WHERE nspname IN ('outbox', 'dlq')
  UNION ALL
  SELECT 'function ' || p.oid::regprocedure::text || ' ' || replace(pg_get_functiondef(p.oid), E'\n', ' ')
         || ' acl=' || coalesce(array_to_string(ARRAY(SELECT a::text FROM unnest(p.proacl) a ORDER BY 1), ','), '')
         || ' comment=' || coalesce(obj_description(p.oid, 'pg_proc'), '')
    FROM pg_proc p WHERE p.pronamespace::regnamespace::text IN ('outbox', 'dlq')
  UNION ALL
  SELECT 'relation ' || c.oid::regclass::text || ' kind=' || c.relkind::text
         || ' options=' || coalesce(array_to_string(c.reloptions, ','), '')
         || ' acl=' || coalesce(array_to_string(ARRAY(SELECT a::text FROM unnest(c.relacl) a ORDER BY 1), ','), '')
         || ' comment=' || coalesce(obj_description(c.oid, 'pg_class'), '')
         || CASE c.relkind WHEN 'v' THEN ' ' || pg_get_viewdef(c.oid) WHEN 'i' THEN ' ' || pg_get_indexdef(c.oid) ELSE '' END
    FROM pg_class c WHERE c.relnamespace::regnamespace::text IN ('outbox', 'dlq')
     AND c.relname !~ '^(history|attempts)_[0-9]'  -- time partitions (history, attempt log) are data: the worker makes them
  UNION ALL
  SELECT 'column ' || a.attrelid::regclass::text || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
         || ' notnull=' || a.attnotnull || ' identity=' || a.attidentity::text
         || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
         || ' comment=' || coalesce(col_description(a.attrelid, a.attnum), '')
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE c.relnamespace::regnamespace::text IN ('outbox', 'dlq') AND a.attnum > 0 AND NOT a.attisdropped
     AND c.relname !~ '^(history|attempts)_[0-9]'
  UNION ALL
  SELECT 'constraint ' || conrelid::regclass::text || '.' || conname || ' ' || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace::regnamespace::text IN ('outbox', 'dlq')
  UNION ALL
  SELECT 'trigger ' || tgrelid::regclass::text || '.' || tgname || ' ' || pg_get_triggerdef(oid)
    FROM pg_trigger WHERE NOT tgisinternal
     AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace::regnamespace::text IN ('outbox', 'dlq'))
  UNION ALL
  SELECT 'member ' || pg_describe_object(classid, objid, objsubid)
    FROM pg_depend
   WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
     AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'pg_outbox')
  UNION ALL
  SELECT 'dumped ' || array_to_string(ARRAY(SELECT c::regclass::text FROM unnest(extconfig) c ORDER BY 1), ',')
         || ' conditions=' || array_to_string(extcondition, ',')
    FROM pg_extension WHERE extname = 'pg_outbox'
) x ORDER BY line}, $db);
}

# test/node: scripts that check what receivers got with implementations that are not
# ours (the Standard Webhooks verifier, the CloudEvents SDK).  Their node_modules is the
# checkout's, or a copy installed once per test file with `npm ci` from the committed
# lock file (the checkout may not be ours to write to).  A missing node or npm fails
# the test: a check that did not run proves nothing.
our $NODE_DIR = File::Spec->catdir(dirname(abs_path(__FILE__)), File::Spec->updir, 'node');
my $node_modules_dir;

sub _node_dir
{
	return $node_modules_dir if defined $node_modules_dir;
	if (-d "$NODE_DIR/node_modules/standardwebhooks" && -d "$NODE_DIR/node_modules/cloudevents")
	{
		return $node_modules_dir = $NODE_DIR;
	}
	my $copy = PostgreSQL::Test::Utils::tempdir('node');
	for my $f (qw(package.json package-lock.json))
	{
		File::Copy::copy("$NODE_DIR/$f", "$copy/$f") or croak "copy $f: $!";
	}
	local $ENV{npm_config_cache} = "$copy/.npm-cache" unless defined $ENV{HOME} && -w $ENV{HOME};
	my ($out, $err) = ('', '');
	my $ok = eval {
		IPC::Run::run([ 'npm', 'ci', '--no-audit', '--no-fund', '--prefer-offline' ], '<', \undef, '>', \$out, '2>', \$err,
			init => sub { chdir $copy or die "chdir $copy: $!" }, IPC::Run::timeout(300));
	};
	croak "npm ci in a copy of test/node failed (apt-get install -y nodejs npm): $out$err$@" unless $ok;
	return $node_modules_dir = $copy;
}

# run_node('script.js', $input): runs test/node/script.js with $input (a Perl structure)
# as JSON on its standard input, and returns what it printed as JSON on its standard
# output, decoded.  Dies when the script fails.
sub run_node
{
	my ($script, $input) = @_;
	my $dir = _node_dir();
	my ($out, $err) = ('', '');
	local $ENV{NODE_PATH} = "$dir/node_modules";
	my $in = JSON::PP->new->utf8->canonical->encode($input);
	my $ok = eval {
		IPC::Run::run([ 'node', "$NODE_DIR/$script" ], '<', \$in, '>', \$out, '2>', \$err, IPC::Run::timeout(120));
	};
	croak "node $script failed: $err$@" unless $ok;
	return JSON::PP->new->utf8->decode($out);
}

END
{
	local $?;
	if ($$ == $OWNER_PID)
	{
		for my $r (values %LIVE)
		{
			eval { $r->stop };
		}
	}
	%LIVE = ();
}

package OutboxTest::Receiver;

use strict;
use warnings;
use Carp;

sub port    { $_[0]{port} }
sub dir     { $_[0]{dir} }
sub log_file { $_[0]{log} }
sub running { defined $_[0]{h} ? 1 : 0 }

sub url
{
	my ($self, $path) = @_;
	$path //= '/';
	$path = "/$path" unless $path =~ m{^/};
	return ($self->{tls_cert} ? 'https' : 'http') . "://$self->{host}:$self->{port}$path";
}

# Start the process; with $resume, reload records from the log.
sub _spawn
{
	my ($self, $resume) = @_;
	unlink $self->{ready_file};
	my @cmd = (
		$self->{python}, $OutboxTest::RECEIVER_SCRIPT,
		'--host'        => $self->{host},
		'--port'        => $self->{port},
		'--ready-file'  => $self->{ready_file},
		'--log'         => $self->{log},
		'--max-seconds' => $self->{max_seconds});
	push @cmd, '--resume' if $resume;
	push @cmd, '--idle-timeout' => $self->{idle_timeout}
	  if $self->{idle_timeout};
	push @cmd, '--backlog' => $self->{backlog} if $self->{backlog};
	push @cmd, '--tls-cert' => $self->{tls_cert}, '--tls-key' => $self->{tls_key}
	  if $self->{tls_cert};
	$self->{h} =
	  IPC::Run::start(\@cmd, '<', \undef, '>>', $self->{out_file}, '2>&1');

	my $port;
	my $deadline = Time::HiRes::time() + $PostgreSQL::Test::Utils::timeout_default;
	while (Time::HiRes::time() < $deadline)
	{
		if (open my $fh, '<', $self->{ready_file})
		{
			my $line = <$fh>;
			close $fh;
			if (defined $line && $line =~ /^(\d+)/)
			{
				$port = $1;
				last;
			}
		}
		Time::HiRes::sleep(0.05);
	}
	if (!defined $port)
	{
		$self->stop;
		my $out = '';
		if (open my $fh, '<', $self->{out_file}) { local $/; $out = <$fh> // '' }
		croak "webhook receiver did not start in time: @cmd\n$out";
	}
	croak "webhook receiver listens on $port, expected $self->{port}"
	  if $self->{port} && $port != $self->{port};
	$self->{port} = $port;
	close(delete $self->{placeholder}) if $self->{placeholder};    # the receiver owns the port now
	$self->{http} = HTTP::Tiny->new(keep_alive => 1, timeout => 30);
	return $self;
}

sub stop
{
	my $self = shift;
	local $?;
	if (my $h = delete $self->{h})
	{
		eval { $h->kill_kill(grace => 5); 1 }
		  or warn "stopping webhook receiver: $@";
	}
	delete $self->{http};
	return 1;
}

# An outage: the process stops, but the port stays ours.  A bound socket that does
# not listen holds it (connections to it are refused, as to a stopped server), so no
# other process can take the port before restart() binds it again (SO_REUSEADDR on
# both sides lets the new receiver bind and listen beside the placeholder).
sub stop_listening
{
	my $self = shift;
	$self->stop;
	$self->{placeholder} = IO::Socket::INET->new(
		LocalAddr => $self->{host},
		LocalPort => $self->{port},
		Proto     => 'tcp',
		ReuseAddr => 1) or croak "holding port $self->{port}: $!";
	return 1;
}

# Starts the receiver again on the same port (held since stop_listening, if it was
# used), with the records of the log.
sub restart
{
	my $self = shift;
	$self->stop;
	return $self->_spawn(1);
}

sub _call
{
	my ($self, $method, $path, $data) = @_;
	croak "webhook receiver is not running" unless $self->{h};
	croak "an HTTPS receiver has no control API here: read its log_file" if $self->{tls_cert};
	my %req;
	if (defined $data)
	{
		$req{content} = $self->{json}->encode($data);
		$req{headers} = { 'Content-Type' => 'application/json' };
	}
	my $res = $self->{http}->request($method, $self->url($path), \%req);
	croak "receiver $method $path: $res->{status} $res->{reason}: "
	  . ($res->{content} // '')
	  unless $res->{success};
	return $self->{json}->decode($res->{content});
}

sub add_rule
{
	my ($self, %rule) = @_;
	croak "add_rule: path is required" unless defined $rule{path};
	return $self->_call('POST', '/_control/rules', \%rule);
}

sub clear_rules { $_[0]->_call('DELETE', '/_control/rules') }
sub reset       { $_[0]->_call('POST',   '/_control/reset') }
sub stats       { $_[0]->_call('GET',    '/_control/stats') }

sub requests
{
	my ($self, %opts) = @_;
	my %q;
	$q{path}  = $opts{path}  if defined $opts{path};
	$q{since} = $opts{since} if defined $opts{since};
	my $qs = %q ? '?' . $self->{http}->www_form_urlencode(\%q) : '';
	return $self->_call('GET', "/_control/requests$qs");
}

# The evidence of what the worker actually got, from the receiver's records: a
# record's "answered" is the status the receiver finished writing while the client
# was still connected (undef: not answered: the client had gone, a close or hang
# rule, or still in progress).  Returns {webhook-id => earliest answered_at of a 2xx}.
sub wait_requests
{
	my ($self, $path, $n, $timeout) = @_;
	return OutboxTest::wait_until(sub { @{ $self->requests(path => $path) } >= $n },
		$timeout, "$n request(s) on $path");
}

sub answered_2xx
{
	my ($self, $path) = @_;
	my %first;
	for my $r (@{ $self->requests(path => $path) })
	{
		next unless ($r->{answered} // '') =~ /^2\d\d$/;
		my $wid = $r->{headers}{'webhook-id'} // '';
		$first{$wid} = $r->{answered_at} if !defined $first{$wid} || $r->{answered_at} < $first{$wid};
	}
	return \%first;
}

# How many requests of $path had arrived by unix time $t and were not answered by
# then: the deliveries in flight at that moment.
sub in_flight_at
{
	my ($self, $path, $t) = @_;
	return scalar grep { $_->{time} <= $t && (!defined $_->{answered_at} || $_->{answered_at} > $t) }
	  @{ $self->requests(path => $path) };
}

sub DESTROY
{
	my $self = shift;
	local ($@, $?);
	$self->stop if $self->{h};
}


package OutboxTest::Listener;

use strict;
use warnings;

# psql prints the notifications that arrived after each command it runs.
sub poll
{
	my $self = shift;
	my $out = $self->{session}->query_safe('SELECT 1');
	for my $line (split /\n/, $out)
	{
		next
		  unless $line =~
		  /^Asynchronous notification "([^"]+)" with payload "(.*)" received from server process with PID (\d+)\.$/;
		my %n = (channel => $1, payload => $2, pid => $3);
		$n{envelope} = eval { $self->{json}->decode($n{payload}) };
		push @{ $self->{notes} }, \%n;
	}
	return scalar @{ $self->{notes} };
}

sub notes { $_[0]{notes} }

sub wait
{
	my ($self, $n, $timeout) = @_;
	return OutboxTest::wait_until(sub { $self->poll >= $n }, $timeout, "$n notification(s)");
}

sub quit { $_[0]{session}->quit }

1;
