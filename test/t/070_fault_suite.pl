#!/usr/bin/perl
# The fault suite (issue 6): the at-least-once contract under load and faults.
#
# The invariant every scenario checks, decided only from evidence outside the
# extension:
#   received == EXACTLY the committed enqueues, and nothing is dead-lettered,
# where "received" is a distinct webhook-id whose 2xx the worker actually got (the
# receiver logs when it finished writing an answer while the connection was still
# open; a request whose client timed out first does not count, whatever the rule
# planned), and "committed" is what the producers saw COMMIT succeed for, plus the
# transactions whose COMMIT reply was lost and that PostgreSQL itself reports as
# committed (below).  The receiver always recovers and max_attempts is 50, so a
# dead letter is a failure, not an excuse.  Nothing of a rolled-back (or failed)
# transaction may appear anywhere: receiver, outbox.messages, outbox.history,
# dlq.dead_letters.  Duplicates are allowed (at-least-once) and reported.
#
# The outbox is the queue (outbox.messages: pending, or in flight while a claim of the
# worker lists the message) and the history (outbox.history, kept for
# pg_outbox.sent_retention, a day by default): "sent" is a row that left the queue for
# the history, in the transaction that recorded its delivery.  No row may be sent
# without a 2xx at the receiver, nor before that 2xx (history.sent_at against the
# receiver's answered_at), and no message may be in the outbox twice.
#
#  1-3  8 producers for 30 s (random COMMIT/ROLLBACK, 1-5 messages per transaction)
#       against /hooks/load while the worker delivers; meanwhile the worker is
#       killed with SIGKILL 3 times, the postmaster is stopped 'immediate' once and
#       restarted, the receiver is down for 15 s, then answers slower than the
#       endpoint's timeout for 4 s, and pg_outbox.batch_size/max_concurrency are
#       changed with ALTER SYSTEM + pg_reload_conf() (same worker pid afterwards).
#  6    failures inside the worker's own transactions: lock_timeout set for the
#       worker's database + an ACCESS EXCLUSIVE lock held on outbox.messages, then an
#       injected error in the settle (a trigger on the move of a delivered message
#       into outbox.history raising disk_full): the worker logs
#       "pg_outbox worker:" errors, does not die, and loses nothing.
#  4    DROP EXTENSION / CREATE EXTENSION while the worker runs: (a) idle: the
#       worker exits, a new one serves the re-created outbox; (b) while requests
#       are in flight: the re-created outbox reuses their ids for new messages, which
#       must still arrive (a stale answer must not settle a new row); (c) the same
#       with the DROP and the CREATE in one transaction, so that no transaction of the
#       worker sees the extension missing: only its check of the extension at the start
#       of each transaction tells the new tables from the old.
#  5    pg_outbox.database names a database that does not exist at server start: the
#       server stays up, the launcher says so once (no worker FATAL, no restart
#       loop), and after CREATE DATABASE + CREATE EXTENSION a worker serves it.
#
# A COMMIT whose reply was lost (crash, immediate stop; a SIGKILLed worker makes the
# postmaster restart every backend too) is ambiguous.  Each producer transaction
# records txid_current() (returned with its enqueue ids) and writes a row of its own
# into the test's ledger table (the business write the outbox pattern pairs the
# message with); afterwards txid_status() decides its fate, never the outbox.  Crash
# recovery may hand out again an xid whose WAL never reached disk, so "committed" is
# believed only together with the ledger row carrying that xid; an xid that
# txid_status() calls aborted while its ledger row exists fails the test.  Ids alone
# do not identify a message across a crash either (recovery may hand out again the
# ids of transactions that did not commit), so every payload {"producer", "txn", "i"}
# is checked against what its id was enqueued with.
#
# The worker ignores statement_timeout (PostgreSQL arms it only for client
# statements, not for a background worker's SPI), so scenario 6 relies on
# lock_timeout, which a background worker does honour, and on the injected error.
#
# PG_OUTBOX_SOAK_SECONDS=N (test/soak.sh): the load phase lasts N seconds, and the
# fault cycle of 1-3 is repeated for as long as it fits in it.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use JSON::PP;
use POSIX ();
use Time::HiRes qw(time sleep);

my $SOAK      = $ENV{PG_OUTBOX_SOAK_SECONDS};
my $LOAD_S    = ($SOAK && $SOAK =~ /^\d+$/ && $SOAK >= 30) ? $SOAK : 30;
my $CYCLE_S   = 30;                     # one fault cycle of scenarios 1-3
my $DRAIN_S   = 90;                     # bound on "everything eventually arrives"
my $PRODUCERS = 8;
my $TX_PAUSE  = $ENV{PG_OUTBOX_FAULT_TX_PAUSE} // 0.08;    # s between a producer's transactions
my $T_START   = time;

# The test's own sessions must not inherit the timeouts scenario 6 sets for the
# worker's database (ALTER DATABASE ... SET); libpq passes these at connect.
$ENV{PGOPTIONS} = '-c lock_timeout=0 -c statement_timeout=0';

my $json = JSON::PP->new->utf8->canonical;
my @SUMMARY;    # [scenario, committed, received, dead-lettered, lost, duplicates]

# ---------------------------------------------------------------------------
# nodes and receiver

# Scenario 5's node starts first: its worker's FATALs accumulate while the rest runs.
my $nodb = new_outbox_node('nodb', 'pg_outbox.database' => 'fault_appdb');

my $node = new_outbox_node(
	'fault',
	'pg_outbox.max_attempts'      => 50,
	'pg_outbox.backoff_base'      => '100ms',
	'pg_outbox.backoff_max'       => '2s',
	'pg_outbox.breaker_threshold' => 10,
	'restart_after_crash'         => 'on',
	'max_connections'             => 60);
my $recv = start_receiver(max_seconds => $LOAD_S + 1800);
my $rlog = RecvLog->new($recv->log_file);

$node->safe_psql('postgres', 'CREATE EXTENSION pg_outbox');
# The producers' business table: one row per transaction, with its xid.
$node->safe_psql('postgres',
	'CREATE TABLE public.fault_ledger (producer int, txn int, xid bigint NOT NULL, PRIMARY KEY (producer, txn))');
$node->safe_psql('postgres',
	"SELECT outbox.create_endpoint('load', url => '" . $recv->url('/hooks/load') . "', timeout_ms => 500)");
$recv->add_rule(path => '/hooks/load', delay_ms => 2);

# ---------------------------------------------------------------------------
# helpers: SQL that tolerates a server in crash recovery, the worker's pid

