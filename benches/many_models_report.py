"""Writes the "Many models" section of docs/benchmarks.md from what
benches/many_models.sh leaves (BENCH_WRITE=0 prints it instead): the
probe's footprint, the request stream's figures on nereid under a budget
and with every model loaded, and how far Triton got loading every model.

    many_models_report.py RESULTS OUT MODELS MEGABYTES BUDGET GIT BUSY_PCT
"""

from __future__ import annotations

import datetime
import json
import os
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from sections import write_section  # noqa: E402

BEGIN = "<!-- many-models:begin -->"
END = "<!-- many-models:end -->"
MB = 1e6
GIB = 1 << 30


def load(results: Path, name: str) -> dict | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def num(value, digits: int = 0, scale: float = 1.0) -> str:
    return "–" if value is None else f"{value / scale:,.{digits}f}"


def ms(value_s) -> str:
    return "–" if value_s is None else f"{value_s * 1e3:,.0f}"


def stream_rows(runs: list[tuple[str, dict]]) -> list[str]:
    lines = [
        "| server | requests/s | found loaded: n, p50, p99 ms | waited for a load: n, p50, p99 ms "
        "| errors | server CPU µs/request | peak RSS MB |",
        "|---|---:|---|---|---:|---:|---:|",
    ]
    for label, r in runs:
        warm, cold = r["warm"], r["cold"]
        lines.append(
            f"| {label} | {num(r['rps'])} | {warm['count']:,}, {num(warm['p50_ms'], 1)}, "
            f"{num(warm['p99_ms'], 1)} | {cold['count']:,}, {num(cold['p50_ms'], 1)}, "
            f"{num(cold['p99_ms'], 1)} | {r['errors']:,} | {num(r['cpu_us_per_request'])} "
            f"| {num(r['peak_rss'], 0, MB)} |")
    return lines


def evictions(log_lines: str) -> tuple[int, float | None, float | None]:
    """From the budget run's "evicted the least recently used model" log
    lines: how many, the median bytes the victims were measured at, and
    the median seconds from one to the next."""
    times, sizes = [], []
    for line in log_lines.splitlines():
        clock = re.match(r"^I\d{4} (\d\d):(\d\d):(\d\d\.\d+)", line)
        size = re.search(r" bytes=(\d+)", line)
        if clock and size:
            h, m, s = clock.groups()
            times.append(int(h) * 3600 + int(m) * 60 + float(s))
            sizes.append(int(size.group(1)))
    gaps = [b - a for a, b in zip(times, times[1:]) if b >= a]
    return (len(sizes), statistics.median(sizes) if sizes else None,
            statistics.median(gaps) if gaps else None)


def budget_lines(b: dict, budget: int, probe: dict, evicted: str) -> list[str]:
    seconds = b["seconds"]
    over = 100 * (b["peak_rss"] / budget - 1)
    count, victim_bytes, gap = evictions(evicted)
    errors = []
    if b["errors"]:
        errors = ["", f"Errors by HTTP status (0: no answer): {b['statuses']}; the first answers:", "",
                  "```text", *b["error_samples"][:3], "```"]
    return [
        f"Under the budget, in the measured {seconds:.0f} s: {b['loads'] / seconds:,.1f} loads/s and "
        f"{b['evictions'] / seconds:,.1f} evictions/s ({b['loads']:,.0f} and "
        f"{b['evictions']:,.0f}); a load took {ms(b['load_p50_s'])} ms at "
        f"p50 and {ms(b['load_p99_s'])} ms at p99 (`nereid_model_load_seconds{{cause=\"demand\"}}`, "
        f"interpolated in its buckets; mean {ms(b['load_mean_s'])} ms), and a request's wait for a "
        f"load (queue for a load slot and room made included, `nereid_model_load_wait_seconds`) "
        f"{ms(b['wait_p50_s'])} ms at p50 (its buckets end at 120 s; mean {ms(b['wait_mean_s'])} ms). "
        f"{b['distinct_models']:,} models were asked for in the window; {b['models_resident']} were "
        f"loaded at its end. Peak RSS {num(b['peak_rss'], 0, MB)} MB against the budget of "
        f"{num(budget, 0, MB)} MB ({over:+.1f}%; sampled every 100 ms from the first request on; "
        f"{num(b['peak_rss_window'], 0, MB)} MB in the measured window).",
        "",
        f"Over the whole run (warm-up included) the server logged {count:,} evictions to make room; "
        f"the victims' measured footprints had a median of {num(victim_bytes, 1, MB)} MB (the "
        f"probe's median: {num(probe['footprint'], 1, MB)} MB), and one eviction followed another "
        f"after {num(gap, 2)} s at the median.",
        *errors,
    ]


def how_far(load_: dict, models: int) -> str:
    loaded = load_["loaded"]
    return {
        "all loaded": f"loaded all {models:,} models",
        "memory": (f"was stopped after loading {loaded:,} of {models:,} models, when the machine's "
                   f"available memory had fallen from {num(load_['series'][0][3], 1, GIB)} to "
                   f"{num(load_['available'], 1, GIB)} GiB (the bench stops it under "
                   f"{num(load_['min_available'], 0, GIB)} GiB, not to take the shared machine down)"),
        "exited": f"exited after loading {loaded:,} of {models:,} models",
        "time": f"had loaded {loaded:,} of {models:,} models when the bench's time ran out",
    }[load_["reason"]]


