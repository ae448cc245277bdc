"""Writes the "Sequence batching" section of docs/benchmarks.md from the
results benches/sequence.sh leaves: perf_analyzer's CSV per cell and the
server CPU per inference.

    sequence_report.py RESULTS OUT REQUESTS GIT SERVERS CONCURRENCIES
"""

from __future__ import annotations

import csv
import datetime
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sections import write_section  # noqa: E402

BEGIN = "<!-- sequence:begin -->"
END = "<!-- sequence:end -->"
MODELS = {"acc_direct": "direct", "acc_oldest": "oldest"}


def cell(results: Path, name: str):
    """(infer/s, p50 µs, p99 µs, CPU µs per inference, inferences per
    execution) or Nones."""
    row = None
    path = results / f"{name}.csv"
    if path.is_file():
        with path.open() as f:
            rows = list(csv.DictReader(f))
        row = rows[0] if rows else None
    cpu = None
    cpu_path = results / f"{name}.cpu"
    if cpu_path.is_file():
        values = dict(line.split("=", 1) for line in cpu_path.read_text().split())
        cpu = float(values["us_per_inference"])
    batch = None
    batch_path = results / f"{name}.batch"
    if batch_path.is_file() and batch_path.read_text().strip():
        batch = float(batch_path.read_text())
    if row is None:
        return None, None, None, cpu, batch
    return (float(row["Inferences/Second"]), float(row["p50 latency"]),
            float(row["p99 latency"]), cpu, batch)


def fmt(value, digits=0):
    return "–" if value is None else f"{value:,.{digits}f}"


def ratio(a, b):
    return "–" if a is None or b is None or b == 0 else f"{a / b:.2f}×"


def main() -> None:
    results, out, requests, git, servers, concurrencies = sys.argv[1:7]
    results = Path(results)
    servers = servers.split()
    with_triton = "triton" in servers
    lines = [
        "## Sequence batching",
        "",
        f"Written by `benches/sequence.sh` on "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC (git `{git}`), "
        f"on {os.cpu_count()} CPUs; rerun it to refresh. One run per cell.",
        "",
        "The model is the accumulator of `tests/python/test_sequence.py`: ONNX, implicit "
        "state (`INPUT_STATE` → `OUTPUT_STATE`, kept by the server between steps), START, END, "
        "READY and CORRID controls; `max_batch_size` 32 and two CPU instances, so 64 sequence "
        "slots (`direct`) or candidate sequences (`oldest`: `preferred_batch_size` [16, 32], "
        "`max_queue_delay_microseconds` 1000). At 256 concurrent sequences, 192 wait in the "
        "backlog at any time. "
        + ("Triton is 2.51 with its native ONNX Runtime backend (see \"What is compared\"), "
           "serving the same repository, measured in turn with nereid cell by cell."
           if with_triton else "Only nereid ran (no `TRITON_BACKEND_DIR`)."),
        "",
        "```text",
        ".tools/perf_analyzer/perf_analyzer.sh -m $MODEL -i grpc -u 127.0.0.1:$PORT "
        "--concurrency-range $C --sequence-length 20 --measurement-mode count_windows "
        f"--measurement-request-count {requests} -s 50 -r 5 -f $CSV",
        "```",
        "",
        "Each concurrent perf_analyzer context runs sequences of 20 steps one after another; "
        "latencies are per step, client-side, in µs. Server CPU per inference is as in the "
        "first table. Inferences per execution is the model's `inference_count` over its "
        "`execution_count` across the cell (from the statistics): the mean batch, which "
        "Triton's oldest strategy keeps small under load (its issue #4841). Executions count "
        "only the rows that carry requests on both servers; a direct batch's idle rows "
        "(READY false) are not inferences.",
        "",
    ]
    if with_triton:
        lines += [
            "| strategy | sequences | nereid infer/s | Triton infer/s | nereid ÷ Triton | "
            "nereid p50 | Triton p50 | nereid p99 | Triton p99 | nereid CPU µs/infer | "
            "Triton CPU µs/infer | CPU nereid ÷ Triton | nereid inferences per execution | "
            "Triton inferences per execution |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    else:
        lines += ["| strategy | sequences | infer/s | p50 | p99 | CPU µs/infer | "
                  "inferences per execution |",
                  "|---|---|---|---|---|---|---|"]
    for model, strategy in MODELS.items():
        for c in concurrencies.split():
            n = cell(results, f"nereid_{model}_c{c}")
            if with_triton:
                t = cell(results, f"triton_{model}_c{c}")
                lines.append(
                    f"| {strategy} | {c} | {fmt(n[0])} | {fmt(t[0])} | {ratio(n[0], t[0])} | "
                    f"{fmt(n[1])} | {fmt(t[1])} | {fmt(n[2])} | {fmt(t[2])} | {fmt(n[3], 1)} | "
                    f"{fmt(t[3], 1)} | {ratio(n[3], t[3])} | {fmt(n[4], 1)} | {fmt(t[4], 1)} |")
            else:
                lines.append(f"| {strategy} | {c} | {fmt(n[0])} | {fmt(n[1])} | {fmt(n[2])} | "
                             f"{fmt(n[3], 1)} | {fmt(n[4], 1)} |")
    lines.append("")
    write_section(Path(out), BEGIN, END, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
