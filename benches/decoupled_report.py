"""Writes the "Decoupled streaming" section of docs/benchmarks.md from the
JSON lines benches/decoupled.sh leaves (one per server and concurrency).

    decoupled_report.py RESULTS OUT RESPONSES REQUESTS GIT CONCURRENCIES
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sections import write_section  # noqa: E402

BEGIN = "<!-- decoupled:begin -->"
END = "<!-- decoupled:end -->"


def load(results: Path, name: str):
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def ratio(a, b, digits=2):
    return f"{a / b:.{digits}f}×" if a is not None and b else "-"


def number(value, fmt="{:,.1f}"):
    return "-" if value is None else fmt.format(value)


def main() -> None:
    results, out = Path(sys.argv[1]), Path(sys.argv[2])
    responses, requests, git = sys.argv[3], sys.argv[4], sys.argv[5]
    concurrencies = sys.argv[6].split()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## Decoupled streaming",
        "",
        f"Written by `benches/decoupled.sh` on {stamp} (git `{git}`), on {os.cpu_count()} CPUs; "
        "rerun it to refresh. One run per cell.",
        "",
        f"The model is `benches/decoupled_models/stream_n`: a decoupled Python model (two instances) "
        f"that sends {responses} responses per request from `execute`, the last with the final flag; "
        "the same `model.py` on both servers. Triton is 2.51 with its Python backend. The client "
        "(`benches/decoupled_client.py`, tritonclient's asyncio gRPC client in one process) keeps "
        f"C streams busy, each sending {requests} requests one after another and reading every "
        "response. Time to first response and to the last are per request, client-side, in ms; "
        "server CPU is the whole process tree's (the Python workers or stubs included) over the "
        "responses sent.",
        "",
        "| streams | nereid responses/s | Triton responses/s | nereid ÷ Triton | nereid first response p50 / p99 | Triton first response p50 / p99 | Triton ÷ nereid (first, p50) | nereid last response p50 | Triton last response p50 | nereid CPU µs/response | Triton CPU µs/response |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in concurrencies:
        n, t = load(results, f"nereid_c{c}"), load(results, f"triton_c{c}")
        get = lambda r, k: None if r is None else r.get(k)  # noqa: E731
        lines.append(
            f"| {c} | {number(get(n, 'responses_per_s'), '{:,.0f}')} | "
            f"{number(get(t, 'responses_per_s'), '{:,.0f}')} | "
            f"{ratio(get(n, 'responses_per_s'), get(t, 'responses_per_s'))} | "
            f"{number(get(n, 'ttfr_p50_ms'), '{:.2f}')} / {number(get(n, 'ttfr_p99_ms'), '{:.2f}')} | "
            f"{number(get(t, 'ttfr_p50_ms'), '{:.2f}')} / {number(get(t, 'ttfr_p99_ms'), '{:.2f}')} | "
            f"{ratio(get(t, 'ttfr_p50_ms'), get(n, 'ttfr_p50_ms'), 1)} | "
            f"{number(get(n, 'total_p50_ms'), '{:.1f}')} | {number(get(t, 'total_p50_ms'), '{:.1f}')} | "
            f"{number(get(n, 'cpu_us_per_response'))} | {number(get(t, 'cpu_us_per_response'))} |"
        )
    lines.append("")
    write_section(out, BEGIN, END, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