def triton_lines(results: Path, models: int, nereid_all: dict) -> list[str]:
    load_, run = load(results, "triton-load"), load(results, "triton")
    if load_ is None:
        return ["Triton: not run (it needs `TRITON_BACKEND_DIR`, a backends folder with Triton "
                "r24.10's native ONNX Runtime backend)."]
    rss, loaded = load_["peak_rss"], load_["loaded"]
    lines = [
        f"Triton 2.51 (native ONNX Runtime backend), `--model-control-mode=explicit "
        f"--load-model=*` on the same repository, {how_far(load_, models)} in "
        f"{load_['seconds']:,.0f} s, at {num(rss, 0, MB)} MB RSS: "
        f"{num(rss / loaded / MB if loaded else None, 1)} MB per model loaded, server included "
        f"(nereid with every model loaded: {num(nereid_all['peak_rss'] / models / MB, 1)} MB)."]
    if run is not None:
        lines[-1] += (
            f" Under the same stream, nereid with every model loaded / Triton: requests/s "
            f"{nereid_all['rps'] / run['rps']:.2f}, "
            f"p50 {nereid_all['all']['p50_ms'] / run['all']['p50_ms']:.2f}, "
            f"p99 {nereid_all['all']['p99_ms'] / run['all']['p99_ms']:.2f}, server CPU per request "
            f"{nereid_all['cpu_us_per_request'] / run['cpu_us_per_request']:.2f}.")
    copies = load(results, "triton-copies-load")
    if copies is not None:
        count = copies["loaded"]
        per_model = copies["peak_rss"] / max(count, 1) / MB
        lines += ["", f"Where Triton stops: on a repository of the same files under "
                  f"{copies['models'] // models} names each (every name its own folder and config, "
                  "`model.onnx` a link to the original, which Triton reads into a session of its "
                  f"own), it {how_far(copies, copies['models'])} in {copies['seconds']:,.0f} s, at "
                  f"{num(copies['peak_rss'], 0, MB)} MB RSS ({num(per_model, 1)} MB per model)."]
    for name in ("triton", "triton-copies"):
        path = results / f"{name}.errors"
        errors = path.read_text().strip() if path.is_file() else ""
        if errors:
            lines += ["", f"First errors in its log ({name}):", "", "```text", errors, "```"]
    return lines


def main() -> None:
    results, out, models, megabytes, budget, git, busy = sys.argv[1:8]
    results, models, budget = Path(results), int(models), int(budget)
    probe, b, a = load(results, "probe"), load(results, "budget"), load(results, "all")
    triton = load(results, "triton")
    evicted = (results / "budget.evictions").read_text() if (results / "budget.evictions").is_file() else ""
    all_ready_ms = int((results / "all.ready_ms").read_text())
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    runs = [(f"nereid, on demand, budget {num(budget, 0, MB)} MB", b),
            ("nereid, every model loaded", a)]
    if triton:
        runs.append(("Triton 2.51, every model loaded", triton))
    lines = [
        "## Many models",
        "",
        f"Written by `benches/many_models.sh` on {now} (git `{git}`), on {os.cpu_count()} CPUs "
        f"({busy}% busy before it started); rerun it to refresh. One run; compare within it.",
        "",
        f"{models:,} ONNX models of {megabytes} MB of random FP32 weights each (different seeds; "
        "INDEX picks a row, ROW is that row), made by `benches/many_models_bench.py make`. "
        f"One model's footprint, the median of the repository index's `memory_bytes` after "
        f"{probe['count']} loads, is {num(probe['footprint'], 2, MB)} MB; the budget is the "
        f"server's RSS with none loaded once ONNX Runtime is set up ({num(probe['rss_unloaded'], 0, MB)} "
        f"MB, after those {probe['count']} were unloaded again; {num(probe['rss_ready'], 0, MB)} MB "
        f"when ready) plus {models // 10:,} footprints: {num(budget, 0, MB)} MB. "
        f"{b['clients']} closed-loop HTTP/JSON clients (aiohttp, "
        f"{b['processes']} processes, on the same machine) draw models from a Zipf distribution "
        f"with exponent {b['zipf']} (the most asked-for model gets the share 1/H; a fixed "
        "permutation maps ranks to models, the same stream for every server), "
        f"{b['warmup']:.0f} s unmeasured, then {b['seconds']:.0f} s measured:",
        "",
        "```text",
        "nereid --model-control-mode=on_demand --model-memory-budget $BUDGET   # budget",
        "nereid --model-control-mode=explicit --load-model='*'                # every model loaded",
        "```",
        "",
        *stream_rows(runs),
        "",
        "A request waited for a load when a `model ready model=<its model>` line of the server's "
        "log falls between its start and its end; the others found their model loaded. Server "
        "CPU: user+system ticks of the server over the window, per request answered.",
        "",
        *budget_lines(b, budget, probe, evicted),
        "",
        f"Every model loaded: nereid was ready in {all_ready_ms / 1e3:,.1f} s at "
        f"{num(a['peak_rss'], 0, MB)} MB peak RSS. Ratios in this run, budget / every model "
        f"loaded: requests/s {b['rps'] / a['rps']:.3g}; warm p50 "
        f"{b['warm']['p50_ms'] / a['warm']['p50_ms']:.2f}, warm p99 "
        f"{b['warm']['p99_ms'] / a['warm']['p99_ms']:.2f}; peak RSS "
        f"{b['peak_rss'] / a['peak_rss']:.2f}.",
        "",
        *triton_lines(results, models, a),
        "",
    ]
    text = "\n".join(lines) + "\n"
    if os.environ.get("BENCH_WRITE", "1") == "0":
        print(text)
    else:
        write_section(Path(out), BEGIN, END, text)


if __name__ == "__main__":
    main()
