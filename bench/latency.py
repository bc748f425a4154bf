"""COMMIT->receipt latency from the webhook receiver's jsonl log.

Each payload carries {"t": <unix seconds at enqueue, just before COMMIT>}; the
receiver stamps its receipt time. Prints count, p50, p95, p99 and max in ms, then how
many samples took over 10 ms, in how many distinct seconds, and the second (UTC) that
held most of them ("-" if none): one stall or a spread tail read differently."""
import collections
import datetime
import json
import sys

lat = []
slow_seconds = collections.Counter()  # receipt second -> samples over 10 ms
with open(sys.argv[1]) as log:
    for line in log:
        record = json.loads(line)
        if record.get("response") != 200:
            continue
        sent = json.loads(record["body"]).get("t")
        if sent is not None:
            lat.append((record["time"] - sent) * 1000.0)
            if lat[-1] > 10.0:
                slow_seconds[int(record["time"])] += 1
lat.sort()
if not lat:
    sys.exit("no latency samples")


def pct(p):
    return lat[min(len(lat) - 1, int(round(p / 100.0 * (len(lat) - 1))))]


worst = "-"
if slow_seconds:
    second = slow_seconds.most_common(1)[0][0]
    worst = datetime.datetime.fromtimestamp(second, datetime.timezone.utc).strftime("%H:%M:%S")
print(f"{len(lat)} {pct(50):.2f} {pct(95):.2f} {pct(99):.2f} {lat[-1]:.2f} "
      f"{sum(slow_seconds.values())} {len(slow_seconds)} {worst}")
