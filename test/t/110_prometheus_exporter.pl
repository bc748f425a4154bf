#!/usr/bin/perl
# Prometheus without glue (contrib/prometheus): the real prometheus-postgres-exporter,
# given contrib/prometheus/pg_outbox_queries.yaml, logged in as a role that has only
# the grants of contrib/prometheus/grants.sql:
#
#  - exposes the metrics of docs/operations.md ("Monitoring") under their names, with the labels of
#    outbox.metrics() plus database = current_database():
#    pg_outbox_messages{endpoint,status}, pg_outbox_oldest_pending_age_seconds{endpoint},
#    pg_outbox_deliveries_total{endpoint,result}, pg_outbox_dead_letters{endpoint,
#    reason_code}, pg_outbox_dead_letter_oldest_age_seconds{endpoint}, and the three
#    other families of metrics(), pg_outbox_circuit_open, pg_outbox_endpoint_paused and
#    pg_outbox_auto_paused{endpoint,reason};
#  - with the figures of SELECT outbox.metrics(): the same series, the same counts,
#    and ages between those metrics() gives just before and just after the scrape;
#  - serves a cluster whose other database has no pg_outbox: that database is scraped
#    (the exporter holds a connection to it), shows no pg_outbox series, and causes no
#    scrape error (pg_exporter_last_scrape_error 0);
#  - in both ways of covering several databases: --auto-discover-databases, and one
#    DSN per database (README.md in contrib/prometheus gives the flags for each).
#
# The scenario: endpoint "ok" gets one message answered 2xx, "bad" one answered 400
# (a dead letter HTTP_CLIENT_ERROR), "held" is paused with one message pending.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use File::Spec;
use HTTP::Tiny;
use IO::Socket::INET;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $EXPORTER = '/usr/bin/prometheus-postgres-exporter';
my $CONTRIB  = File::Spec->catdir($FindBin::RealBin, File::Spec->updir, File::Spec->updir,
	'contrib', 'prometheus');
my $QUERIES  = "$CONTRIB/pg_outbox_queries.yaml";
my $GRANTS   = "$CONTRIB/grants.sql";
my $ROLE     = 'outbox_exporter';
my @FAMILIES = qw(pg_outbox_messages pg_outbox_oldest_pending_age_seconds
  pg_outbox_deliveries_total pg_outbox_dead_letters pg_outbox_dead_letter_oldest_age_seconds
  pg_outbox_circuit_open pg_outbox_endpoint_paused pg_outbox_auto_paused);
my %IS_AGE = map { $_ => 1 }
  qw(pg_outbox_oldest_pending_age_seconds pg_outbox_dead_letter_oldest_age_seconds);
my @EXPORTERS;    # every harness started, for the END block

ok(-x $EXPORTER, "$EXPORTER is installed (test/lib.sh installs prometheus-postgres-exporter)")
  or BAIL_OUT("no $EXPORTER");
ok(-r $QUERIES && -r $GRANTS, 'contrib/prometheus has the queries and the grants');

my $node = new_outbox_node('prom');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
$node->safe_psql('postgres', 'CREATE DATABASE plain');    # no pg_outbox in it
# The monitoring role: LOGIN and the grants of contrib/prometheus/grants.sql, nothing else.
$node->safe_psql('postgres', "CREATE ROLE $ROLE LOGIN");
$node->safe_psql('postgres', slurp_file($GRANTS), extra_params => [ '-v', "role=$ROLE" ]);

my $recv = start_receiver();
# ---------------------------------------------------------------------------
# 1. Something to measure: a delivery, a dead letter, a pending message.

