#!/usr/bin/perl
# Alerts and dashboard of contrib/prometheus and contrib/grafana, in a real Prometheus:
#
#  - promtool check rules contrib/prometheus/alerts.yml, and promtool test rules
#    contrib/prometheus/alerts_test.yml (the unit tests: every alert, with cases that
#    must not fire);
#  - Debian's prometheus server, with a copy of alerts.yml whose for: durations are
#    cut to 3 s (the expressions are the file's own), scrapes Debian's
#    prometheus-postgres-exporter, which runs contrib/prometheus/pg_outbox_queries.yaml
#    as a role that has only the grants of contrib/prometheus/grants.sql, against a real
#    cluster whose worker delivers to the test receiver;
#  - before any dead letter, PgOutboxDeadLetters is neither pending nor firing, though
#    the rules run on the data (PgOutboxEndpointPaused fires for the paused endpoint);
#  - an endpoint answered 400 makes dead letters, and /api/v1/alerts shows
#    PgOutboxDeadLetters firing for it (and PgOutboxDeliveryFailures); an endpoint
#    answered 503 opens its circuit and PgOutboxCircuitOpen fires; the alerts that the
#    scenario gives no cause for (a database not served, the exporter, a stale
#    backlog, an endpoint held up, anything for the healthy endpoint) do not;
#  - every target of every panel of contrib/grafana/pg_outbox.json, its variables
#    replaced by regular expressions that match everything, returns at least one series
#    from that Prometheus (/api/v1/query);
#  - contrib/grafana/render_dashboard.py draws those panels into a valid PNG.  With
#    PG_OUTBOX_DASHBOARD_PNG=path in the environment, the PNG is also copied there
#    (that is how docs/images/dashboard.png is made).
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use File::Copy qw(copy);
use File::Spec;
use HTTP::Tiny;
use IO::Socket::INET;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

my $ROOT = File::Spec->catdir($FindBin::RealBin, File::Spec->updir, File::Spec->updir);
my $PROM_DIR  = "$ROOT/contrib/prometheus";
my $ALERTS    = "$PROM_DIR/alerts.yml";
my $UNITS     = "$PROM_DIR/alerts_test.yml";
my $QUERIES   = "$PROM_DIR/pg_outbox_queries.yaml";
my $GRANTS    = "$PROM_DIR/grants.sql";
my $DASHBOARD = "$ROOT/contrib/grafana/pg_outbox.json";
my $RENDER    = "$ROOT/contrib/grafana/render_dashboard.py";
my $PROMETHEUS = '/usr/bin/prometheus';
my $PROMTOOL   = '/usr/bin/promtool';
my $EXPORTER   = '/usr/bin/prometheus-postgres-exporter';
# Debian's interpreter, which has python3-matplotlib (not whatever python3 PATH finds).
my $PYTHON = '/usr/bin/python3';
my $ROLE   = 'outbox_exporter';
my $SHORT_FOR = '3s';
my $json   = JSON::PP->new->utf8->canonical;
my @SERVERS;    # every harness started, for the END block

# ---------------------------------------------------------------------------
# 0. What the test needs is installed: a missing package fails, never skips.

for my $pkg (qw(prometheus prometheus-postgres-exporter python3-matplotlib))
{
	my $status = `dpkg-query -W -f='\${Status}' $pkg 2>/dev/null`;
	ok($status =~ /ok installed/, "Debian package $pkg is installed")
	  or BAIL_OUT("$pkg is not installed: apt-get install -y $pkg (test/lib.sh PACKAGES)");
}
ok(-x $PROMETHEUS && -x $PROMTOOL && -x $EXPORTER && -x $PYTHON, 'prometheus, promtool, the exporter and python3');
ok(-r $_, "$_ is there") for ($ALERTS, $UNITS, $QUERIES, $GRANTS, $DASHBOARD, $RENDER);

# ---------------------------------------------------------------------------
# 1. The rules on their own: syntax, and the unit tests (from their own folder: the
#    test file names alerts.yml relative to itself).

