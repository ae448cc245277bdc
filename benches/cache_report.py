"""Writes the "Response cache: local and Redis" section of
docs/benchmarks.md from the results benches/cache.sh leaves: perf_analyzer's
CSV per run and each cached model's statistics per cache.

    cache_report.py RESULTS OUT REQUESTS GIT REDIS_VERSION
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sections import write_section  # noqa: E402

BEGIN = "<!-- cache:begin -->"
END = "<!-- cache:end -->"
RUNS = [
    ("mlp-c1", "mlp (answer 64 B)", "c1"),
    ("mlp-c8", "mlp (answer 64 B)", "c8"),
    ("identity_1mb-c1", "identity_1mb (answer 1 MiB)", "c1"),
]


def row(results: Path, name: str):
    """(infer/s, p50 µs, p99 µs), or None when the run failed."""
    path = results / f"{name}.csv"
    if not path.is_file():
        return None
    with path.open() as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return None
    r = rows[0]
    return float(r["Inferences/Second"]), float(r["p50 latency"]), float(r["p99 latency"])


def hit_times(results: Path, cache: str, model: str):
    """(hits, µs per hit to find, µs per miss to look up and insert)."""
    path = results / f"{cache}-{model}.stats.json"
    if not path.is_file():
        return None
    stats = json.loads(path.read_text())["model_stats"][0]["inference_stats"]
    hit, miss = stats["cache_hit"], stats["cache_miss"]
    return (int(hit["count"]), int(hit["ns"]) / max(int(hit["count"]), 1) / 1000,
            int(miss["ns"]) / max(int(miss["count"]), 1) / 1000)


def fmt(value, digits=0):
    return "–" if value is None else f"{value:,.{digits}f}"


def main() -> None:
    results, out, requests, git, redis_version = sys.argv[1:6]
    results = Path(results)
    lines = [
        "## Response cache: local and Redis",
        "",
        f"Written by `benches/cache.sh` on "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC (git `{git}`), "
        f"on {os.cpu_count()} CPUs; rerun it to refresh. One run per row.",
        "",
        "nereid (release build) serves the example MLP and a 1 MiB ONNX identity with "
        "`response_cache { enable: true }`, first with `--cache-config local,size=268435456`, "
        f"then with a Redis {redis_version} on the same machine (loopback, no persistence) "
        "as `--cache-config redis,host=127.0.0.1 --cache-config redis,port=$PORT`. "
        "perf_analyzer 2.51 sends the same zero input every time, so all but the first "
        "request are hits:",
        "",
        "```text",
        ".tools/perf_analyzer/perf_analyzer.sh -m $MODEL -i grpc -u 127.0.0.1:$PORT -b 1 "
        "--concurrency-range $C --measurement-mode count_windows --input-data zero "
        f"--measurement-request-count {requests} -s 50 -r 5",
        "```",
        "",
        "| model | concurrency | cache | infer/s | p50 µs | p99 µs |",
        "|---|---|---|---:|---:|---:|",
    ]
    for run, model, c in RUNS:
        for cache in ("local", "redis"):
            r = row(results, f"{cache}-{run}")
            values = ["–"] * 3 if r is None else [fmt(r[0]), fmt(r[1]), fmt(r[2])]
            lines.append(f"| {model} | {c} | {cache} | " + " | ".join(values) + " |")
    none = row(results, "none-mlp-c1")
    if none is not None:
        lines.append(f"| mlp (answer 64 B) | c1 | none (the model runs) | {fmt(none[0])} | "
                     f"{fmt(none[1])} | {fmt(none[2])} |")
    lines += ["", "Inside the server (the statistics' `cache_hit` and `cache_miss`, means over every "
              "run of the model, c1 and c8 for the MLP; one miss each):", ""]
    for cache in ("local", "redis"):
        for model in ("mlp_cached", "identity_1mb_cached"):
            t = hit_times(results, cache, model)
            if t is not None:
                lines.append(f"- {cache}, {model}: {t[0]:,} hits, {t[1]:,.1f} µs each to find; "
                             f"the miss {t[2]:,.1f} µs to look up and insert.")
    lines.append("")
    write_section(Path(out), BEGIN, END, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