sql($node, sprintf("SELECT outbox.create_endpoint('ok', url => '%s')",  $recv->url('/hooks/ok')));
sql($node, sprintf("SELECT outbox.create_endpoint('bad', url => '%s')", $recv->url('/hooks/bad')));
sql($node, sprintf("SELECT outbox.create_endpoint('held', url => '%s')", $recv->url('/hooks/held')));
sql($node, q{SELECT outbox.pause_endpoint('held')});
$recv->add_rule(path => '/hooks/bad', status => 400, body => 'no such order');
my $ok_id   = sql($node, q{SELECT outbox.enqueue('ok', '{"n": 1}')});
my $bad_id  = sql($node, q{SELECT outbox.enqueue('bad', '{"n": 2}')});
my $held_id = sql($node, q{SELECT outbox.enqueue('held', '{"n": 3}')});

ok(wait_until(sub { keys %{ $recv->answered_2xx('/hooks/ok') } == 1 }, undef, 'ok answered 2xx'),
	'"ok": the receiver answered the message 2xx');
ok(wait_sql($node, "SELECT status = 'sent' FROM outbox.message($ok_id)"),
	'"ok": the message is sent');
ok(wait_sql($node, "SELECT count(*) = 1 FROM dlq.dead_letters WHERE message_id = $bad_id"),
	'"bad": the 400 made a dead letter');
is(sql($node, "SELECT reason_code FROM dlq.dead_letters WHERE message_id = $bad_id"),
	'HTTP_CLIENT_ERROR', '"bad": reason HTTP_CLIENT_ERROR');
# The worker publishes its counters just after the settle commits.
ok(wait_until(sub {
			my $m = parse_exposition(sql($node, 'SELECT outbox.metrics()'));
			return ($m->{'pg_outbox_deliveries_total|ok|sent'} // 0) == 1
			  && ($m->{'pg_outbox_deliveries_total|bad|dead'} // 0) == 1;
		}, undef, 'worker counters'),
	'metrics() counts the delivery and the dead letter');
is(sql($node, "SELECT status FROM outbox.message($held_id)"), 'pending',
	'"held": paused, its message stays pending');

# ---------------------------------------------------------------------------
# 2. The exporter, over the node's Unix socket, listening on 127.0.0.1.

my $dsn_base = sprintf('host=%s port=%d user=%s sslmode=disable', $node->host, $node->port, $ROLE);

my @auto = start_exporter(
	'auto-discover',
	"$dsn_base dbname=postgres application_name=exporter_auto",
	'--auto-discover-databases');
check_exporter(@auto, 'exporter_auto');

# One DSN per database: without auto-discovery every DSN runs the exporter's own
# metrics, which would collide between two databases of one server;
# contrib/prometheus/README.md gives these flags for that way of running it.
my @per_db = start_exporter(
	'one DSN per database',
	join(',', map { "$dsn_base dbname=$_ application_name=exporter_per_db" } qw(postgres plain)),
	'--disable-default-metrics', '--disable-settings-metrics',
	'--no-collector.database', '--no-collector.bgwriter');
check_exporter(@per_db, 'exporter_per_db');

# ---------------------------------------------------------------------------
# helpers

# Prometheus text format -> { "family|endpoint|status-or-result-or-reason" => value },
# only the eight families of metrics().  With $db, only series whose database label is $db
# (the exporter's); without, series that have no database label (metrics()).
sub parse_exposition
{
	my ($text, $db) = @_;
	my %out;
	for my $line (split /\n/, $text)
	{
		next unless $line =~ /^(\w+)\{(.*)\} (\S+)$/;
		my ($name, $labels, $value) = ($1, $2, $3);
		next unless grep { $_ eq $name } @FAMILIES;
		my %l;
		$l{$1} = $2 while $labels =~ /(\w+)="((?:[^"\\]|\\.)*)"/g;
		if (defined $db) { next unless ($l{database} // '') eq $db }
		else             { next if exists $l{database} }
		my $k = join '|', $name, $l{endpoint} // '',
		  $l{status} // $l{result} // $l{reason_code} // $l{reason} // ();
		$out{$k} = $value;
	}
	return \%out;
}

# The value of a sample without labels, or undef.
sub sample
{
	my ($text, $name) = @_;
	return $text =~ /^\Q$name\E (\S+)$/m ? $1 : undef;
}

sub databases_in
{
	my ($text) = @_;
	my %db;
	$db{$1} = 1 while $text =~ /^pg_outbox_\w+\{[^}]*\bdatabase="([^"]*)"/mg;
	return [ sort keys %db ];
}

