"""Writes the "Batching to a latency target" section of docs/benchmarks.md
from the results folder benches/latency_target.sh fills.

The folder holds, for each server NAME (nereid_fixed, nereid_tT for a target
of T ms, triton_dD for a fixed delay of D µs, triton_dD_p with preferred
sizes) and each cell (NAME_cC at concurrency C, NAME_rR at R infer/s):
  NAME.config.pbtxt / .json   the config as written and as resolved
  CELL.csv                    perf_analyzer -f output (missing when it failed)
  CELL.json                   benches/latency_target_load.py's output (NAME_rR)
  CELL.log                    perf_analyzer's output
  CELL.before.json / .after   /v2/models/mlp_large/stats
  CELL.before.prom / .after   the metrics text (nereid's shed counter)
  CELL.env                    before/after "ticks inferences", rc, ticks_per_s
and run.env (busy_before_pct, load_before/after, elapsed_s).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import git_rev, machine  # noqa: E402
from sections import write_section  # noqa: E402

BEGIN = "<!-- latency-target:begin (benches/latency_target.sh writes this section) -->"
END = "<!-- latency-target:end -->"
AIM = 1.3


def read_env(path):
    values = {}
    if os.path.isfile(path):
        for line in open(path):
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                values[k] = v
    return values


def read_csv(path):
    if not os.path.isfile(path):
        return None
    rows = list(csv.DictReader(open(path)))
    return rows[0] if rows else None


def stats_counts(path):
    try:
        model = json.load(open(path))["model_stats"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None
    return int(model.get("inference_count", 0)), int(model.get("execution_count", 0))


def shed_total(path):
    if not os.path.isfile(path):
        return 0
    total = 0.0
    for line in open(path):
        if line.startswith("nereid_requests_shed_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


def failed_requests(path):
    """perf_analyzer's count of failed requests, when it prints one."""
    if not os.path.isfile(path):
        return None
    found = None
    for line in open(path, errors="replace"):
        m = re.search(r"[Ff]ailed(?: requests)?:? (\d+)", line)
        if m:
            found = int(m.group(1))
    return found


def cpu_per_inference(env):
    """Server CPU µs per inference from a cell's before/after "ticks
    inferences" readings; None when they are missing or no inference ran."""
    try:
        t0, n0 = map(int, env["before"].split())
        t1, n1 = map(int, env["after"].split())
        if n1 > n0:
            return (t1 - t0) * 1e6 / int(env["ticks_per_s"]) / (n1 - n0)
    except (KeyError, ValueError):
        pass
    return None


def load_cell(results, cell):
    env = read_env(os.path.join(results, f"{cell}.env"))
    row = read_csv(os.path.join(results, f"{cell}.csv"))
    out = {"rc": int(env.get("rc", "1")), "ok": row is not None}
    if row:
        out["thr"] = float(row["Inferences/Second"])
        out["p50"] = float(row["p50 latency"])
        out["p99"] = float(row["p99 latency"])
    before = stats_counts(os.path.join(results, f"{cell}.before.json"))
    after = stats_counts(os.path.join(results, f"{cell}.after.json"))
    if before and after and after[1] > before[1]:
        out["per_exec"] = (after[0] - before[0]) / (after[1] - before[1])
    cpu_us = cpu_per_inference(env)
    if cpu_us is not None:
        out["cpu_us"] = cpu_us
    out["shed"] = shed_total(os.path.join(results, f"{cell}.after.prom")) - shed_total(
        os.path.join(results, f"{cell}.before.prom")
    )
    out["failed"] = failed_requests(os.path.join(results, f"{cell}.log"))
    return out


def label(server):
    if server == "nereid_fixed":
        return "nereid, fixed 2,000 µs delay"
    if server.startswith("nereid_t"):
        return f"nereid, target {server[len('nereid_t'):]} ms"
    delay = server[len("triton_d"):]
    if delay.endswith("_p"):
        return f"Triton, {int(delay[:-2]):,} µs, preferred [8, 16, 32]"
    return f"Triton, {int(delay):,} µs"


def num(v, digits=0):
    return "—" if v is None else f"{v:,.{digits}f}"


