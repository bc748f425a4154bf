#!/usr/bin/python3
# Case 11 of bench/run.sh: one reader of a pull endpoint in a loop of
# outbox.read(endpoint, 100, '30s', wait => '5s') and outbox.ack, while pgbench enqueues at
# a steady rate; each message carries the enqueuing clock ("t", unix seconds), and the time
# from it to the moment read returned it is the COMMIT -> read latency. Ends when EXPECTED
# messages have come, when a read waits 5 s for nothing after the first messages (the
# producer has stopped), or after SECONDS. Run with Debian's python3 (python3-psycopg2):
#   /usr/bin/python3 bench/pull_latency.py HOST PORT DBNAME ENDPOINT EXPECTED SECONDS
# Prints: samples p50 p95 p99 max (ms).
import sys
import time

import psycopg2


def main():
    host, port, dbname, endpoint, expected, seconds = sys.argv[1:7]
    expected, deadline = int(expected), time.monotonic() + float(seconds)
    conn = psycopg2.connect(host=host, port=port, dbname=dbname, user="postgres")
    conn.autocommit = True
    cur = conn.cursor()
    latencies = []
    while len(latencies) < expected and time.monotonic() < deadline:
        cur.execute("SELECT id, (payload->>'t')::float8 FROM outbox.read(%s, 100, '30s', '5s')", (endpoint,))
        rows = cur.fetchall()
        now = time.time()
        if not rows:
            if latencies:
                break  # five seconds with nothing: the producer has stopped
            continue
        latencies.extend((now - t) * 1000.0 for _, t in rows)
        cur.execute("SELECT outbox.ack(%s, %s)", (endpoint, [r[0] for r in rows]))
    conn.close()
    if not latencies:
        print("pull_latency: no message came", file=sys.stderr)
        sys.exit(1)
    latencies.sort()

    def pct(p):
        return latencies[min(len(latencies) - 1, int(p / 100.0 * len(latencies)))]

    print(f"{len(latencies)} {pct(50):.2f} {pct(95):.2f} {pct(99):.2f} {latencies[-1]:.2f}")


if __name__ == "__main__":
    main()