# Starts the exporter on a free port of 127.0.0.1 (another one if the bind fails:
# the port is free when chosen, not necessarily when the exporter binds it) and
# waits until it serves /metrics.  Returns (name, harness, port, log file).
sub start_exporter
{
	my ($name, $dsn, @flags) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir('exporter');
	for my $try (1 .. 5)
	{
		my $sock = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
			Proto => 'tcp', Listen => 1, ReuseAddr => 1)
		  or die "no free port: $!";
		my $port = $sock->sockport;
		close $sock;
		my $log = "$dir/exporter.$try.log";
		my $h;
		{
			local $ENV{DATA_SOURCE_NAME} = $dsn;
			$h = IPC::Run::start(
				[ $EXPORTER, "--extend.query-path=$QUERIES",
				  "--web.listen-address=127.0.0.1:$port", '--log.level=info', @flags ],
				'<', '/dev/null', '>', $log, '2>&1');    # no pipe: pumpable() = alive
		}
		push @EXPORTERS, $h;
		# Ready once it says it listens on our port and answers as the exporter; gone
		# if it exited (a port taken in between: try another).
		my $http = HTTP::Tiny->new(timeout => 10);
		my $ready = wait_until(
			sub {
				return 1 unless $h->pumpable;
				return 0 unless slurp_file($log) =~ /Listening on.*127\.0\.0\.1:$port/;
				my $r = $http->get("http://127.0.0.1:$port/metrics");
				return $r->{success} && $r->{content} =~ /^pg_exporter_last_scrape_error /m;
			},
			undef, "$name exporter on port $port");
		if ($ready && $h->pumpable)
		{
			note("$name exporter: listening on 127.0.0.1:$port");
			return ($name, $h, $port, $log);
		}
		note("$name exporter did not serve on $port (try $try):\n" . slurp_file($log));
		eval { $h->kill_kill(grace => 5) };
	}
	BAIL_OUT("$name: the exporter never served /metrics");
}

