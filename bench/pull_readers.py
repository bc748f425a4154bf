#!/usr/bin/python3
# Case 10 of bench/run.sh: READERS processes drain a queue together, BATCH messages at a
# time, until it is empty, and the time from the first read to the last is taken.
#   pull: outbox.read(endpoint, BATCH) then outbox.ack(endpoint, ids), each its own
#         transaction (a read commits its hold; the ack settles it);
#   hand: the design documents' consumer on a table of its own: BEGIN; SELECT ... FOR
#         UPDATE SKIP LOCKED LIMIT BATCH; DELETE those rows; COMMIT.
#   kept: the same consumer keeping what pg_outbox keeps of each delivered message: the
#         DELETE moves the rows into TARGET_history (payload, created_at, sent_at), and
#         one row per message goes into TARGET_attempts, in the same transaction.
# Run with Debian's python3 (python3-psycopg2):
#   /usr/bin/python3 bench/pull_readers.py HOST PORT DBNAME MODE TARGET READERS BATCH EXPECTED
# Prints messages/s, then the CPU time the readers' backends spent per message, in µs
# (from /proc: the bench runs on the server's machine; it does not depend on how loaded
# the shared machine is, as the rate does). Exits 1 if the readers took another number
# of messages than EXPECTED.
import multiprocessing
import os
import sys
import time

import psycopg2

TICKS = os.sysconf("SC_CLK_TCK")


def backend_cpu(pid):
    """User and system CPU seconds of a backend so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def reader(args):
    host, port, dbname, mode, target, batch, start = args
    conn = psycopg2.connect(host=host, port=port, dbname=dbname, user="postgres")
    conn.autocommit = mode == "pull"
    cur = conn.cursor()
    cur.execute("SELECT pg_backend_pid()")
    backend = cur.fetchone()[0]
    conn.commit()
    cpu0 = backend_cpu(backend)
    start.wait()
    taken = 0
    while True:
        if mode == "pull":
            cur.execute("SELECT id FROM outbox.read(%s, %s)", (target, batch))
            ids = [r[0] for r in cur.fetchall()]
            if not ids:
                break
            cur.execute("SELECT outbox.ack(%s, %s)", (target, ids))
            if cur.fetchone()[0] != len(ids):
                raise SystemExit("pull_readers: an ack did not settle every message read")
        else:
            cur.execute(f"SELECT id, payload FROM {target} ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED", (batch,))
            ids = [r[0] for r in cur.fetchall()]
            if not ids:
                conn.commit()
                break
            if mode == "kept":
                cur.execute(f"WITH moved AS (DELETE FROM {target} WHERE id = ANY (%s) RETURNING id, payload, created_at) "
                            f"INSERT INTO {target}_history SELECT id, payload, created_at, now() FROM moved", (ids,))
                cur.execute(f"INSERT INTO {target}_attempts SELECT u, now(), 1 FROM unnest(%s::bigint[]) AS u", (ids,))
            else:
                cur.execute(f"DELETE FROM {target} WHERE id = ANY (%s)", (ids,))
            conn.commit()
        taken += len(ids)
    cpu = backend_cpu(backend) - cpu0
    conn.close()
    return taken, cpu


def main():
    host, port, dbname, mode, target, readers, batch, expected = sys.argv[1:9]
    readers, batch, expected = int(readers), int(batch), int(expected)
    with multiprocessing.Manager() as manager:
        start = manager.Barrier(readers + 1)
        with multiprocessing.Pool(readers) as pool:
            result = pool.map_async(reader, [(host, port, dbname, mode, target, batch, start)] * readers)
            start.wait()
            t0 = time.monotonic()
            results = result.get()
            t1 = time.monotonic()
    taken = sum(r[0] for r in results)
    cpu = sum(r[1] for r in results)
    if taken != expected:
        print(f"pull_readers: {mode} took {taken} messages, expected {expected}", file=sys.stderr)
        sys.exit(1)
    print(f"{taken / (t1 - t0):.0f} {cpu / taken * 1e6:.1f}")


if __name__ == "__main__":
    main()
