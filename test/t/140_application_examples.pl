#!/usr/bin/perl
# The application examples (examples/), run as a user would run them: examples/setup.sql
# by an administrator, then each program (Python with SQLAlchemy, Node.js with pg) as the
# least-privileged application role it documents, against a real cluster and the webhook
# receiver. Every third upload fails after its enqueue (the database refuses its task).
#
#  - setup.sql grants the role what docs/operations.md, Privileges lists and no more;
#  - without the send right the example's uploads fail and nothing is sent or saved
#    (so the examples really connect as the role they are given);
#  - each committed upload arrives exactly once (by source_file_id, with the id as
#    webhook-id) and its rows exist; each failed one enqueued (it took a message id) yet
#    never arrives and left no row; the outbox ends empty.
#
# Needs /usr/bin/python3 with python3-sqlalchemy and python3-psycopg2 (Debian), and node
# with npm; examples/node-pg/node_modules is installed with `npm ci` when missing.
use strict;
use warnings;

use Cwd qw(abs_path);
use Encode ();
use File::Copy qw(copy);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use IPC::Run ();
use JSON::PP ();
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $EXAMPLES = abs_path("$FindBin::RealBin/../../examples");
# Debian's python3-sqlalchemy and python3-psycopg2 are installed for Debian's python3,
# whatever other python3 comes first in PATH.
my $PYTHON  = '/usr/bin/python3';
my $UPLOADS = 12;
my $FAIL_EVERY = 3;