sub scrape
{
	my ($port) = @_;
	my $r = HTTP::Tiny->new(timeout => 60)->get("http://127.0.0.1:$port/metrics");
	return ($r->{status}, $r->{content} // '');
}

# The exporter's pg_outbox series for database postgres against outbox.metrics()
# taken just before and just after the scrape: counts must equal (the scrape is
# retried while the outbox moves under it, which here it should not), ages must lie
# between the two (they grow with time).
sub check_exporter
{
	my ($name, $h, $port, $log, $appname) = @_;
	my ($before, $after, $got, $status, $text);
	my $stable = wait_until(
		sub {
			$before = parse_exposition(sql($node, 'SELECT outbox.metrics()'));
			($status, $text) = scrape($port);
			$after = parse_exposition(sql($node, 'SELECT outbox.metrics()'));
			$got = parse_exposition($text, 'postgres');
			for my $k (keys %$before)
			{
				next if $k =~ /^(\w+)\|/ && $IS_AGE{$1};
				return 0 unless $before->{$k} == ($after->{$k} // -1);
			}
			return keys(%$before) == keys(%$after);
		},
		undef, "$name: a scrape while metrics() stands still");
	ok($stable, "$name: metrics() stood still around a scrape");
	is($status, 200, "$name: /metrics answers 200");
	is(sample($text, 'pg_exporter_last_scrape_error'), 0,
		"$name: pg_exporter_last_scrape_error 0 (no query failed, in either database)")
	  or diag(join "\n", grep { /level=error|err=/ } split /\n/, slurp_file($log));
	is(sample($text, 'pg_up'), 1, "$name: pg_up 1");

	# The series the task names, with database="postgres".
	like($text,
		qr/^pg_outbox_deliveries_total\{(?=[^}]*\bdatabase="postgres")(?=[^}]*\bendpoint="ok")(?=[^}]*\bresult="sent")[^}]*\} (\S+)$/m,
		"$name: pg_outbox_deliveries_total for ok/sent in database postgres");
	cmp_ok($got->{'pg_outbox_deliveries_total|ok|sent'} // 0, '>=', 1,
		"$name: pg_outbox_deliveries_total{endpoint=\"ok\",result=\"sent\"} >= 1");
	is($got->{'pg_outbox_dead_letters|bad|HTTP_CLIENT_ERROR'}, 1,
		"$name: pg_outbox_dead_letters{endpoint=\"bad\",reason_code=\"HTTP_CLIENT_ERROR\"} 1");
	is($got->{'pg_outbox_messages|ok|sent'}, 1,
		"$name: pg_outbox_messages{endpoint=\"ok\",status=\"sent\"} 1");
	is($got->{'pg_outbox_messages|held|pending'}, 1,
		"$name: pg_outbox_messages{endpoint=\"held\",status=\"pending\"} 1");
	like($text, qr/^pg_outbox_messages\{(?=[^}]*\bstatus="in_flight")[^}]*\} \S+$/m,
		"$name: pg_outbox_messages has a status label");
	for my $ep (qw(ok bad held))
	{
		ok(defined $got->{"pg_outbox_oldest_pending_age_seconds|$ep"},
			"$name: pg_outbox_oldest_pending_age_seconds for $ep");
		ok(defined $got->{"pg_outbox_dead_letter_oldest_age_seconds|$ep"},
			"$name: pg_outbox_dead_letter_oldest_age_seconds for $ep");
	}
	is($got->{'pg_outbox_endpoint_paused|held'}, 1, "$name: pg_outbox_endpoint_paused{endpoint=\"held\"} 1");
	is($got->{'pg_outbox_endpoint_paused|ok'},   0, "$name: pg_outbox_endpoint_paused{endpoint=\"ok\"} 0");
	is($got->{'pg_outbox_circuit_open|bad'},     0, "$name: pg_outbox_circuit_open{endpoint=\"bad\"} 0");
	cmp_ok($got->{'pg_outbox_oldest_pending_age_seconds|held'} // 0, '>', 0,
		"$name: the held message has an age");
	cmp_ok($got->{'pg_outbox_dead_letter_oldest_age_seconds|bad'} // 0, '>', 0,
		"$name: the dead letter has an age");

	# Figure for figure against outbox.metrics().
	is_deeply([ sort keys %$got ], [ sort keys %$before ],
		"$name: the same series as outbox.metrics() (" . scalar(keys %$got) . ')');
	my @wrong;
	for my $k (sort keys %$before)
	{
		my ($family) = split /\|/, $k;
		my $v = $got->{$k};
		push @wrong, "$k: exporter " . ($v // 'none') . ", metrics() $before->{$k}..$after->{$k}"
		  unless defined $v
		  && ($IS_AGE{$family}
			? $before->{$k} <= $v && $v <= $after->{$k}
			: $v == $before->{$k});
	}
	is_deeply(\@wrong, [], "$name: every figure is that of outbox.metrics()");

	# The database without pg_outbox: scraped, no series, no error (above).
	is_deeply(databases_in($text), ['postgres'], "$name: pg_outbox series only for database postgres");
	is( $node->safe_psql('postgres',
			"SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = 'plain' AND application_name = '$appname'"),
		't', "$name: the exporter is connected to database plain too");
	return;
}

# ---------------------------------------------------------------------------
# 3. Stop.

for my $h (@EXPORTERS)
{
	$h->kill_kill(grace => 5) if $h->pumpable;
}
ok(!(grep { $_->pumpable } @EXPORTERS), 'the exporters are stopped');
@EXPORTERS = ();
$recv->stop;
$node->stop;
done_testing();

END
{
	local $?;
	eval { $_->kill_kill(grace => 5) } for @EXPORTERS;
}
