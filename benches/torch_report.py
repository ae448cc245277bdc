#!/usr/bin/env python3
"""Writes the "TorchScript" section of docs/benchmarks.md from the
perf_analyzer CSV files and raw_torch.jsonl of benches/torch.sh.

    torch_report.py RESULTS_DIR BENCHMARKS_MD REQUESTS_PER_WINDOW
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from sections import write_section

BEGIN = "<!-- torch:begin -->"
END = "<!-- torch:end -->"
MODELS = (("mlp", "ONNX (`model_repository/mlp`)"), ("mlp_torch", "TorchScript (`model_repository_torch/mlp_torch`)"))


def read(results: Path, model: str, c: int) -> dict | None:
    path = results / f"{model}_c{c}.csv"
    if not path.is_file():
        return None
    with path.open() as f:
        return next(csv.DictReader(f), None)


def section(results: Path, requests: str) -> str:
    raw = {r["batch"]: r for r in map(json.loads, (results / "raw_torch.jsonl").read_text().splitlines())}
    concurrencies = sorted({int(p.stem.split("_c")[-1]) for p in results.glob("*.csv")})
    lines = [
        "## TorchScript",
        "",
        "The same MLP (256 → 1024 → 1024 → 16, the same weights) as ONNX and as TorchScript, "
        "served by one nereid built with `--features nereid-server/torch`, in one run; gRPC, "
        f"perf_analyzer 2.51 (`-b 1 --measurement-mode count_windows --measurement-request-count {requests} "
        "-s 50 -r 5`), produced by `benches/torch.sh`. Both models batch dynamically up to 64 "
        "with a 2 ms queue delay. Cells: infer/s / p50 µs / p99 µs.",
        "",
        "| model | " + " | ".join(f"c{c}" for c in concurrencies) + " |",
        "|---|" + "---|" * len(concurrencies),
    ]
    for model, label in MODELS:
        cells = []
        for c in concurrencies:
            row = read(results, model, c)
            cells.append("n/a" if row is None else
                         f"{float(row['Inferences/Second']):,.0f} / {float(row['p50 latency']):,.0f} / {float(row['p99 latency']):,.0f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "The ceiling, libtorch in-process (`benches/raw_torch.py`: python's `torch.jit.load`, "
        "forward() back to back under inference mode, "
        f"{next(iter(raw.values()))['threads']} intra-op threads):",
        "",
        "| batch | rows/s | p50 µs per call |",
        "|---|---|---|",
    ]
    for batch, r in sorted(raw.items()):
        lines.append(f"| {batch} | {r['rows_per_s']:,.0f} | {r['p50_us']:,.0f} |")
    lines += ["", "Against the aims:", ""]
    top = max(concurrencies)
    torch_top, ceiling = read(results, "mlp_torch", top), raw.get(64)
    if torch_top and ceiling:
        share = 100 * float(torch_top["Inferences/Second"]) / ceiling["rows_per_s"]
        lines.append(f"- c{top} throughput of the TorchScript MLP: {share:.0f}% of the batch-64 ceiling "
                     f"({float(torch_top['Inferences/Second']):,.0f} against {ceiling['rows_per_s']:,.0f} rows/s; aim: at least 50%)")
    onnx_c1, torch_c1 = read(results, "mlp", 1), read(results, "mlp_torch", 1)
    if onnx_c1 and torch_c1:
        ratio = float(torch_c1["p50 latency"]) / float(onnx_c1["p50 latency"])
        lines.append(f"- c1 p50: TorchScript {float(torch_c1['p50 latency']):,.0f} µs, ONNX {float(onnx_c1['p50 latency']):,.0f} µs "
                     f"({100 * (ratio - 1):+.0f}%; aim: within 20%)")
    return "\n".join(lines) + "\n"


def main() -> None:
    results, out, requests = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    write_section(out, BEGIN, END, section(results, requests))


if __name__ == "__main__":
    main()