def closed_table(data, servers, concurrencies):
    lines = [
        "| server | c | infer/s | p50 µs | p99 µs | inferences per execution | server CPU µs per inference | shed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in servers:
        for c in concurrencies:
            d = data[(s, f"c{c}")]
            shed = str(d["shed"]) if s.startswith("nereid") else "—"
            if not d["ok"]:
                why = "refused requests" if d["shed"] else f"rc {d['rc']}"
                lines.append(f"| {label(s)} | {c} | failed ({why}) | | | | | {shed} |")
                continue
            lines.append(
                f"| {label(s)} | {c} | {num(d['thr'])} | {num(d['p50'])} | {num(d['p99'])} "
                f"| {num(d.get('per_exec'), 1)} | {num(d.get('cpu_us'))} | {shed} |"
            )
    return "\n".join(lines)


def triton_points(data, servers, concurrencies):
    return [
        (s, c, data[(s, f"c{c}")])
        for s in servers
        if s.startswith("triton")
        for c in concurrencies
        if data[(s, f"c{c}")]["ok"]
    ]


def comparison(data, servers, concurrencies):
    """For each nereid target point: Triton's best throughput at a p99 no
    higher, and its lowest p99 at a throughput no lower."""
    points = triton_points(data, servers, concurrencies)
    lines = [
        "| nereid server | c | nereid infer/s | nereid p99 µs | Triton's best infer/s with p99 ≤ that (config, c) | throughput ratio | Triton's lowest p99 µs with infer/s ≥ that (config, c) | p99 ratio (Triton ÷ nereid) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ratios = []
    for s in servers:
        if not s.startswith("nereid_t"):
            continue
        for c in concurrencies:
            d = data[(s, f"c{c}")]
            if not d["ok"]:
                continue
            within = [p for p in points if p[2]["p99"] <= d["p99"]]
            best = max(within, key=lambda p: p[2]["thr"], default=None)
            faster = [p for p in points if p[2]["thr"] >= d["thr"]]
            lowest = min(faster, key=lambda p: p[2]["p99"], default=None)
            ratio = d["thr"] / best[2]["thr"] if best else None
            p99_ratio = lowest[2]["p99"] / d["p99"] if lowest else None
            if ratio is not None:
                ratios.append((ratio, s, c))
            lines.append(
                f"| {label(s)} | {c} | {num(d['thr'])} | {num(d['p99'])} | "
                + (f"{num(best[2]['thr'])} ({label(best[0])}, c{best[1]})" if best else "none")
                + f" | {num(ratio, 2)}{'×' if ratio else ''} | "
                + (f"{num(lowest[2]['p99'])} ({label(lowest[0])}, c{lowest[1]})" if lowest else "none")
                + f" | {num(p99_ratio, 2)}{'×' if p99_ratio else ''} |"
            )
    return "\n".join(lines), ratios


def at_target(data, servers, concurrencies):
    """Each target's best throughput with p99 within it, against Triton's."""
    points = triton_points(data, servers, concurrencies)
    rows = []
    for s in servers:
        if not s.startswith("nereid_t"):
            continue
        target_us = float(s[len("nereid_t"):]) * 1000
        mine = [
            (c, data[(s, f"c{c}")])
            for c in concurrencies
            if data[(s, f"c{c}")]["ok"] and data[(s, f"c{c}")]["p99"] <= target_us
        ]
        best_n = max(mine, key=lambda p: p[1]["thr"], default=None)
        theirs = [p for p in points if p[2]["p99"] <= target_us]
        best_t = max(theirs, key=lambda p: p[2]["thr"], default=None)
        rows.append((s, target_us, best_n, best_t))
    return rows


def load_open(results, cell):
    try:
        out = json.load(open(os.path.join(results, f"{cell}.json")))
    except (OSError, ValueError):
        return None
    env = read_env(os.path.join(results, f"{cell}.env"))
    cpu_us = cpu_per_inference(env)
    if cpu_us is not None:
        out["cpu_us"] = cpu_us
    return out


def open_table(data, servers, rates):
    lines = [
        "| server | offered infer/s | sent infer/s | answered infer/s | p50 µs | p99 µs | "
        "refused (with retry-after) | other errors | server CPU µs per inference |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rates:
        for s in servers:
            d = data.get((s, f"r{r}"))
            if s == "nereid_fixed" or d is None:
                continue
            lines.append(
                f"| {label(s)} | {r:,} | {num(d['sent_per_s'])} | {num(d['ok_per_s'])} "
                f"| {num(d['p50_us'])} | {num(d['p99_us'])} | {d['refused']:,} "
                f"({d['refused_with_retry_after']:,}) | {d['errors']:,} | {num(d.get('cpu_us'))} |"
            )
    return "\n".join(lines)


def section(args, data, servers, concurrencies, rates):
    run = read_env(os.path.join(args.results, "run.env"))
    m = machine()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    table, ratios = comparison(data, servers, concurrencies)
    parts = [
        "## Batching to a latency target",
        "",
        f"Written by `benches/latency_target.sh` on {now} (nereid at git `{git_rev()}`, "
        f"`{args.nereid_bin}`), on {m['nproc']} CPUs ({m['cpu']}), {m['mem_gib']:.0f} GiB; "
        "rerun it to refresh. One run per cell, every server started at once and measured in "
        "turn: read differences of 10 % or so as noise. Background: CPU busy before the run "
        f"{run.get('busy_before_pct', '?')} %, load average {run.get('load_before', '?')} "
        f"before and {run.get('load_after', '?')} after (the benchmark's own processes count); "
        f"{run.get('elapsed_s', '?')} s of measuring.",
        "",
        "### Setup",
        "",
        "- Model: `mlp_large` (256-4096-4096-4096-16, `max_batch_size` 64, one CPU instance), "
        "made by `scripts/make_models.py --bench-mlp`; each server serves only it, with the "
        "`dynamic_batching` block named in its row (the rest of the config as made).",
        "- **nereid, target T ms**: `dynamic_batching { }` and `parameters { key: "
        '"nereid.latency_target_ms" value: { string_value: "T" } }` (docs/latency-target.md).',
        "- **nereid, fixed 2,000 µs delay**: nereid's own batcher as the config is made, for "
        "reference.",
        "- **Triton, D µs**: real Triton 2.51 (`scripts/run-triton.sh`) with its native ONNX "
        f"Runtime backend from `TRITON_BACKEND_DIR` (`{args.triton_backend_dir}`), "
        "`max_queue_delay_microseconds` D (and `preferred_batch_size` [8, 16, 32] where "
        "named; otherwise autofill's [64]). Its configs also carry the "
        "`nereid.latency_target_ms` parameter, which Triton ignores: every one loaded.",
        "- Server CPU per inference: the server's process tree's user+system ticks over the "
        "model's `inference_count` delta across the run (warm-up included). Shed: the delta "
        "of `nereid_requests_shed_total`.",
        "",
        "perf_analyzer 2.51, under `timeout`, one run per server and load:",
        "",
        "```text",
        f".tools/perf_analyzer/perf_analyzer.sh {args.pa_args}",
        "```",
        "",
        "Latencies are perf_analyzer's, client-side, in µs. A nereid run that refused a "
        "request stops perf_analyzer (2.51 ends at the first failed request): such a cell "
        "reads failed, with the count of refusals.",
        "",
        f"### Closed loop ({args.protocol})",
        "",
        closed_table(data, servers, concurrencies),
        "",
        "### Throughput at equal p99, p99 at equal throughput",
        "",
        "For each point of a nereid target server: the most throughput any Triton config "
        "reached at any concurrency with a p99 no higher, and the lowest p99 any reached "
        "with a throughput no lower.",
        "",
        table,
        "",
    ]
    if rates:
        parts += [
            "### Open loop, up to past capacity (grpc)",
            "",
            "`benches/latency_target_load.py` sends single-row requests at a fixed rate for "
            f"{args.rate_seconds} s whatever the answers (each its own call on one channel), "
            "then waits up to 10 s for what is outstanding; latencies are of the answered "
            "requests, client-side.",
            "",
            open_table(data, servers, rates),
            "",
        ]
    parts += ["### Reading", ""]
    for s, target_us, best_n, best_t in at_target(data, servers, concurrencies):
        if best_n and best_t:
            ratio = best_n[1]["thr"] / best_t[2]["thr"]
            verdict = "meets" if ratio >= AIM else "misses"
            parts.append(
                f"- With p99 within {target_us / 1000:g} ms: {label(s)} served at most "
                f"{num(best_n[1]['thr'])} infer/s (c{best_n[0]}, p99 {num(best_n[1]['p99'])} µs, "
                f"{num(best_n[1].get('cpu_us'))} µs of server CPU per inference); the best "
                f"Triton config {num(best_t[2]['thr'])} infer/s ({label(best_t[0])}, "
                f"c{best_t[1]}, p99 {num(best_t[2]['p99'])} µs, "
                f"{num(best_t[2].get('cpu_us'))} µs CPU per inference): "
                f"{ratio:.2f}×, which {verdict} the aim of {AIM}×."
            )
        else:
            parts.append(
                f"- With p99 within {target_us / 1000:g} ms: "
                + ("no nereid point" if not best_n else "no Triton point")
                + " stayed within it."
            )
    if ratios:
        lo, hi = min(ratios), max(ratios)
        parts.append(
            f"- Throughput at equal p99, over every target point: {lo[0]:.2f}× "
            f"({label(lo[1])}, c{lo[2]}) to {hi[0]:.2f}× ({label(hi[1])}, c{hi[2]})."
        )
    parts.append("")
    return "\n".join(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--pa-args", required=True)
    parser.add_argument("--servers", required=True)
    parser.add_argument("--concurrencies", required=True)
    parser.add_argument("--rates", default="")
    parser.add_argument("--rate-seconds", default="8")
    parser.add_argument("--protocol", default="grpc")
    parser.add_argument("--nereid-bin", default="target/release/nereid")
    parser.add_argument("--triton-backend-dir", default="")
    args = parser.parse_args()
    servers = args.servers.split()
    concurrencies = [int(c) for c in args.concurrencies.split()]
    rates = [int(r) for r in args.rates.split()]
    data = {}
    for s in servers:
        for c in concurrencies:
            data[(s, f"c{c}")] = load_cell(args.results, f"{s}_c{c}")
        for r in rates:
            opened = load_open(args.results, f"{s}_r{r}")
            if opened is not None:
                data[(s, f"r{r}")] = opened
    body = section(args, data, servers, concurrencies, rates)
    write_section(Path(args.out), BEGIN, END, body)


if __name__ == "__main__":
    main()
