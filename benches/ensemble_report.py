#!/usr/bin/env python3
"""Writes the "Ensembles" section of docs/benchmarks.md from the
perf_analyzer CSV files of benches/ensemble.sh.

    ensemble_report.py RESULTS_DIR BENCHMARKS_MD REQUESTS_PER_WINDOW
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from sections import write_section

BEGIN = "<!-- ensemble:begin -->"
END = "<!-- ensemble:end -->"
MODELS = ("mlp_pipeline", "preprocess", "mlp")


def read(results: Path, server: str, model: str, c: int) -> tuple[float, float] | None:
    """(infer/s, p50 µs) of one run, if it produced a result."""
    path = results / f"{server}_{model}_c{c}.csv"
    if not path.is_file():
        return None
    with path.open() as f:
        row = next(csv.DictReader(f), None)
    if row is None:
        return None
    return float(row["Inferences/Second"]), float(row["p50 latency"])


def fmt(cell: tuple[float, float] | None) -> str:
    return "n/a" if cell is None else f"{cell[0]:,.0f} / {cell[1]:,.0f}"


def section(results: Path, requests: str) -> str:
    found = sorted({p.stem.split("_c")[-1] for p in results.glob("*.csv")}, key=int)
    concurrencies = [int(c) for c in found]
    servers = [s for s in ("nereid", "triton") if any(results.glob(f"{s}_*.csv"))]
    lines = [
        "## Ensembles",
        "",
        "`model_repository/mlp_pipeline`: `preprocess` (UINT8 [256] to FP32, /255) feeding "
        "`mlp`, beside each step alone, gRPC, perf_analyzer 2.51 "
        f"(`-b 1 --measurement-mode count_windows --measurement-request-count {requests} "
        "-s 50 -r 5`), produced by `benches/ensemble.sh`. Triton 2.51 serves the same "
        "ensemble, its steps running the same ONNX files in the Python backend. "
        "Cells: infer/s / p50 µs.",
        "",
        "| server | model | " + " | ".join(f"c{c}" for c in concurrencies) + " |",
        "|---|---|" + "---|" * len(concurrencies),
    ]
    for server in servers:
        for model in MODELS:
            cells = [fmt(read(results, server, model, c)) for c in concurrencies]
            lines.append(f"| {server} | {model} | " + " | ".join(cells) + " |")
    lines += ["", "Against the aims (nereid):", ""]
    for c in concurrencies:
        ens = read(results, "nereid", "mlp_pipeline", c)
        steps = [read(results, "nereid", m, c) for m in MODELS[1:]]
        if ens is None or any(s is None for s in steps):
            continue
        slowest = min(steps, key=lambda s: s[0])
        share = 100 * ens[0] / slowest[0]
        over = ens[1] - sum(s[1] for s in steps)
        lines.append(
            f"- c{c}: ensemble throughput {share:.0f}% of its slowest step alone "
            f"({ens[0]:,.0f} against {slowest[0]:,.0f} infer/s); p50 {over:+,.0f} µs "
            "against the sum of the steps' p50s"
        )
        # Both steps share the same cores here: an ensemble request costs
        # the CPU of one request of each, so its ceiling is the harmonic sum.
        ceiling = 1 / sum(1 / s[0] for s in steps)
        lines[-1] += f"; {100 * ens[0] / ceiling:.0f}% of the shared-core ceiling ({ceiling:,.0f} infer/s)"
        triton = read(results, "triton", "mlp_pipeline", c)
        if triton is not None:
            lines[-1] += f"; {ens[0] / triton[0]:.1f}x Triton's ensemble throughput"
    return "\n".join(lines) + "\n"


def main() -> None:
    results, out, requests = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    write_section(out, BEGIN, END, section(results, requests))


if __name__ == "__main__":
    main()
