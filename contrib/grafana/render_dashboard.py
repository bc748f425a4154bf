#!/usr/bin/python3
"""Draws the panels of a Grafana dashboard (pg_outbox.json beside this file) into one
PNG, from a Prometheus server's data: for each panel, each of its targets is run with
/api/v1/query_range over the chosen time window, and the series are drawn in a subplot
titled with the panel's title.  It needs no Grafana: it is how docs/images/dashboard.png
is made, and test/t/145_prometheus_alerts.pl runs it against a real Prometheus.

    /usr/bin/python3 contrib/grafana/render_dashboard.py \
        --prometheus http://127.0.0.1:9090 --minutes 15 --out dashboard.png

Dashboard variables ($database, ${endpoint}, [[x]]) take --var NAME=REGEX, else ".*"
(Grafana's "All"); $__rate_interval takes --rate-interval.  Time series are drawn as
lines, state timelines as steps with the panel's value mappings as tick labels.
Debian 12: apt-get install python3-matplotlib.

Exit status: 0 when every target was answered (a target with no series is drawn as
"no data" and listed on stderr), 1 when Prometheus refused a query or could not be
reached, 2 on bad arguments.
"""

import argparse
import json
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")  # no display: the PNG is the only output
import matplotlib.pyplot as plt  # noqa: E402  (after use())

COLUMNS = 3


def substitute(expr, variables, rate_interval):
    """The expression with the dashboard's variables replaced, as Grafana would for
    a selection of regular expressions."""
    expr = expr.replace("$__rate_interval", rate_interval).replace("${__rate_interval}", rate_interval)

    def value(match):
        name = match.group(1) or match.group(2) or match.group(3)
        return variables.get(name, ".*")

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)", value, expr)


def legend(fmt, labels):
    if not fmt:
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)


def query_range(base, expr, start, end, step):
    params = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    try:
        with urllib.request.urlopen(f"{base}/api/v1/query_range?{params}", timeout=30) as response:
            body = json.load(response)
    except urllib.error.HTTPError as error:  # Prometheus answers 400/422 with a JSON error
        body = json.load(error)
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body.get('errorType')}: {body.get('error')}")
    return body["data"]["result"]


def value_mappings(panel):
    """{value: text} from the panel's value mappings (state timelines)."""
    out = {}
    for mapping in panel.get("fieldConfig", {}).get("defaults", {}).get("mappings", []):
        if mapping.get("type") == "value":
            for key, option in mapping.get("options", {}).items():
                out[float(key)] = option.get("text", key)
    return out


def draw(ax, panel, results, start, end):
    ax.set_title(panel.get("title", ""), fontsize=10, loc="left")
    # Time from the window's start, in seconds for a short window (a test's), else minutes.
    scale, unit_name = (1, "seconds") if end - start < 300 else (60, "minutes")
    ax.set_xlim(0, (end - start) / scale)
    ax.set_xlabel(f"{unit_name} from {time.strftime('%H:%M:%S', time.gmtime(start))} UTC", fontsize=7)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
    if unit in ("s", "ops"):
        ax.set_ylabel({"s": "seconds", "ops": "per second"}[unit], fontsize=7)
    stepped = panel.get("type") == "state-timeline"
    drawn = 0
    for target, series in results:
        for s in series:
            xs = [(float(t) - start) / scale for t, _ in s["values"]]
            ys = [float(v) for _, v in s["values"]]
            label = legend(target.get("legendFormat"), s["metric"])
            if stepped:
                ax.step(xs, ys, where="post", label=label, linewidth=1.5)
            else:
                ax.plot(xs, ys, label=label, linewidth=1.2)
            drawn += 1
    if stepped:
        mappings = value_mappings(panel)
        if mappings:
            ax.set_yticks(sorted(mappings))
            ax.set_yticklabels([mappings[k] for k in sorted(mappings)], fontsize=7)
            low, high = min(mappings), max(mappings)
            ax.set_ylim(low - 0.2, high + 0.2)
    elif "min" in panel.get("fieldConfig", {}).get("defaults", {}):
        # The panel's own lower bound (0 for counts and ages), so that a flat line of 6
        # reads as 6 and not as a wobble around it.
        ax.set_ylim(bottom=panel["fieldConfig"]["defaults"]["min"], top=max(ax.get_ylim()[1], 1))
    if drawn:
        ax.legend(fontsize=6, loc="upper left", ncol=2 if drawn > 6 else 1, framealpha=0.7)
    else:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="grey")
    return drawn


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prometheus", required=True, help="base URL, e.g. http://127.0.0.1:9090")
    parser.add_argument("--dashboard", default=None, help="dashboard JSON (default: pg_outbox.json beside this script)")
    parser.add_argument("--out", required=True, help="PNG to write")
    parser.add_argument("--minutes", type=float, default=15, help="window ending now (default 15)")
    parser.add_argument("--start", type=float, help="window start, Unix seconds (instead of --minutes)")
    parser.add_argument("--end", type=float, help="window end, Unix seconds (default now)")
    parser.add_argument("--step", type=float, default=0, help="seconds between points (default: window / 300, at least 1)")
    parser.add_argument("--rate-interval", default="1m", help="what $__rate_interval stands for (default 1m)")
    parser.add_argument("--var", action="append", default=[], metavar="NAME=REGEX")
    args = parser.parse_args(argv)

    variables = {}
    for item in args.var:
        if "=" not in item:
            parser.error(f"--var {item}: NAME=REGEX")
        name, regex = item.split("=", 1)
        variables[name] = regex
    dashboard_path = args.dashboard or __file__.rsplit("/", 1)[0] + "/pg_outbox.json"
    with open(dashboard_path, encoding="utf-8") as f:
        dashboard = json.load(f)
    end = args.end if args.end is not None else time.time()
    start = args.start if args.start is not None else end - args.minutes * 60
    if start >= end:
        parser.error("the window is empty")
    step = args.step or max(1.0, round((end - start) / 300))
    base = args.prometheus.rstrip("/")

    panels = []  # rows are only headings; a collapsed row keeps its panels inside it
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            panels.extend(panel.get("panels", []))
        else:
            panels.append(panel)
    panels = [p for p in panels if p.get("targets")]
    if not panels:
        print(f"{dashboard_path}: no panel with targets", file=sys.stderr)
        return 2

    rows = (len(panels) + COLUMNS - 1) // COLUMNS
    fig, axes = plt.subplots(rows, COLUMNS, figsize=(6 * COLUMNS, 3.6 * rows), squeeze=False)
    fig.suptitle(f"{dashboard.get('title', 'dashboard')}: "
                 f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(start))} UTC, "
                 f"{(end - start) / 60:.1f} minutes", fontsize=12)
    empty = []
    try:
        for i, panel in enumerate(panels):
            results = []
            for target in panel["targets"]:
                if target.get("hide") or not target.get("expr"):
                    continue
                expr = substitute(target["expr"], variables, args.rate_interval)
                results.append((target, query_range(base, expr, start, end, step)))
                if not results[-1][1]:
                    empty.append(f"{panel.get('title')}: {expr}")
            draw(axes[i // COLUMNS][i % COLUMNS], panel, results, start, end)
    except (RuntimeError, OSError) as error:
        print(f"render_dashboard: {error}", file=sys.stderr)
        return 1
    for j in range(len(panels), rows * COLUMNS):
        axes[j // COLUMNS][j % COLUMNS].axis("off")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(args.out, dpi=80)
    for line in empty:
        print(f"no data: {line}", file=sys.stderr)
    print(f"{args.out}: {len(panels)} panels")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
