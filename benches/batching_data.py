"""Reads the results folder benches/batching.sh fills (see
batching_report.py for its layout) into plain dicts, and looks values up in
them. No formatting here."""

import csv
import json
import os

from report import read_csv, read_env

RAW_RUNS = {
    "default_before": "ORT default threads, before the servers",
    "default_after": "ORT default threads, after the servers",
    "t1": "1 intra-op thread",
}
LABELS = {
    "unbatched": "unbatched",
    "batched": "batched",
    "b_i2": "2 instances, shared pool",
    "b_i1_t1": "1 instance × 1 thread",
    "b_i1_t2": "1 instance × 2 threads",
    "b_i2_t1": "2 instances × 1 thread",
    "b_i2_t2": "2 instances × 2 threads",
}


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_raw(path):
    with open(path, newline="") as f:
        return {int(r["batch"]): {k: float(v) for k, v in r.items()} for r in csv.DictReader(f)}


def model_stats(doc):
    return doc["model_stats"][0]


def batcher(before, after):
    """What the server did during one run, from two statistics snapshots."""
    if before is None or after is None:
        return None
    a, b = model_stats(before), model_stats(after)
    inferences = b["inference_count"] - a["inference_count"]
    executions = b["execution_count"] - a["execution_count"]

    def counts(s):
        return {x["batch_size"]: x["compute_infer"] for x in s["batch_stats"]}

    ca, cb = counts(a), counts(b)
    sizes = {}
    compute_ns = 0
    for size, stat in cb.items():
        prev = ca.get(size, {"count": 0, "ns": 0})
        n = stat["count"] - prev["count"]
        if n:
            sizes[size] = n
            compute_ns += stat["ns"] - prev["ns"]

    def mean_us(key):
        n = b["inference_stats"][key]["count"] - a["inference_stats"][key]["count"]
        ns = b["inference_stats"][key]["ns"] - a["inference_stats"][key]["ns"]
        return ns / n / 1000 if n else None

    return {
        "inferences": inferences,
        "executions": executions,
        "per_exec": inferences / executions if executions else None,
        "sizes": sizes,
        "queue_us": mean_us("queue"),
        "compute_us": compute_ns / executions / 1000 if executions else None,
    }


def load(args):
    results = args.results
    cells = {}
    for name in os.listdir(results):
        if not name.endswith(".csv") or name.startswith("raw_"):
            continue
        base = name[:-4]
        config, proto, c = base.rsplit("_", 2)
        entry = read_csv(os.path.join(results, name))
        entry["stats"] = batcher(read_json(os.path.join(results, base + ".before.json")),
                                 read_json(os.path.join(results, base + ".after.json")))
        entry["env"] = read_env(os.path.join(results, base + ".env"))
        cells[config, proto, int(c[1:])] = entry
    raw = {}
    for name in RAW_RUNS:
        path = os.path.join(results, f"raw_{name}.csv")
        if os.path.exists(path):
            raw[name] = {"rows": read_raw(path),
                         "env": read_env(os.path.join(results, f"raw_{name}.env"))}
    configs = {}
    for name in LABELS:
        resolved = read_json(os.path.join(results, f"{name}.config.json"))
        if resolved:
            configs[name] = resolved
    run = {}
    path = os.path.join(results, "run.env")
    if os.path.exists(path):
        with open(path) as f:
            run = dict(line.strip().split("=", 1) for line in f if "=" in line)
    return {"cells": cells, "raw": raw, "configs": configs, "run": run}


def get(data, config, proto, c, key):
    cell = data["cells"].get((config, proto, c))
    return None if cell is None else cell.get(key)


def per_exec(data, config, proto, c):
    stats = get(data, config, proto, c, "stats")
    return None if not stats else stats["per_exec"]


def raw_best(data):
    """(rows/s, batch, run) of the fastest raw_ort row over every run."""
    best = None
    for run, entry in data["raw"].items():
        for batch, row in entry["rows"].items():
            if best is None or row["rows_per_s"] > best[0]:
                best = (row["rows_per_s"], batch, run)
    return best


def cpu_per_inference(cell, key):
    """CPU µs per inference of the server or of perf_analyzer in one run."""
    env, stats = cell.get("env", {}), cell.get("stats")
    if key not in env or not stats or not stats["inferences"]:
        return None
    return env[key] / env.get("ticks_per_s", 100) * 1e6 / stats["inferences"]
