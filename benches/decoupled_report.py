"""Writes the "Decoupled streaming" section of docs/benchmarks.md (model
stream_n), or the "Paced streams on one instance" section (stream_paced),
from the JSON lines benches/decoupled.sh leaves (one per server and
concurrency).

    decoupled_report.py RESULTS OUT RESPONSES REQUESTS GIT CONCURRENCIES [MODEL]
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sections import write_section  # noqa: E402

# Per model: the section's title, its markers, and what the model does.
SECTIONS = {
    "stream_n": (
        "Decoupled streaming",
        "decoupled",
        "a decoupled Python model (two instances) that sends {responses} responses per request "
        "from `execute`, the last with the final flag",
    ),
    "stream_paced": (
        "Paced streams on one instance",
        "decoupled-paced",
        "a decoupled Python model with one instance whose `execute` returns at once while a "
        "thread per request sends {responses} responses 10 ms apart, the last with the final "
        "flag (as an LLM backend's `model.py` streams tokens), so the instance must serve every "
        "stream at the same time. The aim: 16 streams give at least 12 times the responses per "
        "second of one stream, as on Triton",
    ),
}


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
    model = sys.argv[7] if len(sys.argv) > 7 else "stream_n"
    title, marker, what = SECTIONS[model]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"## {title}",
        "",
        f"Written by `benches/decoupled.sh` on {stamp} (git `{git}`), on {os.cpu_count()} CPUs; "
        "rerun it to refresh. One run per cell.",
        "",
        f"The model is `benches/decoupled_models/{model}`: {what.format(responses=responses)}; "
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
    base = {server: load(results, f"{server}_c{concurrencies[0]}") for server in ("nereid", "triton")}
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
    if len(concurrencies) > 1:
        c = concurrencies[-1]
        for server in ("nereid", "triton"):
            top, one = load(results, f"{server}_c{c}"), base[server]
            rate = lambda r: None if r is None else r.get("responses_per_s")  # noqa: E731
            lines.append(
                f"{server}: {c} streams give {ratio(rate(top), rate(one), 1)} the responses per "
                f"second of {concurrencies[0]}."
            )
        lines.append("")
    write_section(out, f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