# Runs a command with extra environment, bounded in time; returns (exit code, stdout, stderr).
sub run_cmd
{
	my ($cmd, %opt) = @_;
	my ($out, $err) = ('', '');
	local %ENV = (%ENV, %{ $opt{env} // {} });
	delete $ENV{$_} for grep { !defined $ENV{$_} } keys %ENV;
	my $ok = eval {
		IPC::Run::run($cmd, '<', \undef, '>', \$out, '2>', \$err,
			(defined $opt{dir} ? (init => sub { chdir $opt{dir} or die "chdir $opt{dir}: $!" }) : ()),
			IPC::Run::timeout($opt{timeout} // 120));
		1;
	};
	return (-1, $out, "$err$@") unless $ok;
	return ($? >> 8, $out, $err);
}

# Missing tools fail the test, loudly: a run that skipped the examples would prove nothing.
{
	my ($rc, undef, $err) = run_cmd([ $PYTHON, '-c', 'import sqlalchemy, psycopg2' ], timeout => 60);
	die "140_application_examples: $PYTHON cannot import sqlalchemy and psycopg2 "
	  . "(apt-get install -y python3-sqlalchemy python3-psycopg2): $err\n"
	  if $rc != 0;
	for my $tool ([ 'node', '--version' ], [ 'npm', '--version' ])
	{
		($rc, undef, $err) = eval { run_cmd($tool, timeout => 60) };
		die "140_application_examples: '$tool->[0]' is not installed (apt-get install -y nodejs npm): "
		  . ($err // $@) . "\n"
		  if !defined $rc || $rc != 0;
	}
}

# The Node example runs where its node_modules is: the checkout's, or a copy installed
# with `npm ci` from the committed lock file (the checkout may not be ours to write to).
my $node_dir = "$EXAMPLES/node-pg";
unless (-f "$node_dir/node_modules/pg/package.json")
{
	my $copy = PostgreSQL::Test::Utils::tempdir('node-pg');
	copy("$node_dir/$_", "$copy/$_") or die "copy $_: $!"
	  for qw(package.json package-lock.json upload-service.js);
	my %env;
	$env{npm_config_cache} = "$copy/.npm-cache" unless defined $ENV{HOME} && -w $ENV{HOME};
	my ($rc, $out, $err) = run_cmd([ 'npm', 'ci', '--no-audit', '--no-fund', '--prefer-offline' ],
		dir => $copy, env => \%env, timeout => 180);
	die "140_application_examples: npm ci in a copy of examples/node-pg failed ($rc):\n$out$err\n"
	  if $rc != 0;
	$node_dir = $copy;
}

my $node = new_outbox_node('examples');
my $recv = start_receiver();
my $PATH = '/hooks/documents';


# ---------------------------------------------------------------------------
# 1. The administrator's part: setup.sql with the application role.

sql($node, 'CREATE ROLE uploads_app LOGIN');
{
	open my $fh, '<', "$EXAMPLES/setup.sql" or die "examples/setup.sql: $!";
	local $/;
	my $setup = <$fh>;
	$node->safe_psql('postgres', $setup,
		extra_params => [ '-v', 'producer=uploads_app', '-v', 'webhook_url=' . $recv->url($PATH) ]);
}
is( sql($node, q{SELECT rolsuper OR rolcreaterole OR rolcreatedb OR rolbypassrls FROM pg_roles
           WHERE rolname = 'uploads_app'}),
	'f', 'the application role is no superuser and has no role attribute');
is( sql($node, q{SELECT has_schema_privilege('uploads_app', 'outbox', 'USAGE')
             AND has_function_privilege('uploads_app',
                   'outbox.enqueue(text, jsonb, text, jsonb, text, text, timestamptz)', 'EXECUTE')
             AND has_table_privilege('uploads_app', 'source_files', 'INSERT')}),
	't', 'setup.sql grants the documented producer rights and its own tables');
is( sql($node, q{SELECT has_table_privilege('uploads_app', 'outbox.messages', 'SELECT')
             OR has_table_privilege('uploads_app', 'outbox.history', 'SELECT')
             OR has_table_privilege('uploads_app', 'dlq.dead_letters', 'SELECT')
             OR has_schema_privilege('uploads_app', 'dlq', 'USAGE')
             OR has_function_privilege('uploads_app', 'outbox.grant_send(text, name)', 'EXECUTE')
             OR has_table_privilege('uploads_app', 'source_files', 'DELETE')}),
	'f', '... and nothing more: it reads no message, grants nothing, deletes no upload');
is(sql($node, q{SELECT string_agg(role::text, ',') FROM outbox.endpoint_senders WHERE endpoint = 'documents'}),
	'uploads_app', 'the send right on "documents" is the application role\'s alone');

my %libpq = (PGHOST => $node->host, PGPORT => $node->port, PGDATABASE => 'postgres',
	PGUSER => 'uploads_app', PGPASSWORD => undef, PGSERVICE => undef, DATABASE_URL => undef);

sub run_python
{
	my ($user, @args) = @_;
	return run_cmd([ $PYTHON, "$EXAMPLES/python-sqlalchemy/upload_service.py", @args ],
		env => { %libpq, PGUSER => $user });
}

sub run_node_example
{
	my ($user, @args) = @_;
	return run_cmd([ 'node', "$node_dir/upload-service.js", @args ],
		dir => $node_dir, env => { %libpq, PGUSER => $user });
}

sub message_seq
{
	return sql($node, q{SELECT coalesce(last_value, 0)
                   FROM pg_sequences WHERE schemaname = 'outbox' AND sequencename =
                        (parse_ident(pg_get_serial_sequence('outbox.messages', 'id')))[2]});
}

# ---------------------------------------------------------------------------
# 2. A role with the same grants but no send right: the example fails, nothing leaks.

sql($node, q{CREATE ROLE uploads_nosend LOGIN;
      GRANT SELECT, INSERT ON source_files, tasks TO uploads_nosend;
      GRANT USAGE ON SCHEMA outbox TO uploads_nosend;
      GRANT EXECUTE ON FUNCTION outbox.enqueue(text, jsonb, text, jsonb, text, text, timestamptz)
        TO uploads_nosend;});
my ($rc, $out, $err) = run_python('uploads_nosend', '--uploads', 2, '--prefix', 'denied');
isnt($rc, 0, 'without the send right the Python example reports its failed uploads');
like($out, qr/rolled back denied-001\.pdf: .*permission denied/,
	'... refused by the send-right check') or diag("stdout:\n$out\nstderr:\n$err");
($rc, $out, $err) = run_node_example('uploads_nosend', '--uploads', 2, '--prefix', 'denied');
isnt($rc, 0, 'without the send right the Node example reports its failed uploads');
like($out, qr/rolled back denied-001\.pdf: .*permission denied/,
	'... refused by the send-right check') or diag("stdout:\n$out\nstderr:\n$err");
is(sql($node, q{SELECT count(*) FROM source_files WHERE filename LIKE 'denied-%'}), '0',
	'... and no row of theirs was saved');

# ---------------------------------------------------------------------------
# 3. Each example, as the application role: 12 uploads, every third one failing after
#    its enqueue.

my (%seq_before, %seq_after);
for my $ex ([ 'py', \&run_python, 'Python' ], [ 'node', \&run_node_example, 'Node' ])
{
	my ($prefix, $run, $label) = @$ex;
	$seq_before{$prefix} = message_seq();
	($rc, $out, $err) = $run->('uploads_app', '--uploads', $UPLOADS, '--fail-every', $FAIL_EVERY,
		'--prefix', $prefix);
	is($rc, 0, "$label example: exit 0") or diag("stdout:\n$out\nstderr:\n$err");
	$seq_after{$prefix} = message_seq();
	my $doomed = int($UPLOADS / $FAIL_EVERY);
	like($out, qr/^@{[ $UPLOADS - $doomed ]} committed, $doomed rolled back$/m,
		"$label example: its own account of the uploads");
	like($out, qr/^rolled back $prefix-003\.pdf: .*tasks_kind_check/m,
		"$label example: the failure is the task's, after the enqueue");
	# A sequence does not roll back: every upload, the failed ones too, took a message id
	# in its transaction, so the failed uploads did enqueue before they rolled back.
	is($seq_after{$prefix} - $seq_before{$prefix}, $UPLOADS,
		"$label example: all $UPLOADS uploads called enqueue");
}

# ---------------------------------------------------------------------------
# 4. What the receiver got, and the rows.

my $committed_per_example = $UPLOADS - int($UPLOADS / $FAIL_EVERY);
ok($recv->wait_requests($PATH, 2 * $committed_per_example), 'the committed uploads arrived');
ok(wait_sql($node, 'SELECT count(*) = 0 FROM outbox.messages'), 'the outbox is empty');
# Rolled-back messages never existed; still, give a stray request time to show up
# before the receiver's record is judged.
sleep(1.5);
my @requests = @{ $recv->requests };
is(scalar(grep { $_->{path} ne $PATH } @requests), 0, 'no request elsewhere than the endpoint');
my $json = JSON::PP->new->utf8;
my (%by_id, %by_file);
for my $r (@requests)
{
	my $p = eval { $json->decode(Encode::encode_utf8($r->{body})) } // {};
	push @{ $by_id{ $p->{source_file_id} // '' } }, $r;
	push @{ $by_file{ $p->{filename} // '' } }, $r;
}
is(scalar(@requests), 2 * $committed_per_example,
	"exactly $committed_per_example requests per example");

for my $prefix (qw(py node))
{
	my %saved = map { split /\|/ } split /\n/,
	  sql($node, qq{SELECT s.filename || '|' || s.id FROM source_files s
              JOIN tasks t ON t.source_file_id = s.id
             WHERE s.filename LIKE '$prefix-%' AND t.kind = 'extract_text'});
	my %history = map { split /\|/ } split /\n/,
	  sql($node, qq{SELECT payload->>'filename' || '|' || id FROM outbox.history
             WHERE endpoint = 'documents' AND payload->>'filename' LIKE '$prefix-%'});
	my (@wrong_rows, @wrong_requests, @wrong_ids);
	for my $n (1 .. $UPLOADS)
	{
		my $file = sprintf('%s-%03d.pdf', $prefix, $n);
		my $committed = $n % $FAIL_EVERY != 0;
		my $got = $by_file{$file} // [];
		if (!$committed)
		{
			push @wrong_rows, "$file saved" if exists $saved{$file};
			push @wrong_requests, "$file arrived " . scalar(@$got) . ' time(s)' if @$got;
			next;
		}
		push @wrong_rows, "$file not saved" unless defined $saved{$file};
		my $id = $saved{$file} // 'none';
		my $same = $by_id{$id} // [];
		if (@$same != 1 || @$got != 1)
		{
			push @wrong_requests, "$file (source_file_id $id) arrived " . scalar(@$same) . ' time(s)';
			next;
		}
		my $h = $same->[0]{headers};
		push @wrong_requests, "$file: webhook-id $h->{'webhook-id'}"
		  unless ($h->{'webhook-id'} // '') eq "source_file:$id:uploaded";
		push @wrong_requests, "$file: event type " . ($h->{'outbox-event-type'} // 'none')
		  unless ($h->{'outbox-event-type'} // '') eq 'source_file.uploaded';
		# Upload n took the n-th message id of its run: the ids of the failed ones are the gaps.
		push @wrong_ids, "$file has message id " . ($history{$file} // 'none')
		  unless ($history{$file} // -1) == $seq_before{$prefix} + $n;
	}
	is_deeply(\@wrong_requests, [],
		"$prefix: every committed upload arrived exactly once (by source_file_id, as webhook-id), "
		  . 'no rolled-back one arrived');
	is_deeply(\@wrong_rows, [], "$prefix: committed uploads have their rows, rolled-back ones none");
	is_deeply(\@wrong_ids, [],
		"$prefix: the delivered messages are the committed uploads' own enqueues");
	is(sql($node, qq{SELECT count(*) FROM source_files WHERE filename LIKE '$prefix-%'}),
		$committed_per_example, "$prefix: no other source_files row");
}
is(sql($node, 'SELECT count(*) FROM dlq.dead_letters'), '0', 'nothing was dead-lettered');

$recv->stop;
$node->stop;
done_testing();