my ($out, $rc) = run_cmd($PROMTOOL, 'check', 'rules', $ALERTS);
is($rc, 0, 'promtool check rules alerts.yml') or diag($out);
my ($n_rules) = $out =~ /SUCCESS: (\d+) rules found/;
my @alert_names = slurp_file($ALERTS) =~ /^\s*- alert:\s*(\w+)/mg;
ok(@alert_names >= 9, 'alerts.yml has its alerts: ' . join(', ', @alert_names));
is($n_rules, scalar @alert_names, 'promtool found every alert of the file');
($out, $rc) = run_cmd($PROMTOOL, 'test', 'rules', $UNITS);
is($rc, 0, 'promtool test rules alerts_test.yml') or diag($out);
like($out, qr/SUCCESS/, 'the unit tests of the rules pass');
my $units_text = slurp_file($UNITS);
for my $name (@alert_names)
{
	like($units_text, qr/alertname: \Q$name\E\s*\n\s*exp_alerts: \[\]/,
		"$name: a unit test where it must not fire");
	like($units_text, qr/alertname: \Q$name\E\s*\n\s*exp_alerts:\s*\n\s*- exp_labels/,
		"$name: a unit test where it fires");
}

# The test copy: every for: cut to $SHORT_FOR, nothing else changed.
my $tmp = PostgreSQL::Test::Utils::tempdir('prom_alerts');
my $rules_text = slurp_file($ALERTS);
my $n_for = ($rules_text =~ s/^(\s+for:\s*)\S+\s*$/$1$SHORT_FOR/mg);
is($n_for, scalar @alert_names, "the test copy of alerts.yml: every alert's for: is $SHORT_FOR");
my $short_rules = "$tmp/alerts_short.yml";
write_file($short_rules, $rules_text);
($out, $rc) = run_cmd($PROMTOOL, 'check', 'rules', $short_rules);
is($rc, 0, 'promtool check rules on the test copy') or diag($out);

# ---------------------------------------------------------------------------
# 2. A cluster with something to measure.  breaker_threshold 3 and a short backoff:
#    the 503 endpoint opens its circuit within seconds.

my $node = new_outbox_node('alerts',
	'pg_outbox.breaker_threshold' => '3',
	'pg_outbox.backoff_base'      => '200ms');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
$node->safe_psql('postgres', "CREATE ROLE $ROLE LOGIN");
$node->safe_psql('postgres', slurp_file($GRANTS), extra_params => [ '-v', "role=$ROLE" ]);

my $recv = start_receiver();
$recv->add_rule(path => '/hooks/bad',  status => 400, body => 'no such order');
$recv->add_rule(path => '/hooks/down', status => 503, body => 'down for maintenance');
for my $ep (qw(ok bad held down))
{
	sql($node, sprintf("SELECT outbox.create_endpoint('%s', url => '%s')", $ep, $recv->url("/hooks/$ep")));
}
sql($node, q{SELECT outbox.pause_endpoint('held')});
sql($node, q{SELECT outbox.enqueue('held', '{"n": 0}')});
sql($node, q{SELECT outbox.enqueue('ok', '{"n": 0}')});

# ---------------------------------------------------------------------------
# 3. The exporter and Prometheus, each on a free port of 127.0.0.1.

my $dsn = sprintf('host=%s port=%d user=%s dbname=postgres sslmode=disable',
	$node->host, $node->port, $ROLE);
