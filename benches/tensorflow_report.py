#!/usr/bin/env python3
"""Writes the "TensorFlow SavedModel" section of docs/benchmarks.md from the
perf_analyzer CSV files, server CPU files (.cpu) and raw_mlp_tf.jsonl
ceiling of benches/tensorflow.sh.

    tensorflow_report.py RESULTS_DIR BENCHMARKS_MD REQUESTS_PER_WINDOW
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path

from sections import write_section

BEGIN = "<!-- tensorflow:begin -->"
END = "<!-- tensorflow:end -->"
COLUMNS = ("Inferences/Second", "p50 latency")


def read(results: Path, model: str, c: int) -> dict | None:
    """Each column's median over the rounds, with the server's CPU µs per
    inference (median of the rounds that have it)."""
    rows, cpu = [], []
    for path in sorted(results.glob(f"{model}_c{c}_r*.csv")):
        with path.open() as f:
            row = next(csv.DictReader(f), None)
        if row is not None:
            rows.append(row)
        env = path.with_suffix(".cpu")
        if env.is_file():
            values = dict(line.split("=", 1) for line in env.read_text().split())
            cpu.append(float(values["us_per_inference"]))
    if not rows:
        return None
    median = {k: statistics.median(float(r[k]) for r in rows) for k in COLUMNS}
    return {**median, "cpu_us": statistics.median(cpu) if cpu else None, "rounds": len(rows)}


def best_ceiling(path: Path) -> dict[int, dict]:
    best: dict[int, dict] = {}
    if not path.is_file():
        return best
    for r in map(json.loads, path.read_text().splitlines()):
        if r["batch"] not in best or r["rows_per_s"] > best[r["batch"]]["rows_per_s"]:
            best[r["batch"]] = r
    return best


def cell(row: dict | None) -> str:
    if row is None:
        return "n/a"
    cpu = "n/a" if row["cpu_us"] is None else f"{row['cpu_us']:,.0f}"
    return f"{row['Inferences/Second']:,.0f} / {row['p50 latency']:,.0f} / {cpu}"


def ratios(results: Path, concurrencies: list[int], raw: dict[int, dict]) -> list[str]:
    lines = []
    for c in concurrencies:
        onnx, tf = read(results, "mlp", c), read(results, "mlp_tf", c)
        if not (onnx and tf):
            continue
        text = (f"- c{c}: SavedModel/ONNX throughput {tf['Inferences/Second'] / onnx['Inferences/Second']:.2f}, "
                f"p50 {tf['p50 latency'] / onnx['p50 latency']:.2f}")
        if tf["cpu_us"] and onnx["cpu_us"]:
            text += f", server CPU per inference {tf['cpu_us'] / onnx['cpu_us']:.2f}"
        lines.append(text)
    top, ceiling = max(concurrencies), raw.get(64)
    served = read(results, "mlp_tf", top)
    if served and ceiling:
        lines.append(f"- c{top}: the SavedModel served {100 * served['Inferences/Second'] / ceiling['rows_per_s']:.0f}% "
                     f"of TensorFlow's own batch-64 rate in-process ({served['Inferences/Second']:,.0f} against "
                     f"{ceiling['rows_per_s']:,.0f} rows/s)")
    served = read(results, "mlp_tf", 1)
    if served and raw.get(1):
        lines.append(f"- c1: the served SavedModel's p50 is {served['p50 latency'] - raw[1]['p50_us']:+,.0f} µs over "
                     f"TensorFlow's own batch-1 call in-process ({raw[1]['p50_us']:,.0f} µs)")
    return lines


def section(results: Path, requests: str) -> str:
    concurrencies = sorted({int(p.stem.split("_c")[-1].split("_r")[0]) for p in results.glob("*.csv")})
    rounds = max((read(results, m, c) or {}).get("rounds", 0) for m in ("mlp", "mlp_tf") for c in concurrencies)
    raw = best_ceiling(results / "raw_mlp_tf.jsonl")
    threads = next((r["threads"] for r in raw.values()), "?")
    lines = [
        "## TensorFlow SavedModel",
        "",
        "The example MLP (256 → 1024 → 1024 → 16, `model_repository/mlp`) as ONNX and as a Keras model "
        "exported to a SavedModel with the same weights (`benches/tensorflow_models.py`), served by one "
        "nereid in one run; gRPC, perf_analyzer 2.51 (`-b 1 --measurement-mode count_windows "
        f"--measurement-request-count {requests} -s 50 -r 5`), produced by `benches/tensorflow.sh`. Both "
        "batch dynamically up to 64 with a 2 ms queue delay, on each backend's default threads. The models "
        f"are measured in alternation and each cell is the median of {rounds} rounds. Cells: infer/s / "
        "p50 µs / server CPU µs per inference (the server's user+system time over the inferences it "
        "counted). The ceiling is TensorFlow 2.21 in-process (`benches/raw_tensorflow.py`: python's "
        f"`tf.saved_model.load`, the serving signature called back to back, {threads} threads, best of a "
        "run before and a run after the server).",
        "",
        "| model | " + " | ".join(f"c{c}" for c in concurrencies) + " |",
        "|---|" + "---|" * len(concurrencies),
        "| ONNX Runtime `mlp` | " + " | ".join(cell(read(results, "mlp", c)) for c in concurrencies) + " |",
        "| SavedModel `mlp_tf` | " + " | ".join(cell(read(results, "mlp_tf", c)) for c in concurrencies) + " |",
        "",
        "| TensorFlow in-process, batch | rows/s | p50 µs per call |",
        "|---|---|---|",
    ]
    lines += [f"| {b} | {r['rows_per_s']:,.0f} | {r['p50_us']:,.0f} |" for b, r in sorted(raw.items())]
    lines += ["", *ratios(results, concurrencies, raw), ""]
    return "\n".join(lines)


def main() -> None:
    results, out, requests = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    write_section(out, BEGIN, END, section(results, requests))


if __name__ == "__main__":
    main()
