#!/usr/bin/env python3
"""Writes the "TorchScript" section of docs/benchmarks.md from the
perf_analyzer CSV files and raw_*.jsonl ceilings of benches/torch.sh.

    torch_report.py RESULTS_DIR BENCHMARKS_MD REQUESTS_PER_WINDOW
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path

from sections import write_section

BEGIN = "<!-- torch:begin -->"
END = "<!-- torch:end -->"
COLUMNS = ("Inferences/Second", "p50 latency", "p99 latency")
# (ONNX model, TorchScript twin, what it is)
PAIRS = (
    ("mlp", "mlp_torch", "the example MLP, 256 → 1024 → 1024 → 16 (`model_repository/mlp`, `model_repository_torch/mlp_torch`)"),
    ("mlp_large", "mlp_large_torch", "the compute-bound MLP of the batching benchmark, 256 → 4096 → 4096 → 4096 → 16"),
)


def read(results: Path, model: str, c: int) -> dict | None:
    """Each column's median over the rounds that produced a result."""
    rows = []
    for path in sorted(results.glob(f"{model}_c{c}_r*.csv")):
        with path.open() as f:
            row = next(csv.DictReader(f), None)
        if row is not None:
            rows.append(row)
    if not rows:
        return None
    median = {k: statistics.median(float(r[k]) for r in rows) for k in COLUMNS}
    return {**median, "rounds": len(rows)}


def best_ceiling(path: Path) -> dict[int, dict]:
    """Per batch size, the best of the in-process runs."""
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
    return " / ".join(f"{row[k]:,.0f}" for k in COLUMNS)


def pair_section(results: Path, onnx: str, torch: str, what: str, concurrencies: list[int]) -> list[str]:
    raw = best_ceiling(results / f"raw_{torch}.jsonl")
    lines = [
        f"### {what[0].upper()}{what[1:]}",
        "",
        "| model | " + " | ".join(f"c{c}" for c in concurrencies) + " |",
        "|---|" + "---|" * len(concurrencies),
        f"| ONNX `{onnx}` | " + " | ".join(cell(read(results, onnx, c)) for c in concurrencies) + " |",
        f"| TorchScript `{torch}` | " + " | ".join(cell(read(results, torch, c)) for c in concurrencies) + " |",
        "",
        "| libtorch in-process, batch | rows/s | p50 µs per call |",
        "|---|---|---|",
    ]
    lines += [f"| {b} | {r['rows_per_s']:,.0f} | {r['p50_us']:,.0f} |" for b, r in sorted(raw.items())]
    lines += [""]
    top = max(concurrencies)
    served, ceiling = read(results, torch, top), raw.get(64)
    if served and ceiling:
        share = 100 * served["Inferences/Second"] / ceiling["rows_per_s"]
        lines.append(f"- c{top}: the TorchScript model served {share:.0f}% of libtorch's batch-64 ceiling "
                     f"({served['Inferences/Second']:,.0f} against {ceiling['rows_per_s']:,.0f} rows/s; aim: at least 50%)")
    onnx_c1, torch_c1 = read(results, onnx, 1), read(results, torch, 1)
    if onnx_c1 and torch_c1:
        ratio = torch_c1["p50 latency"] / onnx_c1["p50 latency"]
        lines.append(f"- c1 p50: TorchScript {torch_c1['p50 latency']:,.0f} µs, ONNX {onnx_c1['p50 latency']:,.0f} µs "
                     f"({100 * (ratio - 1):+.0f}%; aim: within 20%)")
    if torch_c1 and raw.get(1):
        lines.append(f"- c1: the served TorchScript p50 is {torch_c1['p50 latency'] - raw[1]['p50_us']:+,.0f} µs "
                     f"over libtorch's own batch-1 call in-process ({raw[1]['p50_us']:,.0f} µs)")
    return lines + [""]


def section(results: Path, requests: str) -> str:
    concurrencies = sorted({int(p.stem.split("_c")[-1].split("_r")[0]) for p in results.glob("*.csv")})
    rounds = max((read(results, m, c) or {}).get("rounds", 0)
                 for pair in PAIRS for m in pair[:2] for c in concurrencies)
    threads = next((r["threads"] for p in results.glob("raw_*.jsonl") for r in best_ceiling(p).values()), "?")
    lines = [
        "## TorchScript",
        "",
        "The same MLP (the same weights) as ONNX and as TorchScript, served by one nereid built "
        "with `--features nereid-server/torch`, in one run; gRPC, perf_analyzer 2.51 "
        f"(`-b 1 --measurement-mode count_windows --measurement-request-count {requests} -s 50 -r 5`, "
        "a tenth of the requests for the large MLP), produced by `benches/torch.sh`. Every model "
        "batches dynamically up to 64 with a 2 ms queue delay. The models are measured in "
        f"alternation and each cell is the median of {rounds} rounds (this machine's speed drifts "
        "by tens of percent between minutes). Cells: infer/s / p50 µs / p99 µs. The ceiling is "
        "libtorch in-process (`benches/raw_torch.py`: python's `torch.jit.load`, forward() back to "
        f"back under inference mode, {threads} intra-op threads, best of a run before and a run "
        "after the server).",
        "",
    ]
    for onnx, torch, what in PAIRS:
        lines += pair_section(results, onnx, torch, what, concurrencies)
    return "\n".join(lines)


def main() -> None:
    results, out, requests = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    write_section(out, BEGIN, END, section(results, requests))


if __name__ == "__main__":
    main()
