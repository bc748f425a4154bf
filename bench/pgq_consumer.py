#!/usr/bin/python3
# The PgQ reference of bench/run.sh: a no-op batch consumer that drains what the queue
# holds, as a PgQ consumer loops: next_batch, get_batch_events, finish_batch, one
# transaction per batch, until next_batch finds no batch. The events are fetched to the
# client and dropped. Run with Debian's python3 (python3-psycopg2):
#   /usr/bin/python3 bench/pgq_consumer.py HOST PORT DBNAME QUEUE CONSUMER EXPECTED
# Prints: events/s, CPU ms per 1,000 events (consumer backend + this client), the
# backend's and the client's share, the number of batches. Exits 1 if it consumed
# another number of events than EXPECTED.
import os
import sys
import time

import psycopg2


def backend_cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of the file; 12 and 13 after "(comm)".
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    host, port, dbname, queue, consumer, expected = sys.argv[1:7]
    expected = int(expected)
    conn = psycopg2.connect(host=host, port=port, dbname=dbname, user="postgres")
    cur = conn.cursor()
    cur.execute("SELECT pg_backend_pid()")
    pid = cur.fetchone()[0]
    conn.commit()

    events = batches = 0
    b0, c0, t0 = backend_cpu_seconds(pid), time.process_time(), time.monotonic()
    while True:
        cur.execute("SELECT pgq.next_batch(%s, %s)", (queue, consumer))
        batch = cur.fetchone()[0]
        if batch is None:
            conn.commit()
            break
        cur.execute("SELECT ev_id, ev_type, ev_data FROM pgq.get_batch_events(%s)", (batch,))
        events += len(cur.fetchall())
        cur.execute("SELECT pgq.finish_batch(%s)", (batch,))
        conn.commit()
        batches += 1
    t1, c1, b1 = time.monotonic(), time.process_time(), backend_cpu_seconds(pid)
    conn.close()

    if events != expected:
        print(f"pgq_consumer: consumed {events} events in {batches} batches, expected {expected}",
              file=sys.stderr)
        sys.exit(1)
    per_k = 1000.0 / (events / 1000.0)
    backend_ms, client_ms = (b1 - b0) * per_k, (c1 - c0) * per_k
    print(f"{events / (t1 - t0):.0f} {backend_ms + client_ms:.1f} {backend_ms:.1f} {client_ms:.1f} {batches}")


if __name__ == "__main__":
    main()
