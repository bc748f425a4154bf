"""COMMIT->receipt latency from the webhook receiver's jsonl log.

Each payload carries {"t": <unix seconds at enqueue, just before COMMIT>}; the
receiver stamps its receipt time. Prints count, p50, p95, p99 and max in ms."""
import json
import sys

lat = []
with open(sys.argv[1]) as log:
    for line in log:
        record = json.loads(line)
        if record.get("response") != 200:
            continue
        sent = json.loads(record["body"]).get("t")
        if sent is not None:
            lat.append((record["time"] - sent) * 1000.0)
lat.sort()
if not lat:
    sys.exit("no latency samples")


def pct(p):
    return lat[min(len(lat) - 1, int(round(p / 100.0 * (len(lat) - 1))))]


print(f"{len(lat)} {pct(50):.2f} {pct(95):.2f} {pct(99):.2f} {lat[-1]:.2f}")