my $exporter_port = start_server(
	'exporter',
	sub {
		my ($port) = @_;
		return [ $EXPORTER, "--extend.query-path=$QUERIES", '--auto-discover-databases',
			"--web.listen-address=127.0.0.1:$port", '--log.level=info' ];
	},
	sub {
		my ($port) = @_;
		my $r = HTTP::Tiny->new(timeout => 10)->get("http://127.0.0.1:$port/metrics");
		return $r->{success} && $r->{content} =~ /^pg_outbox_worker_up\{/m;
	},
	{ DATA_SOURCE_NAME => $dsn });

# Scrapes every 2 s (the exporter runs its queries in every database at each), rules
# every second.
write_file("$tmp/prometheus.yml", <<"EOF");
global:
  scrape_interval: 2s
  scrape_timeout: 2s
  evaluation_interval: 1s
rule_files:
  - $short_rules
scrape_configs:
  - job_name: postgres
    static_configs:
      - targets: ['127.0.0.1:$exporter_port']
EOF
my $prom_port = start_server(
	'prometheus',
	sub {
		my ($port) = @_;
		return [ $PROMETHEUS, "--config.file=$tmp/prometheus.yml",
			"--storage.tsdb.path=$tmp/tsdb.$port", "--web.listen-address=127.0.0.1:$port",
			'--log.level=info' ];
	},
	sub {
		my ($port) = @_;
		return HTTP::Tiny->new(timeout => 10)->get("http://127.0.0.1:$port/-/ready")->{success};
	});
my $PROM = "http://127.0.0.1:$prom_port";
my $t0   = time();    # the picture's window starts here

# Prometheus has the exporter's pg_outbox series, and the worker is up in them.
ok(wait_until(sub { (query_value('pg_outbox_worker_up{database="postgres"}') // -1) == 1 },
		undef, 'pg_outbox_worker_up in Prometheus'),
	'Prometheus scrapes the exporter: pg_outbox_worker_up{database="postgres"} 1');
ok(wait_until(sub { defined query_value('pg_outbox_deliveries_total{endpoint="bad",result="dead"}') },
		undef, 'the dead counter of "bad" in Prometheus'),
	'Prometheus has pg_outbox_deliveries_total for "bad" (still 0)');
is(query_value('pg_outbox_dead_letters{endpoint="bad",reason_code="HTTP_CLIENT_ERROR"}'), 0,
	'no dead letter yet for "bad"');
is(query_value('max(pg_exporter_last_scrape_error)'), 0, 'the exporter fails no query');

# The rules run on this data: the paused endpoint with a message fires (its for: is
# 3 s here), and at that point there is no PgOutboxDeadLetters, pending or firing.
ok(wait_until(sub { alert_state('PgOutboxEndpointPaused', endpoint => 'held') eq 'firing' },
		60, 'PgOutboxEndpointPaused firing'),
	'PgOutboxEndpointPaused fires for the paused endpoint "held" with a message waiting');
is_deeply([ map { "$_->{labels}{endpoint}:$_->{state}" } alerts('PgOutboxDeadLetters') ], [],
	'no PgOutboxDeadLetters before any dead letter');

# ---------------------------------------------------------------------------
# 4. Traffic: six messages answered 400 (dead letters), four answered 503 (retries,
#    then the breaker opens), and a steady flow to "ok" for the throughput panels.

sql($node, q{SELECT outbox.enqueue('bad', format('{"n": %s}', i)::jsonb) FROM generate_series(1, 6) i});
sql($node, q{SELECT outbox.enqueue('down', format('{"n": %s}', i)::jsonb) FROM generate_series(1, 4) i});
# Bounded: 12 rounds of 3 messages, one round a second; 90 rounds when the picture is
# kept for the documentation, so that it shows more than a ramp.
my $rounds = $ENV{PG_OUTBOX_DASHBOARD_PNG} ? 90 : 12;
for my $i (1 .. $rounds)
{
	sql($node, qq{SELECT outbox.enqueue('ok', format('{"round": $i, "n": %s}', i)::jsonb) FROM generate_series(1, 3) i});
	Time::HiRes::sleep(1);
}
ok(wait_sql($node, q{SELECT count(*) = 6 FROM dlq.dead_letters WHERE endpoint = 'bad'}),
	'"bad": six dead letters HTTP_CLIENT_ERROR');
ok(wait_sql($node, q{SELECT breaker_state <> 'closed' FROM outbox.endpoint_stats WHERE endpoint = 'down'}),
	'"down": its circuit is open');
ok(wait_sql($node, 'SELECT sent = ' . (1 + 3 * $rounds) . q{ FROM outbox.endpoint_stats WHERE endpoint = 'ok'}),
	'"ok": every message delivered');

# ---------------------------------------------------------------------------
# 5. The alerts fire in Prometheus, through its HTTP API.

my %expected = (
	PgOutboxDeadLetters      => 'bad',
	PgOutboxCircuitOpen      => 'down',
	PgOutboxDeliveryFailures => 'bad',
	PgOutboxEndpointPaused   => 'held');
for my $name (sort keys %expected)
{
	ok(wait_until(sub { alert_state($name, endpoint => $expected{$name}) eq 'firing' }, 90, "$name firing"),
		"$name is firing for endpoint \"$expected{$name}\" (/api/v1/alerts)")
	  or diag(explain([ alerts() ]));
}
my ($dead) = grep { $_->{labels}{endpoint} eq 'bad' } alerts('PgOutboxDeadLetters');
is_deeply([ @{ $dead->{labels} }{qw(database server severity)} ],
	[ 'postgres', sprintf('%s:%d', $node->host, $node->port), 'warning' ],
	'PgOutboxDeadLetters: labels database, server (the exporter\'s) and severity');
like($dead->{annotations}{description}, qr/^6 message\(s\) for endpoint "bad" in database "postgres" on /,
	'PgOutboxDeadLetters: the description names the count, the endpoint and the database');
like($dead->{annotations}{summary}, qr/endpoint bad in database postgres/, 'PgOutboxDeadLetters: summary');

# Nothing else: the alerts the scenario gives no cause for are neither pending nor
# firing, and the expected ones concern only their endpoint ("down" may also count
# as failing: its 503s are retries).
my @unexpected;
for my $a (alerts())
{
	my ($name, $ep) = ($a->{labels}{alertname}, $a->{labels}{endpoint} // '');
	next if defined $expected{$name} && $expected{$name} eq $ep;
	next if $name eq 'PgOutboxDeliveryFailures' && $ep eq 'down';
	push @unexpected, "$name $ep ($a->{state})";
}
is_deeply(\@unexpected, [], 'no other alert is pending or firing');

# ---------------------------------------------------------------------------
# 6. The dashboard: every target of every panel returns data from this Prometheus.

my $dash = decode_json(slurp_file($DASHBOARD));
is($dash->{uid}, 'pg-outbox', 'the dashboard has a stable uid');
cmp_ok($dash->{schemaVersion}, '>=', 36, 'schemaVersion of Grafana 9/10');
my %vars = map { $_->{name} => $_ } @{ $dash->{templating}{list} };
is($vars{datasource}{type} // '', 'datasource', 'a data source variable...');
is($vars{datasource}{query} // '', 'prometheus', '...of Prometheus data sources');
my @panels = map { $_->{type} eq 'row' ? @{ $_->{panels} // [] } : $_ } @{ $dash->{panels} };
my @wrong_ds = map { $_->{title} } grep { ($_->{datasource}{uid} // '') ne '${datasource}' } @panels;
is_deeply(\@wrong_ds, [], 'every panel reads the data source of the variable');
my @titles = map { $_->{title} } @panels;
for my $topic (qr/backlog/i, qr/throughput/i, qr/reason/i, qr/DLQ size/i, qr/DLQ age/i,
	qr/circuit breaker/i, qr/paused/i, qr/worker/i)
{
	ok((grep { $_ =~ $topic } @titles), "a panel for $topic");
}
my %used;
my $targets = 0;
for my $panel (@panels)
{
	for my $t (@{ $panel->{targets} })
	{
		my $expr = grafana_substitute($t->{expr});
		$used{$_} = 1 for $expr =~ /\b(pg_outbox_\w+|pg_up|pg_exporter_last_scrape_error|ALERTS)\b/g;
		my $r = query($expr);
		ok($r && $r->{status} eq 'success' && @{ $r->{data}{result} } > 0,
			"panel \"$panel->{title}\" $t->{refId}: series for $expr")
		  or diag(explain($r));
		$targets++;
	}
}
cmp_ok($targets, '>=', 12, "$targets targets run");
for my $family (qw(pg_outbox_messages pg_outbox_oldest_pending_age_seconds pg_outbox_deliveries_total
	pg_outbox_dead_letters pg_outbox_dead_letter_oldest_age_seconds pg_outbox_circuit_open
	pg_outbox_endpoint_paused pg_outbox_worker_up pg_outbox_worker_status_info))
{
	ok($used{$family}, "the dashboard shows $family");
}
# The variables' own queries (label_values) name series that exist.
for my $v (grep { ($_->{type} // '') eq 'query' } values %vars)
{
	my ($metric) = $v->{definition} =~ /label_values\(([^,]+),/;
	my $r = query(grafana_substitute($metric));
	ok($r && @{ $r->{data}{result} } > 0, "variable \$$v->{name}: $metric has series");
}

# ---------------------------------------------------------------------------
# 7. The picture: render_dashboard.py draws every panel from query_range.

my $png = "$tmp/dashboard.png";
($out, $rc) = run_cmd($PYTHON, $RENDER, '--prometheus', $PROM, '--dashboard', $DASHBOARD,
	'--out', $png, '--start', $t0, '--end', time() + 1, '--step', 2,
	'--var', 'database=.+', '--var', 'endpoint=.+');
is($rc, 0, 'render_dashboard.py exits 0') or diag($out);
unlike($out, qr/no data:/, 'every panel of the picture has data') or diag($out);
like($out, qr/\Q$png\E: (\d+) panels/, 'it drew the panels');
my $bytes = -s $png // 0;
my $head  = $bytes ? substr(slurp_file($png), 0, 24) : '';
is(substr($head, 0, 8), "\x89PNG\r\n\x1a\n", 'the output is a PNG');
my ($w, $h) = length $head == 24 ? unpack('NN', substr($head, 16, 8)) : (0, 0);
ok($w >= 1000 && $h >= 1000 && $bytes > 50_000, "a picture of some size (${w}x$h, $bytes bytes)");
if (my $keep = $ENV{PG_OUTBOX_DASHBOARD_PNG})
{
	ok(copy($png, $keep), "copied to $keep");
}

# ---------------------------------------------------------------------------
# 8. Stop.

for my $s (@SERVERS)
{
	$s->kill_kill(grace => 5) if $s->pumpable;
}
ok(!(grep { $_->pumpable } @SERVERS), 'Prometheus and the exporter are stopped');
@SERVERS = ();
$recv->stop;
$node->stop;
done_testing();

# ---------------------------------------------------------------------------
# helpers

sub run_cmd
{
	my @cmd = @_;
	my $output = '';
	IPC::Run::run(\@cmd, '<', '/dev/null', '>', \$output, '2>&1', IPC::Run::timeout(120));
	return ($output, $? >> 8);
}

sub write_file
{
	my ($path, $text) = @_;
	open my $fh, '>', $path or die "$path: $!";
	print $fh $text;
	close $fh or die "$path: $!";
}

# Starts a server on a free port of 127.0.0.1 (another one if it does not come up:
# the port is free when chosen, not necessarily when the server binds it) and waits
# until $ready->($port).  Returns the port.
sub start_server
{
	my ($name, $cmd, $ready, $env) = @_;
	for my $try (1 .. 5)
	{
		my $sock = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
			Proto => 'tcp', Listen => 1, ReuseAddr => 1)
		  or die "no free port: $!";
		my $port = $sock->sockport;
		close $sock;
		my $log = "$tmp/$name.$try.log";
		my $h;
		{
			local %ENV = (%ENV, %{ $env // {} });
			$h = IPC::Run::start($cmd->($port), '<', '/dev/null', '>', $log, '2>&1');
		}
		push @SERVERS, $h;
		my $up = wait_until(sub { return 1 unless $h->pumpable; return $ready->($port) },
			60, "$name on port $port");
		if ($up && $h->pumpable)
		{
			note("$name: listening on 127.0.0.1:$port");
			return $port;
		}
		note("$name did not come up on $port (try $try):\n" . slurp_file($log));
		eval { $h->kill_kill(grace => 5) };
	}
	BAIL_OUT("$name never came up");
}

sub query
{
	my ($expr) = @_;
	my $r = HTTP::Tiny->new(timeout => 30)->post_form("$PROM/api/v1/query", { query => $expr });
	return eval { decode_json($r->{content}) };
}

# The value of an instant query that returns one series, else undef.
sub query_value
{
	my $r = query($_[0]);
	return undef unless $r && $r->{status} eq 'success' && @{ $r->{data}{result} } == 1;
	return $r->{data}{result}[0]{value}[1];
}

# Active alerts (pending or firing), of one name if given.
sub alerts
{
	my ($name) = @_;
	my $r = HTTP::Tiny->new(timeout => 30)->get("$PROM/api/v1/alerts");
	my $body = eval { decode_json($r->{content}) } or return ();
	return grep { !defined $name || $_->{labels}{alertname} eq $name } @{ $body->{data}{alerts} };
}

# 'firing', 'pending' or '' for the alert of that name whose labels match.
sub alert_state
{
	my ($name, %labels) = @_;
	for my $a (alerts($name))
	{
		next if grep { ($a->{labels}{$_} // '') ne $labels{$_} } keys %labels;
		return $a->{state};
	}
	return '';
}

# A target's expression as Grafana would send it with every variable on "All":
# $var, ${var} and [[var]] become a regular expression that matches every value, and
# $__rate_interval a window of a minute (30 scrapes here).
sub grafana_substitute
{
	my ($expr) = @_;
	$expr =~ s/\$__rate_interval|\$\{__rate_interval\}/1m/g;
	$expr =~ s/\$\{\w+(?::\w+)?\}|\[\[\w+\]\]|\$\w+/.+/g;
	return $expr;
}

END
{
	local $?;
	eval { $_->kill_kill(grace => 5) } for @SERVERS;
}