# Runs $sql until it succeeds (the server may be restarting); returns stdout.
sub sql_retry
{
	my ($n, $sql, $timeout, $db) = @_;
	my $out;
	my $last_err = '';
	my $ok = wait_until(
		sub {
			my ($o, $e) = ('', '');
			my $rc = $n->psql($db // 'postgres', $sql,
				stdout => \$o, stderr => \$e, on_error_stop => 1);
			$last_err = $e;
			return 0 unless $rc == 0;
			$out = $o;
			return 1;
		},
		$timeout // $PostgreSQL::Test::Utils::timeout_default,
		"sql: $sql");
	die "SQL did not succeed within " . ($timeout // $PostgreSQL::Test::Utils::timeout_default) . " s: $sql\n$last_err" unless $ok;
	return $out;
}

# Waits for a worker whose pid differs from $old (any worker when $old is undef).

sub first_n { my ($k, @l) = @_; return join(' ', @l[0 .. ($#l < $k - 1 ? $#l : $k - 1)]) }

# ---------------------------------------------------------------------------
# producers: forked children, each running chunks of transactions through psql.
#
# A chunk is one psql -f script (ON_ERROR_STOP) of up to 20 transactions:
#   BEGIN; INSERT INTO fault_ledger (<p>, <txn>, txid_current());
#   SELECT 'E|<txn>|' || <ids of its enqueues> || '|' || txid_current();
#   COMMIT; \echo C|<txn>
# (or ROLLBACK; \echo R|<txn>).  "C" is printed only after COMMIT returned success.
# Per transaction the producer records (tab-separated, in its result file):
#   C txn ids xid   committed            R txn ids xid   rolled back
#   A txn ids xid   COMMIT sent, reply lost (ambiguous: resolved by txid_status)
#   F txn           failed before its enqueue returned (never committed, ids unknown)

sub start_producers
{
	my (%o) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir("producers_$o{tag}");
	chmod 0755, $dir;
	my @kids;
	my $stop_at = time + $o{seconds};
	for my $k (1 .. $o{count})
	{
		my $p   = $o{first_id} + $k - 1;
		my $out = "$dir/producer_$p.tsv";
		my $pid = fork();
		die "fork: $!" unless defined $pid;
		if ($pid == 0)
		{
			my $rc = eval { producer_main($p, $out, $stop_at, \%o); 1 } ? 0 : 1;
			warn $@ if $rc;
			POSIX::_exit($rc);    # never run the parent's END blocks
		}
		push @kids, { pid => $pid, p => $p, out => $out };
	}
	return { kids => \@kids, tag => $o{tag}, endpoint => $o{endpoint} };
}

sub producer_main
{
	my ($p, $out, $stop_at, $o) = @_;
	srand($$ ^ int(time * 1000));
	open(STDERR, '>>', "$out.err") or die "stderr: $!";
	my ($host, $port) = ($o->{node}->host, $o->{node}->port);
	my $script = "$out.sql";
	my $txn    = 0;
	my $pause  = $o->{pause} // 0;
	while (time < $stop_at)
	{
		my %plan;    # txn => 'commit' | 'rollback'
		my $sql = '';
		for (1 .. 20)
		{
			$txn++;
			my $n      = 1 + int(rand($o->{max_per_tx} // 5));
			my $commit = rand() >= ($o->{rollback_ratio} // 0.3);
			$plan{$txn} = $commit ? 'commit' : 'rollback';
			$sql .= "BEGIN;\n"
			  . "INSERT INTO public.fault_ledger VALUES ($p, $txn, txid_current());\n"
			  . "SELECT 'E|$txn|' || string_agg(outbox.enqueue('$o->{endpoint}', "
			  . "jsonb_build_object('producer', $p, 'txn', $txn, 'i', g), "
			  . "event_type => 'fault.$o->{tag}')::text, ',' ORDER BY g) || '|' || txid_current() "
			  . "FROM generate_series(1, $n) g;\n"
			  . ($commit ? "COMMIT;\n\\echo C|$txn\n" : "ROLLBACK;\n\\echo R|$txn\n");
			$sql .= sprintf("SELECT pg_sleep(%.3f);\n", $pause * (0.5 + rand())) if $pause > 0;
		}
		open(my $fh, '>', $script) or die "$script: $!";
		print $fh $sql;
		close $fh;

		my (%ids, %xid, %done);
		my $started = time;
		if (open(my $ps, '-|', 'psql', '-X', '-A', '-t', '-q', '-v', 'ON_ERROR_STOP=1',
				'-h', $host, '-p', $port, '-d', 'postgres', '-f', $script))
		{
			while (my $line = <$ps>)
			{
				chomp $line;
				if    ($line =~ /^E\|(\d+)\|([\d,]+)\|(\d+)$/) { $ids{$1} = $2; $xid{$1} = $3 }
				elsif ($line =~ /^([CR])\|(\d+)$/)      { $done{$2} = $1 }
			}
			close $ps;    # $? = psql's status
		}
		my $failed = $? != 0;

		open(my $res, '>>', $out) or die "$out: $!";
		for my $t (sort { $a <=> $b } keys %plan)
		{
			if    (!defined $ids{$t})       { print $res "F\t$t\n" }
			elsif ($done{$t})               { print $res "$done{$t}\t$t\t$ids{$t}\t$xid{$t}\n" }
			elsif ($plan{$t} eq 'rollback') { print $res "R\t$t\t$ids{$t}\t$xid{$t}\n" }    # never COMMITted
			else                            { print $res "A\t$t\t$ids{$t}\t$xid{$t}\n" }
		}
		close $res;
		# The server is down or restarting: retry a little later.
		sleep(0.25) if $failed;
	}
	return;
}

# Waits for the producers and collects what they recorded.  Returns a hash:
#   committed => {id => "p/t/i"}, rolled => {id => 1} (ids returned to rolled-back
#   transactions), ambiguous => {"p/t" => [ids]}, xid => {"p/t" => xid},
#   committed_tx / rolled_tx => {"p/t" => 1} (rolled_tx includes the failed ones),
#   tx => {C => n, R => n, A => n, F => n}
sub collect_producers
{
	my ($prod) = @_;
	for my $k (@{ $prod->{kids} })
	{
		waitpid($k->{pid}, 0);
		is($? >> 8, 0, "$prod->{tag}: producer $k->{p} exited cleanly")
		  or diag(slurp_file("$k->{out}.err"));
	}
	my %r = (committed => {}, rolled => {}, ambiguous => {}, xid => {}, committed_tx => {}, rolled_tx => {},
		tx => { C => 0, R => 0, A => 0, F => 0 });
	for my $k (@{ $prod->{kids} })
	{
		open(my $fh, '<', $k->{out}) or next;
		while (my $line = <$fh>)
		{
			chomp $line;
			my ($kind, $t, $ids, $xid) = split /\t/, $line;
			$r{tx}{$kind}++;
			if ($kind eq 'F') { $r{rolled_tx}{"$k->{p}/$t"} = 1; next }
			$r{xid}{"$k->{p}/$t"} = $xid;
			my @ids = split /,/, $ids;
			if ($kind eq 'C')
			{
				$r{committed}{ $ids[$_] } = "$k->{p}/$t/" . ($_ + 1) for 0 .. $#ids;
				$r{committed_tx}{"$k->{p}/$t"} = 1;
			}
			elsif ($kind eq 'R')
			{
				$r{rolled}{$_} = 1 for @ids;
				$r{rolled_tx}{"$k->{p}/$t"} = 1;
			}
			else { $r{ambiguous}{"$k->{p}/$t"} = \@ids }
		}
		close $fh;
	}
	return \%r;
}

# Decides every transaction's fate from PostgreSQL's own record, never from the
# outbox: txid_status() of the xid it reported, together with its ledger row.
#   committed + ledger row with that xid  -> committed
#   aborted / never assigned + no ledger   -> rolled back
#   committed + no ledger row              -> the xid was handed out again after a
#                                             crash (its WAL never reached disk):
#                                             rolled back, and counted
#   anything else                          -> a contradiction: fails the test
# The transactions whose COMMIT returned ("C") and those that rolled back ("R") are
# checked the same way: a "C" that PostgreSQL does not call committed fails too.
sub resolve_ambiguous
{
	my ($n, $r, $label) = @_;
	my @keys = sort keys %{ $r->{xid} };
	my %fate;
	while (my @chunk = splice(@keys, 0, 2000))
	{
		my $values = join ',', map { my ($p, $t) = split m{/}; "($p,$t,$r->{xid}{$_}::bigint)" } @chunk;
		for (split /\n/, sql_retry($n, qq{
			SELECT v.p || '/' || v.t,
			       CASE WHEN v.x < txid_snapshot_xmax(txid_current_snapshot())
			            THEN txid_status(v.x) ELSE 'never assigned' END,
			       l.xid IS NOT DISTINCT FROM v.x
			  FROM (VALUES $values) AS v(p, t, x)
			  LEFT JOIN public.fault_ledger l ON l.producer = v.p AND l.txn = v.t}))
		{
			my ($key, $status, $ledger) = split /\|/;
			$fate{$key} = [ $status // '', $ledger eq 't' ];
		}
	}
	my ($as_committed, $as_rolled, $reused, @contradiction) = (0, 0, 0);
	for my $key (sort keys %{ $r->{xid} })
	{
		my ($status, $ledger) = @{ $fate{$key} // [ 'unknown', 0 ] };
		my $ambiguous = exists $r->{ambiguous}{$key};
		my $committed = $status eq 'committed' && $ledger;
		my $rolled = ($status eq 'aborted' || $status eq 'never assigned') && !$ledger;
		$reused++ if $status eq 'committed' && !$ledger;
		$rolled ||= $status eq 'committed' && !$ledger;
		if (!$ambiguous)
		{
			my $want = $r->{committed_tx}{$key} ? 'committed' : 'rolled back';
			push @contradiction, "$key: COMMIT/ROLLBACK said $want, txid_status $status, ledger " . ($ledger ? 'yes' : 'no')
			  unless $want eq 'committed' ? $committed : $rolled;
			next;
		}
		my @ids = @{ $r->{ambiguous}{$key} };
		if ($committed)
		{
			$as_committed++;
			$r->{committed}{ $ids[$_] } = "$key/" . ($_ + 1) for 0 .. $#ids;
			$r->{committed_tx}{$key} = 1;
		}
		elsif ($rolled)
		{
			$as_rolled++;
			$r->{rolled_tx}{$key} = 1;
			$r->{rolled}{$_} = 1 for @ids;
		}
		else { push @contradiction, "$key: txid_status $status, ledger " . ($ledger ? 'yes' : 'no') }
	}
	is(scalar @contradiction, 0, "$label: every transaction's fate is decided by txid_status() and its ledger row")
	  or diag("contradictions: " . first_n(10, @contradiction));
	note(sprintf '%s: transactions committed=%d rolled_back=%d ambiguous=%d (txid_status: %d committed, %d not;'
		  . ' xids handed out again after a crash: %d) failed_before_enqueue=%d',
		$label, $r->{tx}{C}, $r->{tx}{R}, scalar(keys %{ $r->{ambiguous} }), $as_committed, $as_rolled,
		$reused, $r->{tx}{F});
	return;
}

# ---------------------------------------------------------------------------
# the invariant

# The endpoint's rows: outbox {id => status} (the queue's rows 'pending' or
# 'in_flight', the history's 'sent'), when each sent one was sent {id => epoch}, the
# ids found in the outbox more than once [ids], open and all dead letters {id => 1},
# and the payload key "producer/txn/i" of every row and dead letter {id => [keys]}.
# The queue and the history are read in one statement (one snapshot), so a message
# that moves between them meanwhile is seen once.
sub db_state
{
	my ($n, $endpoint, $db) = @_;
	my $key = q{coalesce(payload->>'producer', '') || '/' || coalesce(payload->>'txn', '') || '/' || coalesce(payload->>'i', '')};
	my (%rows, %sent_at, @twice, %dlq_open, %dlq_any, %payload);
	for (split /\n/, sql_retry($n, qq{
			SELECT m.id,
			       CASE WHEN EXISTS (SELECT FROM outbox.claims c WHERE m.id = ANY (c.message_ids))
			            THEN 'in_flight' ELSE 'pending' END, '', $key
			  FROM outbox.messages m WHERE m.endpoint = '$endpoint'
			UNION ALL
			SELECT h.id, 'sent', extract(epoch FROM h.sent_at)::text, $key
			  FROM outbox.history h WHERE h.endpoint = '$endpoint'}, undef, $db))
	{
		my ($id, $status, $at, $k) = split /\|/;
		push @twice, $id if exists $rows{$id};
		$rows{$id} = $status;
		$sent_at{$id} = $at if $status eq 'sent';
		push @{ $payload{$id} }, $k;
	}
	for (split /\n/, sql_retry($n,
			"SELECT message_id, requeued_at IS NULL AND discarded_at IS NULL, $key FROM dlq.dead_letters"
			  . " WHERE endpoint = '$endpoint'", undef, $db))
	{
		my ($id, $open, $k) = split /\|/;
		$dlq_any{$id} = 1;
		$dlq_open{$id} = 1 if $open eq 't';
		push @{ $payload{$id} }, $k;
	}
	return (\%rows, \%sent_at, \@twice, \%dlq_open, \%dlq_any, \%payload);
}

# Committed ids whose 2xx the worker has not received (a dead letter is no excuse).
sub missing
{
	my ($committed, $path) = @_;
	$rlog->poll;
	my $seen = $rlog->{by}{$path} // {};
	return grep { !($seen->{$_} && $seen->{$_}{ok}) } keys %$committed;
}

# Bounded wait until everything committed arrived and no row of the endpoint is
# pending or in flight, i.e. left in the queue (or nothing is left to deliver while
# messages are missing).
sub wait_drained
{
	my ($n, $committed, $endpoint, $path, $label, $timeout, $db) = @_;
	my $t0 = time;
	my ($left, $stuck_since, $gave_up);
	my $ok = wait_until(
		sub {
			my $busy = sql_retry($n,
				"SELECT count(*) FROM outbox.messages WHERE endpoint = '$endpoint'", undef, $db);
			my @m = missing($committed, $path);
			$left = scalar(@m) . " missing, $busy not sent";
			# Nothing left to deliver but messages missing: they are lost, the
			# worker will not send them again (30 s of grace: the receiver's
			# record of an answer can trail the row).
			if (@m && $busy == 0) { $stuck_since //= time }
			else                  { undef $stuck_since }
			if (defined $stuck_since && time - $stuck_since > 30) { $gave_up = 1; return 1 }
			sleep(0.4) if @m || $busy;
			return !@m && $busy == 0;
		},
		$timeout // $DRAIN_S,
		"$label: drain");
	$ok = 0 if $gave_up;
	ok($ok, "$label: everything committed arrived within " . ($timeout // $DRAIN_S) . ' s')
	  or diag("$label: still $left" . ($gave_up ? ' (nothing left pending: given up)' : ''));
	note(sprintf '%s: drained %.1f s after the load', $label, time - $t0);
	return $ok;
}

# The invariant, asserted; returns the summary row.  Messages are identified by id
# (webhook-id msg_<instance>_<id>) AND, with payload_check, by their payload "producer/txn/i":
# an id may be handed out again after crash recovery, so a rolled-back message is
# recognised by its payload, wherever it appears.
sub check_invariant
{
	my (%a) = @_;
	my ($n, $label, $endpoint, $path, $committed, $rolled) =
	  @a{qw(node label endpoint path committed rolled)};
	my $pc = $a{payload_check};
	my %committed_tx;
	$committed_tx{ $_ =~ s{/[^/]*$}{}r } = 1 for values %$committed;
	$rlog->poll;
	my ($rows, $sent_at, $twice, $dlq_open, $dlq_any, $payload) = db_state($n, $endpoint, $a{db});
	my $seen = $rlog->{by}{$path} // {};

	my (%received, @foreign_recv, @bad_payload, @uncommitted_payload);
	my $dups = 0;
	# A payload key that is not its id's: a message of a transaction that did not
	# commit (or a mix-up of payloads).
	my $judge = sub {
		my ($where, $id, $key) = @_;
		return if !exists $committed->{$id} || $key eq $committed->{$id};
		my $tx = $key =~ s{/[^/]*$}{}r;
		if ($committed_tx{$tx}) { push @bad_payload, "$where $id=$key (expected $committed->{$id})" }
		else { push @uncommitted_payload, "$where $id=$key" }
	};
	for my $wid (keys %$seen)
	{
		my $s = $seen->{$wid};
		if (!exists $committed->{$wid}) { push @foreign_recv, $wid; next }
		if ($pc)
		{
			for my $body (keys %{ $s->{bodies} })
			{
				my $b = eval { $json->decode($body) } // {};
				$judge->('receiver', $wid, join '/', map { $b->{$_} // '' } qw(producer txn i));
			}
		}
		next unless $s->{ok};
		$received{$wid} = 1;
		$dups += $s->{ok} - 1;
	}
	if ($pc)
	{
		for my $id (keys %$payload) { $judge->('db', $id, $_) for @{ $payload->{$id} } }
	}
	my @lost        = sort { $a <=> $b } grep { !$received{$_} } keys %$committed;
	my @foreign_row = sort { $a <=> $b } grep { !exists $committed->{$_} } keys %$rows;
	my @foreign_dlq = sort { $a <=> $b } grep { !exists $committed->{$_} } keys %$dlq_any;
	# ids of rolled-back transactions that no committed message got again
	my @rolled_ids = sort { $a <=> $b }
	  grep { !exists $committed->{$_} && ($seen->{$_} || $rows->{$_} || $dlq_any->{$_}) } keys %{ $rolled // {} };
	my @not_in_db   = sort { $a <=> $b } grep { !$rows->{$_} && !$dlq_any->{$_} } keys %$committed;
	my @not_sent    = sort { $a <=> $b } grep { $rows->{$_} ne 'sent' } keys %$rows;
	my @sent_no_2xx = sort { $a <=> $b } grep { $rows->{$_} eq 'sent' && !$received{$_} } keys %$rows;
	# sent_at is the settle transaction's time; the receiver's answered_at is when it
	# began to write its first 2xx for the id (no client can have had it earlier).
	# Both clocks are this machine's; 1 us covers the rounding of the two floats.
	my @sent_early  = sort { $a <=> $b }
	  grep { $received{$_} && $sent_at->{$_} < $seen->{$_}{first_ok_at} - 1e-6 } keys %$sent_at;
	my @both        = grep { $received{$_} } keys %$dlq_open;
	my $dead        = scalar keys %$dlq_any;
	my @reused      = grep { exists $committed->{$_} } keys %{ $rolled // {} };

	is(scalar @lost, 0, "$label: every committed message's 2xx reached the worker")
	  or diag("$label: lost " . scalar(@lost) . ': ' . first_n(20, @lost)
		  . '; of them dead-lettered: ' . scalar(grep { $dlq_any->{$_} } @lost));
	is($dead, 0, "$label: nothing dead-lettered (the receiver always recovers in time)")
	  or diag("$label: dead letters: " . first_n(20, sort { $a <=> $b } keys %$dlq_any));
	is(scalar @foreign_recv, 0, "$label: the receiver got nothing but committed messages' ids")
	  or diag("$label: unexpected webhook ids: " . first_n(20, sort { $a <=> $b } @foreign_recv));
	is(scalar(@rolled_ids) + scalar(@uncommitted_payload), 0,
		"$label: nothing of a rolled-back or failed transaction in the receiver, outbox or DLQ")
	  or diag("$label: rolled-back ids: " . first_n(20, @rolled_ids)
		  . '; payloads of uncommitted transactions: ' . first_n(20, @uncommitted_payload));
	is(scalar(@foreign_row) + scalar(@foreign_dlq), 0,
		"$label: outbox and DLQ hold only committed messages' ids")
	  or diag("$label: foreign rows: " . first_n(20, @foreign_row) . ' dlq: ' . first_n(20, @foreign_dlq));
	is(scalar @not_in_db, 0, "$label: every committed message is in the outbox or the DLQ")
	  or diag("$label: vanished: " . first_n(20, @not_in_db));
	is(scalar @not_sent, 0, "$label: no row left pending or in flight")
	  or diag("$label: not sent: " . first_n(20, map { "$_=$rows->{$_}" } @not_sent));
	is(scalar @sent_no_2xx, 0, "$label: no row marked sent without a 2xx at the receiver")
	  or diag("$label: sent without a 2xx: " . first_n(20, @sent_no_2xx));
	is(scalar @sent_early, 0, "$label: no row marked sent before its first 2xx at the receiver")
	  or diag("$label: sent before the 2xx: "
		  . first_n(20, map { sprintf '%d (sent_at %.6f, 2xx at %.6f)', $_, $sent_at->{$_}, $seen->{$_}{first_ok_at} }
			  @sent_early));
	is(scalar @$twice, 0, "$label: no message is in the outbox (queue and history) twice")
	  or diag("$label: ids found more than once: " . first_n(20, sort { $a <=> $b } @$twice));
	if ($pc)
	{
		is(scalar @bad_payload, 0, "$label: every id carries the payload it was enqueued with")
		  or diag("$label: " . first_n(10, @bad_payload));
	}
	my $total_requests = 0;
	$total_requests += $_->{n} for values %$seen;
	note(sprintf '%s: committed=%d received=%d dead_lettered=%d (also received: %d) lost=%d duplicates=%d requests=%d'
		  . ' ids_of_rolled_back_reused_after_crash=%d',
		$label, scalar(keys %$committed), scalar(keys %received), $dead, scalar(@both),
		scalar(@lost), $dups, $total_requests, scalar(@reused));
	my $row = [ $label, scalar(keys %$committed), scalar(keys %received), $dead, scalar(@lost), $dups ];
	push @SUMMARY, $row;
	return $row;
}

sub received_ok_count
{
	my ($path) = @_;
	$rlog->poll;
	my $seen = $rlog->{by}{$path} // {};
	return scalar grep { $_->{ok} } values %$seen;
}

# ===========================================================================
# Scenarios 1-3: producers under kill -9, immediate stop, receiver outage and
# slowness, and a configuration reload.

my $log_start = -s $node->logfile;
my $prod = start_producers(
	node     => $node,
	tag      => 'load',
	endpoint => 'load',
	count    => $PRODUCERS,
	first_id => 1,
	seconds  => $LOAD_S,
	pause    => $TX_PAUSE);
my $load_t0 = time;
my %faults = (kill9 => 0, immediate => 0, outage => 0, slow => 0, reload => 0);

sub at { my ($t0, $s) = @_; my $d = $t0 + $s - time; sleep($d) if $d > 0; return }

# SIGKILLs the worker.  With $mid_drain, first waits (bounded) until the receiver
# holds requests of the load that are not answered yet, and proves from the
# receiver's log that deliveries were in flight at the kill.
sub kill_worker
{
	my ($label, $mid_drain) = @_;
	my $pid = wait_for_worker($node, undef);
	if (!defined $pid) { fail("$label: no worker to kill"); return }
	if ($mid_drain)
	{
		ok(wait_until(sub { $rlog->in_flight_at('/hooks/load', time) > 0 }, undef, "$label: requests in flight"),
			"$label: requests of the load are in flight at the receiver before the kill");
	}
	my $t_kill = time;
	ok(kill('KILL', $pid), "$label: SIGKILL to worker $pid");
	if ($mid_drain)
	{
		my $n = $rlog->in_flight_at('/hooks/load', $t_kill);
		cmp_ok($n, '>', 0, "$label: the kill landed mid-drain (requests in flight at the receiver: $n)");
	}
	$faults{kill9}++;
	ok(defined wait_for_worker($node, $pid), "$label: a new worker runs after the SIGKILL");
	return;
}

my $cycle = 0;
while ($cycle == 0 || time - $load_t0 + $CYCLE_S <= $LOAD_S)
{
	$cycle++;
	my $c0 = time;
	my $L  = "cycle $cycle";

	# +1.5 s: SIGKILL the worker mid-load.
	at($c0, 1.5);
	kill_worker("$L kill -9 #1");

	# +3 s: ALTER SYSTEM batch_size / max_concurrency + reload, during load.
	at($c0, 3);
	{
		my ($bs, $mc) = $cycle % 2 ? (40, 8) : (500, 64);
		my $pid_before = wait_for_worker($node, undef);
		sql_retry($node, "ALTER SYSTEM SET pg_outbox.batch_size = $bs");
		sql_retry($node, "ALTER SYSTEM SET pg_outbox.max_concurrency = $mc");
		my $written = sql_retry($node, 'SELECT clock_timestamp()');
		sql_retry($node, 'SELECT pg_reload_conf()');
		ok(wait_until(sub { sql_retry($node, "SELECT config_loaded_at > '$written' FROM outbox.worker_status()") eq 't' }, undef, "$L: the worker's reload"),
			"$L reload: the worker re-read its configuration (worker_status().config_loaded_at)");
		my $before = received_ok_count('/hooks/load');
		ok(wait_until(sub { received_ok_count('/hooks/load') > $before + 20 }, undef, "$L: delivery after reload"),
			"$L reload: delivery continues after the reload");
		is(worker_pid($node), $pid_before, "$L reload: same worker pid after SIGHUP");
		is(sql_retry($node, 'SHOW pg_outbox.max_concurrency'), $mc, "$L reload: max_concurrency = $mc");
		$faults{reload}++;
	}

	# +6 s: the receiver goes away for 15 s.
	at($c0, 6);
	$recv->stop_listening;    # the port stays ours: connections are refused
	$faults{outage}++;
	note("$L: receiver stopped at +" . sprintf('%.1f', time - $c0) . ' s');

	# +9 s: SIGKILL during the outage (circuit open).
	at($c0, 9);
	kill_worker("$L kill -9 #2 (receiver down)");

	# +13 s: immediate stop of the postmaster, and start.
	at($c0, 13);
	{
		$node->stop('immediate');
		$node->start;
		$faults{immediate}++;
		ok(defined wait_for_worker($node, undef), "$L immediate stop: the worker runs again");
	}

	# +21 s: the receiver is back, but answers after 1.5 s (endpoint timeout 500 ms).
	at($c0, 21);
	$recv->restart;
	$recv->add_rule(path => '/hooks/load', delay_ms => 1500);
	$faults{slow}++;
	note("$L: receiver back (slow) at +" . sprintf('%.1f', time - $c0) . ' s');

	# +25 s: timely answers again, 400 ms each (within the 500 ms timeout), so that
	# the backlog drains for a while with requests held at the receiver.
	at($c0, 25);
	$recv->clear_rules;
	$recv->add_rule(path => '/hooks/load', delay_ms => 400);

	# +27 s: SIGKILL while the backlog drains, proven to land with requests in flight.
	at($c0, 27);
	kill_worker("$L kill -9 #3", 1);
	$recv->clear_rules;
	$recv->add_rule(path => '/hooks/load', delay_ms => 2);
	at($c0, $CYCLE_S);
}
note(sprintf 'load: %d fault cycle(s); faults: %s', $cycle,
	join(', ', map { "$_=$faults{$_}" } sort keys %faults));

my $load = collect_producers($prod);
sql_retry($node, 'ALTER SYSTEM RESET pg_outbox.batch_size');
sql_retry($node, 'ALTER SYSTEM RESET pg_outbox.max_concurrency');
sql_retry($node, 'SELECT pg_reload_conf()');
note(sprintf 'load: producers ran %.1f s', time - $load_t0);
ok(wait_for_worker($node, undef), 'load: the worker runs after the load');
resolve_ambiguous($node, $load, 'load', 'load');
cmp_ok(scalar keys %{ $load->{committed} }, '>=', 1000, 'load: thousands of messages committed');
cmp_ok(scalar keys %{ $load->{rolled} }, '>', 0, 'load: some transactions rolled back');
wait_drained($node, $load->{committed}, 'load', '/hooks/load', 'load', $DRAIN_S);
check_invariant(
	node          => $node,
	label         => '1-3 load+faults',
	endpoint      => 'load',
	path          => '/hooks/load',
	committed     => $load->{committed},
	rolled        => $load->{rolled},
	payload_check => 1);
{
	my $log = log_since($node, $log_start);
	my $recovered = 0;
	$recovered += $1 while $log =~ /(\d+) claimed messages of a previous worker are pending again/g;
	my $opened = () = $log =~ /circuit for endpoint "load" opened/g;
	note("load: claims put back by restarted workers: $recovered; circuit opened $opened time(s)");
}

# ===========================================================================
# Scenario 6: failures inside the worker's own transactions.

{
	my $L = '6 worker txn failures';
	$recv->add_rule(path => '/hooks/wfail', delay_ms => 300);
	sql_retry($node,
		"SELECT outbox.create_endpoint('wfail', url => '" . $recv->url('/hooks/wfail') . "', timeout_ms => 5000)");
	sql_retry($node, q{
		CREATE TABLE public.fault_flag (fail_settle boolean NOT NULL);
		INSERT INTO public.fault_flag VALUES (false);
		CREATE FUNCTION public.fault_inject() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  IF (SELECT fail_settle FROM public.fault_flag) THEN
		    RAISE EXCEPTION 'injected settle failure (fault suite)' USING ERRCODE = 'disk_full';
		  END IF;
		  RETURN NEW;
		END $$;
		CREATE TRIGGER fault_inject BEFORE INSERT ON outbox.history FOR EACH ROW
		  EXECUTE FUNCTION public.fault_inject();});

	# The worker's database gets a lock_timeout (and a statement_timeout, which a
	# background worker's SPI does not arm today) that the worker picks up when it
	# reconnects.
	sql_retry($node, "ALTER DATABASE postgres SET lock_timeout = '100ms'");
	sql_retry($node, "ALTER DATABASE postgres SET statement_timeout = '250ms'");
	my $old = wait_for_worker($node, undef);
	sql_retry($node,
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'");
	my $pid = wait_for_worker($node, $old);
	ok(defined $pid, "$L: the worker reconnected with the database's timeouts (pid " . ($pid // '?') . ')');
	my $off = -s $node->logfile;

	my $p6 = start_producers(
		node     => $node,
		tag      => 'wfail',
		endpoint => 'wfail',
		count    => 2,
		first_id => 101,
		seconds  => 14,
		pause    => 0.05);
	my $t0 = time;

	# +1 s: the worker's settle fails (an error like disk full) for 4 s.
	at($t0, 1);
	sql_retry($node, 'UPDATE public.fault_flag SET fail_settle = true');
	at($t0, 5);
	sql_retry($node, 'UPDATE public.fault_flag SET fail_settle = false');

	# +8 s: hold an ACCESS EXCLUSIVE lock on outbox.messages for 4 s.
	at($t0, 8);
	my ($lo, $le) = ('', '');
	my $locker = IPC::Run::start(
		[ 'psql', '-X', '-At', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
		  '-c', 'BEGIN', '-c', 'LOCK TABLE outbox.messages IN ACCESS EXCLUSIVE MODE',
		  '-c', 'SELECT pg_sleep(4)', '-c', 'COMMIT' ],
		'>', \$lo, '2>', \$le);
	$locker->finish;
	note("$L: the lock holder " . ($? == 0 ? 'held the lock for 4 s' : "failed: $le"));

	my $r6 = collect_producers($p6);
	resolve_ambiguous($node, $r6, $L, 'wfail');
	wait_drained($node, $r6->{committed}, 'wfail', '/hooks/wfail', $L);
	check_invariant(
		node          => $node,
		label         => $L,
		endpoint      => 'wfail',
		path          => '/hooks/wfail',
		committed     => $r6->{committed},
		rolled        => $r6->{rolled},
		payload_check => 1);

	my $log = log_since($node, $off);
	ok($log =~ /pg_outbox worker: canceling statement due to lock timeout/,
		"$L: the worker logged its lock timeout");
	# The endpoint whose settle fails is parked (bounded waits): "endpoint ... is held up:
	# injected settle failure".
	ok($log =~ /pg_outbox worker: .*injected settle failure/,
		"$L: the worker logged the failed settle");
	my @crashes = $log =~ /^(.*(?:terminated by signal|PANIC:).*)$/mg;
	is(scalar @crashes, 0, "$L: no process crashed") or diag(join "\n", @crashes[0 .. ($#crashes < 5 ? $#crashes : 5)]);
	is(worker_pid($node), $pid, "$L: the worker survived its errors (same pid $pid)");
	my $settle_errors = () = $log =~ /pg_outbox worker: .*injected settle failure/g;
	my $lock_errors   = () = $log =~ /pg_outbox worker: canceling statement due to lock timeout/g;
	note("$L: the worker logged $settle_errors failed settle(s) and $lock_errors lock timeout(s)");
	# "retried with a growing pause": consecutive failures back off 200, 400, 800 ms...
	my @pauses = $log =~ /The worker rolled back and retries in (\d+) ms/g;
	note("$L: pauses after the worker's errors (ms): @pauses");
	ok(scalar(grep { $pauses[$_] == 2 * $pauses[ $_ - 1 ] } 1 .. $#pauses) > 0,
		"$L: consecutive errors are retried after a doubling pause");
	cmp_ok((sort { $b <=> $a } @pauses)[0] // 0, '<=', 6400, "$L: ... capped at 6.4 s");

	sql_retry($node, 'ALTER DATABASE postgres RESET lock_timeout');
	sql_retry($node, 'ALTER DATABASE postgres RESET statement_timeout');
	sql_retry($node, q{DROP TRIGGER fault_inject ON outbox.history;
		DROP FUNCTION public.fault_inject(); DROP TABLE public.fault_flag;});
	my $cur = wait_for_worker($node, undef);
	sql_retry($node,
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'");
	ok(defined wait_for_worker($node, $cur), "$L: the worker reconnected without the timeouts");
}

# ===========================================================================
# Scenario 4: DROP EXTENSION / CREATE EXTENSION while the worker runs.
#  (a) while idle: the worker exits; after the re-create a new one serves;
#  (b) while requests are in flight: the re-created outbox restarts its ids at 1,
#      so the ids of the dropped table's requests still in flight are reused by
#      new messages, whose own first answers are slow 503s.  Whatever the old
#      requests' answers are, they must not settle the new rows.

# CPU seconds (user + system) the process has used, and its start time (clock ticks
# after boot: tells the process from a later one with the same pid), from /proc;
# () once it is gone.
sub cpu_seconds
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return;
	my $stat = <$fh>;
	close $fh;
	$stat =~ s/^.*\)\s+//;    # after "pid (comm) "
	my @f = split ' ', $stat;
	return (($f[11] + $f[12]) / POSIX::sysconf(POSIX::_SC_CLK_TCK()), $f[19]);
}

sub enqueue_batch
{
	my ($n, $endpoint, $count, $tag) = @_;
	my %committed;
	my $ids = sql_retry($n, qq{SELECT string_agg(outbox.enqueue('$endpoint',
		jsonb_build_object('producer', 0, 'txn', $tag, 'i', g))::text, ',' ORDER BY g)
		FROM generate_series(1, $count) g});
	my @ids = split /,/, $ids;
	$committed{ $ids[$_] } = "0/$tag/" . ($_ + 1) for 0 .. $#ids;
	return \%committed;
}

{
	my $L = '4a drop/create (idle)';
	my $pid = wait_for_worker($node, undef);
	my $off = -s $node->logfile;
	sql_retry($node, 'DROP EXTENSION pg_outbox');
	ok(wait_until(sub { $node->log_contains(qr/pg_outbox worker: the extension was dropped or created again/, $off) }),
		"$L: the worker noticed the DROP EXTENSION");
	ok(wait_until(sub { !defined worker_pid($node) && !kill(0, $pid) }, undef, "$L: worker gone"),
		"$L: the worker exits while the extension is dropped");
	sql_retry($node, 'CREATE EXTENSION pg_outbox');
	sql_retry($node,
		"SELECT outbox.create_endpoint('ddl_a', url => '" . $recv->url('/hooks/ddl_a') . "')");
	my $committed = enqueue_batch($node, 'ddl_a', 5, 1);
	note("$L: ids after the re-create: " . join(',', sort { $a <=> $b } keys %$committed));
	wait_drained($node, $committed, 'ddl_a', '/hooks/ddl_a', $L);
	check_invariant(
		node          => $node,
		label         => $L,
		endpoint      => 'ddl_a',
		path          => '/hooks/ddl_a',
		committed     => $committed,
		rolled        => {},
		payload_check => 1);
	my @crashes = log_since($node, $off) =~ /^(.*(?:terminated by signal|PANIC:).*)$/mg;
	is(scalar @crashes, 0, "$L: no process crashed") or diag(join "\n", @crashes);
	my $serving = worker_pid($node);
	ok(defined $serving && $serving != $pid, "$L: a new worker serves the re-created extension");
}

{
	my $L = '4b drop/create (in flight)';
	$recv->add_rule(path => '/hooks/ddl_old', delay_ms => 3000);
	sql_retry($node,
		"SELECT outbox.create_endpoint('ddl_old', url => '" . $recv->url('/hooks/ddl_old') . "', timeout_ms => 10000)");
	my $old = enqueue_batch($node, 'ddl_old', 20, 2);
	# The endpoint's first window is 4 connections; slow answers do not grow it.
	ok(wait_until(sub { ($recv->stats->{by_path}{'/hooks/ddl_old'} // 0) >= 4 }, undef, "$L: old requests"),
		"$L: 4 requests in flight (the receiver holds them 3 s)");
	my $pid = wait_for_worker($node, undef);
	my $off = -s $node->logfile;

	sql_retry($node, 'DROP EXTENSION pg_outbox');
	# A measurement window, not a synchronisation: the CPU the worker uses in 1 s
	# while its old requests are still in flight.  It is sampled every 20 ms, so the
	# check never vanishes: a worker that exits in the window (it may: the worker of a
	# dropped extension goes, see the end of this scenario) is measured up to its last
	# sample alive; another worker in its place is a failure.
	my ($cpu0, $start0) = cpu_seconds($pid);
	my ($cpu1, $alive, $t_window) = ($cpu0, 0, time);
	while (time - $t_window < 1)
	{
		sleep(0.02);
		my ($c, $s) = cpu_seconds($pid);
		last unless defined $c && defined $start0 && $s == $start0;
		($cpu1, $alive) = ($c, time - $t_window);
	}
	my $between = worker_pid($node);
	my $others = sql_retry($node, "SELECT coalesce(string_agg(pid::text, ','), '') FROM pg_stat_activity
		WHERE backend_type = 'pg_outbox worker' AND datname = current_database() AND pid <> $pid");
	is($others, '', "$L: no other worker took the place of worker $pid during the measurement window");
	note(sprintf '%s: worker %d %s; seen alive for %.2f s of the 1 s window', $L, $pid,
		defined $between && $between == $pid ? 'ran through the window' : 'exited in the window', $alive);
	my $used = defined $cpu0 ? $cpu1 - $cpu0 : 0;
	cmp_ok($used, '<', 0.3,
		"$L: the worker does not spin while the extension is dropped and requests are in flight")
	  or diag(sprintf '%s: worker %d used %.2f s of CPU in %.2f s', $L, $pid, $used, $alive);
	sql_retry($node, 'CREATE EXTENSION pg_outbox');
	# Slow 503s shrink the endpoint's window to one connection: four of them, not
	# twenty, keep the scenario within its time.
	$recv->add_rule(path => '/hooks/ddl_new', status => 503, delay_ms => 4000, times => 4);
	sql_retry($node,
		"SELECT outbox.create_endpoint('ddl_new', url => '" . $recv->url('/hooks/ddl_new') . "', timeout_ms => 10000)");
	my $committed = enqueue_batch($node, 'ddl_new', 20, 3);
	my @reused = grep { $old->{$_} } keys %$committed;
	note("$L: worker pid before $pid, while dropped " . ($between // 'none')
		  . '; old ids ' . join(',', sort { $a <=> $b } keys %$old)
		  . '; new ids ' . join(',', sort { $a <=> $b } keys %$committed)
		  . '; reused ' . scalar(@reused));
	wait_drained($node, $committed, 'ddl_new', '/hooks/ddl_new', $L);
	check_invariant(
		node          => $node,
		label         => $L,
		endpoint      => 'ddl_new',
		path          => '/hooks/ddl_new',
		committed     => $committed,
		rolled        => {},
		payload_check => 1);
	my @crashes = log_since($node, $off) =~ /^(.*(?:terminated by signal|PANIC:).*)$/mg;
	is(scalar @crashes, 0, "$L: no process crashed") or diag(join "\n", @crashes);
	ok(!kill(0, $pid), "$L: the worker of the dropped extension is gone (its requests with it)");
}

{
	my $L = '4c drop and create in one transaction (in flight)';
	$recv->add_rule(path => '/hooks/swap_old', delay_ms => 3000);
	sql_retry($node,
		"SELECT outbox.create_endpoint('swap_old', url => '" . $recv->url('/hooks/swap_old') . "', timeout_ms => 10000)");
	my $old = enqueue_batch($node, 'swap_old', 20, 4);
	ok(wait_until(sub { ($recv->stats->{by_path}{'/hooks/swap_old'} // 0) >= 4 }, undef, "$L: old requests"),
		"$L: 4 requests in flight (the receiver holds them 3 s)");
	my $off = -s $node->logfile;
	# Slow 503s keep the new messages queued until the old answers have come; 60 new
	# messages reuse every id in flight (the old ones are above 20, the new start at 1).
	$recv->add_rule(path => '/hooks/swap_new', status => 503, delay_ms => 4000, times => 4);
	sql_retry($node, "BEGIN; DROP EXTENSION pg_outbox; CREATE EXTENSION pg_outbox;
		SELECT outbox.create_endpoint('swap_new', url => '" . $recv->url('/hooks/swap_new') . "', timeout_ms => 10000);
		COMMIT;");
	my $committed = enqueue_batch($node, 'swap_new', 60, 5);
	my @reused = grep { $old->{$_} } keys %$committed;
	is(scalar @reused, 20, "$L: the new messages reuse the 20 ids of the old ones");
	ok(wait_until(sub { $node->log_contains(qr/pg_outbox worker: the extension was dropped or created again/, $off) }),
		"$L: the worker noticed that the extension is another one");
	wait_drained($node, $committed, 'swap_new', '/hooks/swap_new', $L);
	check_invariant(
		node          => $node,
		label         => $L,
		endpoint      => 'swap_new',
		path          => '/hooks/swap_new',
		committed     => $committed,
		rolled        => {},
		payload_check => 1);
	my @crashes = log_since($node, $off) =~ /^(.*(?:terminated by signal|PANIC:).*)$/mg;
	is(scalar @crashes, 0, "$L: no process crashed") or diag(join "\n", @crashes);
}

# ===========================================================================
# Scenario 5: pg_outbox.database does not exist at server start.

{
	my $L = '5 missing database';
	my $log = slurp_file($nodb->logfile);
	my @said = $log =~ /pg_outbox launcher: database "fault_appdb" \(pg_outbox.database\) does not exist/g;
	is(scalar @said, 1, "$L: the launcher says once that the database does not exist");
	unlike($log, qr/FATAL/, "$L: no FATAL (no worker tries to connect to it)");
	unlike($log, qr/background worker "pg_outbox worker" .* exited/, "$L: no worker exits (none is started)");
	is($nodb->safe_psql('postgres', 'SELECT 1'), '1', "$L: the server stays up");

	my $nrecv_path = '/hooks/appdb';
	$nodb->safe_psql('postgres', 'CREATE DATABASE fault_appdb');
	$nodb->safe_psql('fault_appdb', 'CREATE EXTENSION pg_outbox');
	$nodb->safe_psql('fault_appdb',
		"SELECT outbox.create_endpoint('appdb', url => '" . $recv->url($nrecv_path) . "')");
	my %committed = map { $_ => "0/1/" } split /,/, $nodb->safe_psql('fault_appdb', q{
		SELECT string_agg(outbox.enqueue('appdb', jsonb_build_object('n', g))::text, ',') FROM generate_series(1, 50) g});
	my %rolled = map { $_ => 1 } split /,/, $nodb->safe_psql('fault_appdb', q{
		BEGIN;
		SELECT string_agg(outbox.enqueue('appdb', jsonb_build_object('rolled', g))::text, ',') FROM generate_series(1, 10) g;
		ROLLBACK;});
	my $t0 = time;
	wait_drained($nodb, \%committed, 'appdb', $nrecv_path, $L, undef, 'fault_appdb');
	note(sprintf '%s: served %.1f s after CREATE EXTENSION', $L, time - $t0);
	ok(slurp_file($nodb->logfile) =~ /pg_outbox worker started for database "fault_appdb"/,
		"$L: the worker started for the new database");
	check_invariant(
		node      => $nodb,
		db        => 'fault_appdb',
		label     => $L,
		endpoint  => 'appdb',
		path      => $nrecv_path,
		committed => \%committed,
		rolled    => \%rolled);
}

# ===========================================================================
# No process of the main node died of anything but our SIGKILLs.
{
	my @bad = grep { !/signal 9: Killed/ }
	  slurp_file($node->logfile) =~ /^(.*(?:terminated by signal \d+|PANIC:).*)$/mg;
	is(scalar @bad, 0, 'main node: no crash other than the SIGKILLs the test sent')
	  or diag(join "\n", @bad[0 .. ($#bad < 9 ? $#bad : 9)]);
}

my $total_lost = 0;
$total_lost += $_->[4] for @SUMMARY;
is($total_lost, 0, 'no message lost in any scenario');

my @hdr = ('scenario', 'committed', 'received', 'dead-lettered', 'lost', 'duplicates');
my $fmt = "%-28s | %9s | %8s | %13s | %4s | %10s";
note(sprintf $fmt, @hdr);
note(sprintf $fmt, map { $_ } @$_) for @SUMMARY;
note(sprintf 'fault suite: %.0f s (load phase %d s)', time - $T_START, $LOAD_S);

$node->stop;
$nodb->stop;
$recv->stop;
done_testing();

# ---------------------------------------------------------------------------
# Incremental reader of the receiver's jsonl log (it survives receiver restarts).
# by => {path => {numeric id or webhook-id => {n, ok, bodies => {body => n}}}}
# n counts requests; ok counts only the answers the worker actually received: a 2xx
# the receiver finished writing while the connection was still open (its outcome
# line), never what a rule merely planned; first_ok_at is the earliest answered_at
# of those.  A request whose client timed out and closed before the answer is not
# ok.  seq => [path, id] joins the outcome lines.
package RecvLog;

sub new
{
	my ($class, $file) = @_;
	return bless { file => $file, off => 0, by => {}, seq => {}, json => JSON::PP->new->utf8 }, $class;
}

# Requests of $path that had arrived at time $t and were not yet answered then:
# deliveries the worker had in flight at that moment.
sub in_flight_at
{
	my ($self, $path, $t) = @_;
	$self->poll;
	return scalar grep {
		$_->[0] eq $path && $_->[2] <= $t && (!defined $_->[3] || $_->[3] > $t)
	} values %{ $self->{seq} };
}

sub poll
{
	my $self = shift;
	open(my $fh, '<:raw', $self->{file}) or return;
	seek($fh, $self->{off}, 0);
	while (my $line = <$fh>)
	{
		last unless $line =~ /\n\z/;    # a line still being written
		$self->{off} += length $line;
		my $r = eval { $self->{json}->decode($line) } or next;
		if (exists $r->{outcome} && !exists $r->{path})
		{
			my $at = $self->{seq}{ $r->{seq} } or next;
			$at->[3] = $r->{answered_at};
			my $s = $self->{by}{ $at->[0] }{ $at->[1] };
			if (($r->{answered} // '') =~ /^2\d\d$/)
			{
				$s->{ok}++;
				$s->{first_ok_at} = $r->{answered_at}
				  if !defined $s->{first_ok_at} || $r->{answered_at} < $s->{first_ok_at};
			}
			next;
		}
		my $wid = $r->{headers}{'webhook-id'} // '';
		$wid = $1 if $wid =~ /^msg_(?:[0-9a-f]{16}_)?(\d+)$/;
		my $path = $r->{path} // '';
		$self->{seq}{ $r->{seq} } = [ $path, $wid, $r->{time}, undef ];
		my $s = $self->{by}{$path}{$wid} //= { n => 0, ok => 0 };
		$s->{n}++;
		$s->{bodies}{ $r->{body} // '' }++;
	}
	close $fh;
	return;
}
