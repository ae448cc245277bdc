"""Writes the "Batch jobs" section of docs/benchmarks.md from what
benches/batch.sh leaves: raw_ort's CSV and nereid batch's summary line per
run, for the MLP over a million rows and mlp_large over a subset.

    batch_report.py --results DIR --out FILE --rows N --large-rows N --runs N --nereid-bin PATH
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sections import write_section  # noqa: E402

BEGIN = "<!-- batch:begin -->"
END = "<!-- batch:end -->"
SUMMARY = re.compile(r"nereid batch: (\d+) records \((\d+) failed\) in ([\d.]+) s, (\d+) records/s")


def raw_rate(results: Path, model: str, run: int) -> float | None:
    path = results / f"raw_{model}_{run}.csv"
    if not path.is_file():
        return None
    with path.open() as f:
        rows = [r for r in csv.DictReader(f) if r["batch"] == "64"]
    return float(rows[0]["rows_per_s"]) if rows else None


def job(results: Path, model: str, run: int) -> tuple[float, float, int] | None:
    """(records/s from the summary, records/s over the process's wall time, failures)."""
    log = results / f"batch_{model}_{run}.log"
    if not log.is_file():
        return None
    found = SUMMARY.search(log.read_text())
    if not found:
        return None
    records, failures = int(found.group(1)), int(found.group(2))
    env = dict(line.split("=", 1) for line in (results / f"batch_{model}_{run}.env").read_text().split())
    wall_s = int(env["wall_ms"]) / 1000
    return float(found.group(4)), records / wall_s, failures


def git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--large-rows", type=int, required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--nereid-bin", required=True)
    args = parser.parse_args()

    rev = git("rev-parse", "--short=12", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no"):
        rev += " (with uncommitted changes)"
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## Batch jobs",
        "",
        f"Written by `benches/batch.sh` on {now} (nereid at git `{rev}`, `{args.nereid_bin}`), "
        f"on {os.cpu_count()} CPUs ({cpu_model()}); rerun it to refresh. "
        + (f"Medians of {args.runs} runs, raw ONNX Runtime and `nereid batch` alternated."
           if args.runs > 1 else "One run of each, raw ONNX Runtime first."),
        "",
        "`nereid batch` reads a Parquet file of 256 FP32 per row (a `FixedSizeList` column, row "
        "groups of 65,536, Snappy) and writes a Parquet file with the output column and the "
        "`error` column; its time is the whole process (engine start, model load, reading, "
        "writing, the final Parquet file). Both models batch dynamically up to 64 "
        "(`max_queue_delay_microseconds` 2000) on ONNX Runtime's process-wide pool (a thread "
        "per core): mlp on two CPU instances (its config names none: the backend's default, "
        "as in Triton), mlp_large on one. Raw ONNX Runtime is the `raw_ort` example at batch "
        "64 with its default threads (the same pool size): `Session::run` back to back on one "
        "thread with one input buffer, no reading or writing.",
        "",
        "```text",
        "nereid batch --model-repository $MODELS --model $MODEL --input $MODEL.parquet "
        "--output out.parquet --quiet",
        "target/release/examples/raw_ort --model $MODELS/$MODEL/1/model.onnx --batch-sizes 64 "
        "--seconds S --csv FILE",
        "```",
        "",
        "| model | rows | raw ONNX Runtime rows/s (batch 64) | nereid batch rows/s (summary) "
        "| nereid batch rows/s (process wall time) | batch ÷ raw | failed records |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    ratios = {}
    for model, rows in [("mlp", args.rows), ("mlp_large", args.large_rows)]:
        raws = [r for run in range(1, args.runs + 1) if (r := raw_rate(args.results, model, run))]
        jobs = [j for run in range(1, args.runs + 1) if (j := job(args.results, model, run))]
        if not raws or not jobs:
            lines.append(f"| {model} | {rows:,} | (failed) | | | | |")
            continue
        raw = statistics.median(raws)
        summary = statistics.median(j[0] for j in jobs)
        wall = statistics.median(j[1] for j in jobs)
        failures = max(j[2] for j in jobs)
        ratios[model] = (summary / raw, wall / raw)
        lines.append(
            f"| {model} | {rows:,} | {raw:,.0f} | {summary:,.0f} | {wall:,.0f} | "
            f"{summary / raw:.0%} | {failures} |"
        )
    env = dict(
        line.split("=", 1) for line in (args.results / "run.env").read_text().split() if "=" in line
    )
    lines += [
        "",
        f"Each run, rows/s (raw ONNX Runtime / nereid batch); CPU busy before the benchmark: "
        f"{env.get('busy_before_pct', '?')} %, 1-minute load average {env.get('load_before', '?')} "
        f"before and {env.get('load_after', '?')} after:",
        "",
        "| run | mlp | mlp_large |",
        "|---|---|---|",
    ]
    for run in range(1, args.runs + 1):
        cells = []
        for model in ("mlp", "mlp_large"):
            raw, done = raw_rate(args.results, model, run), job(args.results, model, run)
            cells.append(f"{raw or 0:,.0f} / {done[0] if done else 0:,.0f}")
        lines.append(f"| {run} | {cells[0]} | {cells[1]} |")
    lines += ["", "### Reading", ""]
    for model, (summary, wall) in ratios.items():
        verdict = "meets" if summary >= 0.8 else "misses"
        lines.append(
            f"- {model}: `nereid batch` ran at {summary:.0%} of raw in-process ONNX Runtime's "
            f"batch-64 rate ({wall:.0%} counting engine start and model load); this {verdict} "
            "the aim of 80%."
        )
    lines.append("")
    write_section(args.out, BEGIN, END, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
