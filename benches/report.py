"""Writes docs/benchmarks.md from the results folder benches/run.sh fills.

The folder holds, per server S (nereid, triton):
  S.env                   ready_ms, rss/pss (kB) and process counts at start and end
  S.metadata.json         GET /v2 of the server
  S_MODEL_PROTO_cC.csv    perf_analyzer -f output, one row per concurrency
  S_MODEL_PROTO_cC.cpu    the server's CPU ticks, inferences and tick rate
                          over that perf_analyzer run
and once:
  triton.backend          which Triton ran: backend=onnxruntime (native) or
                          python, and the ONNX Runtime release inside it
A missing CSV is a failed perf_analyzer run; it shows as "failed" in the tables.
"""

import argparse
import csv
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

# The matrix measured; main() narrows it to what benches/run.sh ran.
MODELS = ("simple", "mlp")
PROTOCOLS = ("http", "grpc")
CONCURRENCIES = (1, 8)
LABELS = {"nereid": "nereid", "triton": "Triton"}
# benches/batching.sh owns the part of the report between these markers;
# rewriting the rest keeps it.
BATCHING_BEGIN = "<!-- batching:begin (benches/batching.sh writes this section) -->"
BATCHING_END = "<!-- batching:end -->"
# perf_analyzer 2.51's CSV columns this report reads (latencies in us).
COLUMNS = {
    "throughput": "Inferences/Second",
    "p50": "p50 latency",
    "p90": "p90 latency",
    "p99": "p99 latency",
}


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"report: {path} has no data row")
    missing = [c for c in COLUMNS.values() if c not in rows[0]]
    if missing:
        sys.exit(f"report: {path} lacks columns {missing}; header is {list(rows[0])}")
    return {key: float(rows[0][col]) for key, col in COLUMNS.items()}


def read_kv(path):
    """key=value lines as strings; empty when the file is missing."""
    values = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                key, _, value = line.strip().partition("=")
                if key:
                    values[key] = value
    return values


def read_env(path):
    return {key: float(v) if "." in v else int(v) for key, v in read_kv(path).items()}


def read_cpu(path):
    """Server CPU µs per inference from a .cpu file, or None."""
    env = read_env(path)
    if not env.get("inferences") or not env.get("ticks_per_s"):
        return None
    return env["ticks"] * 1e6 / env["ticks_per_s"] / env["inferences"]


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def matrix():
    """Every (model, protocol, concurrency) cell, in table order."""
    return [(m, p, c) for m in MODELS for p in PROTOCOLS for c in CONCURRENCIES]


def load(results, servers):
    data = {}
    for server in servers:
        cells, cpu, retried = {}, {}, set()
        for key in matrix():
            base = os.path.join(results, "{}_{}_{}_c{}".format(server, *key))
            path = base + ".csv"
            cells[key] = read_csv(path) if os.path.exists(path) else None
            cpu[key] = read_cpu(base + ".cpu")
            if os.path.exists(base + ".retried"):
                retried.add(key)
        data[server] = {
            "cells": cells,
            "cpu": cpu,
            "retried": retried,
            "env": read_env(os.path.join(results, f"{server}.env")),
            "meta": read_json(os.path.join(results, f"{server}.metadata.json")),
        }
    return data


def machine():
    model = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": model,
        "mem_gib": mem_kb / 1024 / 1024,
        "kernel": f"{platform.system()} {platform.release()}",
    }


def git_rev():
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()

    rev = git("rev-parse", "--short=12", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        rev += " (with uncommitted changes)"
    return rev


def fmt_num(value, digits=0):
    return "failed" if value is None else f"{value:,.{digits}f}"


def cell(data, server, key, model, proto, c):
    row = data.get(server, {}).get("cells", {}).get((model, proto, c))
    return None if row is None else row[key]


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def cpu_cell(data, server, key):
    return data.get(server, {}).get("cpu", {}).get(key)


def fmt_ratio(r):
    return "—" if r is None else f"{r:.2f}×"


def perf_head(servers, both):
    head = ["model", "protocol", "concurrency"]
    for key, unit in (("throughput", "infer/s"), ("p50", "p50 µs"), ("p99", "p99 µs")):
        head += [f"{LABELS[s]} {unit}" for s in servers]
        if both and key == "throughput":
            head.append("nereid ÷ Triton")
    head += [f"{LABELS[s]} CPU µs/infer" for s in servers]
    if both:
        head.append("CPU nereid ÷ Triton")
    return head


def perf_row(data, servers, both, k):
    row = [f"`{k[0]}`", k[1], str(k[2])]
    for key in ("throughput", "p50", "p99"):
        for s in servers:
            mark = " †" if k in data[s]["retried"] else ""
            row.append(fmt_num(cell(data, s, key, *k)) + mark)
        if both and key == "throughput":
            row.append(fmt_ratio(ratio(cell(data, "nereid", key, *k),
                                       cell(data, "triton", key, *k))))
    for s in servers:
        v = cpu_cell(data, s, k)
        row.append("—" if v is None else fmt_num(v))
    if both:
        row.append(fmt_ratio(ratio(cpu_cell(data, "nereid", k), cpu_cell(data, "triton", k))))
    return row


def perf_table(data, servers):
    both = "nereid" in servers and "triton" in servers
    head = perf_head(servers, both)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k in matrix():
        lines.append("| " + " | ".join(perf_row(data, servers, both, k)) + " |")
    return "\n".join(lines)


def retry_note(data, servers, args):
    if not any(data[s]["retried"] for s in servers):
        return []
    twice = 2 * int(args.requests)
    return [f"† did not settle with {args.requests}-request windows and was measured again "
            f"with {twice}-request windows.", ""]


def mib(kb):
    return None if kb is None else kb / 1024


def startup_table(data, servers):
    rows = [
        ("time from exec to `/v2/health/ready` = 200 (ms)", "ready_ms", lambda v: v, 0),
        ("RSS at ready (MiB)", "rss_start_kb", mib, 0),
        ("RSS after the benchmark (MiB)", "rss_end_kb", mib, 0),
        ("PSS at ready (MiB)", "pss_start_kb", mib, 0),
        ("PSS after the benchmark (MiB)", "pss_end_kb", mib, 0),
        ("processes counted", "processes_start", lambda v: v, 0),
        ("CPU busy with other work just before the server started (%)", "busy_before_pct",
         lambda v: v, 0),
    ]
    head = ["", *(LABELS[s] for s in servers)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, key, conv, digits in rows:
        values = []
        for s in servers:
            v = data[s]["env"].get(key)
            values.append("—" if v is None else fmt_num(conv(v), digits))
        lines.append("| " + " | ".join([label, *values]) + " |")
    return "\n".join(lines)


def span(values):
    if len(values) == 1:
        return f"{values[0]:.2f}×"
    return f"{min(values):.2f}× to {max(values):.2f}× (median {statistics.median(values):.2f}×)"


def reading(data, servers, triton):
    """Sentences derived from the numbers; nothing here is fixed in advance."""
    if not ("nereid" in servers and "triton" in servers):
        return ["Only one server was measured, so there is no comparison to read."]
    out = [*throughput_reading(data), *cpu_reading(data), *p99_reading(data)]
    for server in servers:
        out += concurrency_reading(data, server) + protocol_reading(data, server)
    out += startup_reading(data, triton) + memory_reading(data)
    load = busy_note(data, servers)
    return out + ([load] if load else [])


def both_ratios(data, value):
    """nereid ÷ Triton of value(data, server, key) per cell both have."""
    pairs = {k: ratio(value(data, "nereid", k), value(data, "triton", k)) for k in matrix()}
    return {k: v for k, v in pairs.items() if v is not None}


def throughput_reading(data):
    thr = both_ratios(data, lambda d, s, k: cell(d, s, "throughput", *k))
    if not thr:
        return []
    out = []
    for model in MODELS:
        vals = [v for k, v in thr.items() if k[0] == model]
        if vals:
            out.append(f"- `{model}`: nereid's throughput was {span(vals)} Triton's "
                       f"over the {len(vals)} protocol × concurrency cells.")
    slower = [k for k, v in thr.items() if v < 1]
    if slower:
        named = ", ".join(f"`{m}` {p} c={c}" for m, p, c in slower)
        out.append(f"- Triton had the higher throughput in: {named}.")
    else:
        out.append("- nereid had the higher throughput in every cell measured.")
    return out


def cpu_reading(data):
    cpu = both_ratios(data, cpu_cell)
    out = []
    for model in MODELS:
        keys = [k for k in cpu if k[0] == model]
        if keys:
            mine = [cpu_cell(data, "nereid", k) for k in keys]
            theirs = [cpu_cell(data, "triton", k) for k in keys]
            cells = "1 cell" if len(keys) == 1 else f"{len(keys)} cells"
            out.append(f"- `{model}`: nereid's server CPU time per inference was "
                       f"{span([cpu[k] for k in keys])} Triton's over {cells} "
                       f"(nereid {us_range(mine)}, Triton {us_range(theirs)}).")
    return out


def us_range(values):
    low, high = min(values), max(values)
    return f"{low:,.0f} µs" if round(low) == round(high) else f"{low:,.0f}–{high:,.0f} µs"


def p99_reading(data):
    p99 = both_ratios(data, lambda d, s, k: cell(d, s, "p99", *k))
    if not p99:
        return []
    lower = sum(1 for v in p99.values() if v < 1)
    return [f"- p99 latency was lower on nereid in {lower} of {len(p99)} cells."]


def concurrency_reading(data, server):
    if len(CONCURRENCIES) < 2:
        return []
    low, high = min(CONCURRENCIES), max(CONCURRENCIES)
    gains = []
    for model in MODELS:
        vals = [ratio(cell(data, server, "throughput", model, p, high),
                      cell(data, server, "throughput", model, p, low)) for p in PROTOCOLS]
        vals = [v for v in vals if v is not None]
        if vals:
            gains.append(f"`{model}` {' / '.join(f'{v:.2f}×' for v in vals)}")
    if not gains:
        return []
    return [f"- {LABELS[server]}: concurrency {high} over concurrency {low}, throughput "
            f"({' / '.join(PROTOCOLS)}): {'; '.join(gains)}."]


def protocol_reading(data, server):
    vals = [ratio(cell(data, server, "throughput", m, "grpc", c),
                  cell(data, server, "throughput", m, "http", c))
            for m in MODELS for c in CONCURRENCIES]
    vals = [v for v in vals if v is not None]
    if not vals:
        return []
    return [f"- {LABELS[server]}: gRPC throughput was {span(vals)} its HTTP "
            "throughput for the same model and concurrency."]


def startup_reading(data, triton):
    ready = [data[s]["env"].get("ready_ms") for s in ("nereid", "triton")]
    if None in ready:
        return []
    line = f"- Start-up: nereid was ready in {ready[0]} ms, Triton in {ready[1]} ms."
    if not native(triton):
        stubs = data["triton"]["env"].get("processes_start", 1) - 1
        line += (f" Triton's start includes {stubs} Python stub processes (one per model "
                 "instance), each importing numpy and onnxruntime before building its "
                 "session.")
    return [line]


def memory_reading(data):
    out = []
    rss = [data[s]["env"].get("rss_end_kb") for s in ("nereid", "triton")]
    rss_start = [data[s]["env"].get("rss_start_kb") for s in ("nereid", "triton")]
    if None not in rss_start and rss_start[0]:
        out.append(f"- Memory at ready: nereid {rss_start[0] / 1024:.0f} MiB RSS, Triton "
                   f"{rss_start[1] / 1024:.0f} MiB summed over its processes.")
    pss = [data[s]["env"].get("pss_end_kb") for s in ("nereid", "triton")]
    if None not in rss and None not in pss and rss[0] and pss[0]:
        out.append(f"- Memory after the benchmark: Triton's process tree used {rss[1] / rss[0]:.1f}× "
                   f"nereid's RSS and {pss[1] / pss[0]:.1f}× its PSS.")
    return out


def busy_note(data, servers):
    """A warning when other work was using the CPUs around the run."""
    busy = {s: data[s]["env"].get("busy_before_pct") for s in servers}
    busy = {s: v for s, v in busy.items() if v is not None}
    if busy and max(busy.values()) >= 25:
        named = ", ".join(f"{v} % before {LABELS[s]}" for s, v in busy.items())
        return ("- **The machine was not idle**: other processes kept the CPUs busy "
                f"({named}, sampled over 2 s just before each server started), so the "
                "numbers are lower and noisier than on an idle machine. The cell-by-cell "
                "alternation spreads that load over both servers, but not evenly.")
    return ""


def native(triton):
    """Whether Triton ran its native ONNX Runtime backend (not Python's)."""
    return triton.get("backend") == "onnxruntime"


def versions(data, args, triton):
    meta = {s: data[s]["meta"] for s in data}
    stamp_dir = os.path.join(".tools", "perf_analyzer")
    pa = "2.51.0"
    if os.path.isdir(stamp_dir):
        stamps = [f for f in os.listdir(stamp_dir) if f.startswith(".stamp-")]
        if stamps:
            pa = stamps[0][len(".stamp-"):]
    built = datetime.datetime.fromtimestamp(os.path.getmtime(args.nereid_bin),
                                            datetime.timezone.utc)
    lines = [f"- nereid: `{args.nereid_bin}` built {built:%Y-%m-%d %H:%M} UTC; the source "
             f"tree was at git `{os.environ.get('NEREID_REV') or git_rev()}` when the run ended"
             + (f"; reports version {meta['nereid'].get('version')}" if meta.get("nereid") else "")]
    if meta.get("triton"):
        backend = ("ONNX Runtime backend r24.10 (built from source, see above)"
                   if native(triton) else "Python backend")
        lines.append(f"- Triton: `tritonserver` {meta['triton'].get('version', '?')} from the "
                     f"`nvidia-pytriton==0.7.0` wheel, {backend}")
    lines.append(f"- perf_analyzer: {pa} (from the `tritonclient[all]=={pa}` wheel)")
    lines.append(ort_versions(args, triton))
    return lines


def ort_versions(args, triton):
    if native(triton):
        return (f"- ONNX Runtime: nereid {args.ort_version} (it loads the `.venv` `onnxruntime` "
                f"wheel's `libonnxruntime.so`); Triton {triton.get('ort_version', '?')} (the "
                "`libonnxruntime.so` its ONNX Runtime backend was built against and ships "
                "beside it)")
    return (f"- ONNX Runtime: {args.ort_version} in both servers (nereid loads the "
            "`onnxruntime` wheel's `libonnxruntime.so`; Triton's model.py imports the same "
            "release's Python package)")


def held():
    """The benchmarked models, as the repository copy holds them."""
    names = [f"`{m}`" for m in MODELS]
    text = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    if "mlp_pipeline" in MODELS:
        text += " (with `preprocess`, the ensemble's first step)"
    return text


def models_prose():
    text = ("`model_repository/simple/1/model.onnx` (INT32 `INPUT0`/`INPUT1` [16] → sum and "
            "difference, `max_batch_size` 8) and `model_repository/mlp/1/model.onnx` (FP32 "
            "`INPUT` [256] → 256-1024-1024-16 MLP → `OUTPUT` [16], `max_batch_size` 64)")
    if "mlp_pipeline" in MODELS:
        text += ("; `mlp_pipeline` is Triton's `ensemble_scheduling` of two steps, "
                 "`preprocess` (`model_repository/preprocess/1/model.onnx`: UINT8 `RAW` [256] "
                 "→ FP32 `SCALED` [256], batched as `mlp` is) then `mlp`")
    return text


BATCHING_PROSE = (
    "`mlp` has the same `dynamic_batching { max_queue_delay_microseconds: 2000 }` on both "
    "servers (as in `model_repository/mlp/config.pbtxt`); `simple` has none on either. The "
    "comparison is like for like: batched against batched, unbatched against unbatched.")


def nereid_prose():
    return ("- **nereid** runs them with its ONNX Runtime backend (Rust, `ort`), from a copy "
            f"of `model_repository/` holding only {held()}.")


def compared(triton):
    """The "What is compared" paragraphs for the Triton that ran."""
    return compared_native(triton) if native(triton) else compared_python()


def compared_native(triton):
    ort = triton.get("ort_version", "?")
    return [
        f"Both servers serve the same copy of `model_repository/` holding only {held()}: "
        f"the same ONNX files, {models_prose()}, and the same `config.pbtxt` files; "
        "each model runs two CPU instances (the default when a config names no "
        "`instance_group`). "
        "Each runs them through ONNX Runtime with its default session options, but not the "
        f"same release: Triton's ONNX Runtime backend is built against {ort}, nereid loads "
        "the release of the `onnxruntime` wheel in `.venv` (see Versions). Threads differ: "
        "nereid's sessions share its process-wide intra-op pool, a thread per core "
        "(docs/scheduler.md), where each of Triton's model instances has a session, and an "
        "intra-op pool, of its own. " + BATCHING_PROSE,
        "",
        nereid_prose(),
        "- **Triton** runs them **with its native ONNX Runtime backend** "
        "(`libtriton_onnxruntime.so`, platform `onnxruntime_onnx`), inside the "
        "`tritonserver` process, as a stock Triton release serves ONNX models on CPU.",
        "",
        "The `tritonserver` in the `nvidia-pytriton` wheel ships only the Python backend, so "
        "the ONNX Runtime backend was built from source for this run: Triton's "
        "`onnxruntime_backend`, `core`, `backend` and `common` repositories at tag `r24.10` "
        "(the release of Triton 2.51), built with cmake against ONNX Runtime "
        f"{ort} taken from the PyPI `onnxruntime=={ort}` wheel, CPU only "
        "(`TRITON_ENABLE_GPU=OFF`), in a backends folder that also holds the wheel's own "
        "`python` backend. `benches/run.sh` and `scripts/run-triton.sh` take that folder "
        "from `TRITON_BACKEND_DIR`; building it is not part of this repository.",
    ]


def compared_python():
    return [
        f"Both servers serve the same two ONNX files, {models_prose()}, each with two CPU "
        "instances, through the "
        "same ONNX Runtime release with its default session options (except threads: "
        "nereid's sessions share its process-wide intra-op pool, a thread per core, where "
        "each of Triton's Python models has a session of its own; docs/scheduler.md). "
        + BATCHING_PROSE,
        "",
        nereid_prose(),
        "- **Triton** runs them **with ONNX Runtime inside its Python backend**: the "
        "`tritonserver` in the `nvidia-pytriton` wheel ships only the Python backend, not "
        "Triton's ONNX Runtime backend, and `TRITON_BACKEND_DIR` was not set to a backends "
        "folder that has it. `benches/triton_models/` holds Python models with "
        "the same names, inputs, outputs and `max_batch_size`, whose `model.py` calls "
        "`onnxruntime.InferenceSession.run` on the same file (once per batch of requests, on "
        "their concatenated inputs). The Triton numbers therefore "
        "include the Python backend's overhead (a stub process per instance, shared-memory "
        "hand-off, the Python interpreter); Triton with its native ONNX Runtime backend "
        "would likely do better than shown here. This is a comparison with the Triton one "
        "can run here, not with Triton at its best.",
    ]


def command_section(args):
    models = ", ".join(f"`{m}`" for m in MODELS)
    protocols = ", ".join(f"`{p}`" for p in PROTOCOLS)
    concurrencies = ", ".join(str(c) for c in CONCURRENCIES)
    return [
        "## perf_analyzer command",
        "",
        f"For each server, model ({models}), protocol ({protocols}) and "
        f"concurrency ({concurrencies}), under `timeout 120`:",
        "",
        "```text",
        f".tools/perf_analyzer/perf_analyzer.sh {args.pa_args}",
        "```",
        "",
        f"Each measurement window is {args.requests} requests (`count_windows`); "
        "perf_analyzer reports the last three windows merged once their throughput and "
        "latency agree within 50 % (`-s 50`), trying at most 5 windows (`-r 5`). Its "
        "default 10 % threshold did not settle on this 2-core machine; a run that does not "
        "settle even so is run once more with windows twice as long (marked † below). "
        "Inputs are perf_analyzer's random data, batch size 1. Latencies are "
        "perf_analyzer's client-side request latencies in microseconds.",
        "",
        "Server CPU µs/infer is the user + system CPU time of the server's process tree "
        "(`/proc/PID/stat` utime + stime, summed over `tritonserver` and any child "
        "processes) divided by the inferences it counted (the sum of `inference_count` "
        "over the model's versions in `GET /v2/models/MODEL/stats`), both read just before "
        "and just after perf_analyzer, so both cover the same span, perf_analyzer's warm-up "
        "and unreported windows included. It counts every thread of the server (HTTP and "
        "gRPC handling, scheduling, ONNX Runtime's pools), not perf_analyzer's.",
        "",
    ]


def startup_note(triton):
    tree = ("`tritonserver` alone, its ONNX Runtime backend loaded in that process"
            if native(triton) else
            "`tritonserver` plus its Python backend stub processes (one per model "
            "instance). RSS counts pages shared between those processes (libpython, numpy, "
            "onnxruntime) once per process; PSS splits them, so PSS is the fairer total "
            "for Triton")
    return ("Time to ready runs from the moment the server binary is exec'd (for Triton, "
            "after `scripts/run-triton.sh` has found its paths) to the first 200 from "
            "`GET /v2/health/ready`, polled every 10 ms with curl; both servers report ready "
            "only once every model is loaded. Memory is summed over the server's process "
            "tree from `/proc/PID/status` (VmRSS) and `/proc/PID/smaps_rollup` (Pss): for "
            f"nereid that is one process; for Triton it is {tree}.")


def render(data, args, triton):
    servers = args.servers.split()
    m = machine()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "# Benchmarks: nereid and Triton 2.51 side by side",
        "",
        f"Written by `benches/run.sh` on {now}; rerun it (or `make bench`) to refresh, "
        "do not edit by hand. One run, short windows: read the numbers as rough, "
        "not as a ranking to the last percent.",
        "",
        "## What is compared",
        "",
        *compared(triton),
        "",
        "Both servers are started one after the other, then measured in turn cell by "
        "cell (nereid, then Triton, for each row of the table), so that background load "
        "on a shared machine falls on both alike; the server not being measured sits "
        "idle. perf_analyzer runs on the same machine, so client and server share its "
        "cores.",
        "",
        "## Machine",
        "",
        f"- {m['nproc']} CPUs: {m['cpu']}",
        f"- {m['mem_gib']:.1f} GiB memory, {m['kernel']}",
        "- no GPU used",
        "",
        "## Versions",
        "",
        *versions(data, args, triton),
        "",
        *command_section(args),
        "## Throughput, latency and server CPU",
        "",
        perf_table(data, servers),
        "",
        *retry_note(data, servers, args),
        "## Start-up and memory",
        "",
        startup_table(data, servers),
        "",
        startup_note(triton),
        "",
        "## Reading",
        "",
        *reading(data, servers, triton),
        "",
        "Caveats: one run per cell with short windows, on a small shared machine; "
        "differences of a few percent are noise. On `simple` (no dynamic batching) "
        "concurrency 8 measures queueing in front of two instances; on `mlp` both servers "
        "batch. At concurrency 1 a batcher that waits out the 2 ms queue delay for a lone "
        "request (Triton does; nereid's is meant not to, see docs/scheduler.md) adds that "
        "wait to `mlp`'s latency; \"Dynamic batching\" below measures nereid's batcher "
        "on its own.",
        "",
    ]
    return "\n".join(parts)


def kept_batching_section(path):
    """Everything of the report at path from its batching section on: the
    sections the other benches write (batching, ensembles, TorchScript, the
    Python backend, protocol extensions, TLS, instructions) and their prose,
    which this run does not measure again."""
    try:
        with open(path) as f:
            old = f.read()
    except OSError:
        return ""
    if BATCHING_BEGIN not in old:
        return ""
    return "\n" + BATCHING_BEGIN + old.split(BATCHING_BEGIN, 1)[1].rstrip("\n") + "\n"


def set_matrix(args):
    """Narrows MODELS, PROTOCOLS and CONCURRENCIES to the cells run.sh ran."""
    global MODELS, PROTOCOLS, CONCURRENCIES
    MODELS = tuple(args.models.split())
    PROTOCOLS = tuple(args.protocols.split())
    CONCURRENCIES = tuple(int(c) for c in args.concurrencies.split())


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--requests", required=True)
    parser.add_argument("--pa-args", required=True)
    parser.add_argument("--ort-version", required=True)
    parser.add_argument("--servers", default="nereid triton")
    parser.add_argument("--nereid-bin", default="target/release/nereid")
    parser.add_argument("--models", default=" ".join(MODELS))
    parser.add_argument("--protocols", default=" ".join(PROTOCOLS))
    parser.add_argument("--concurrencies", default=" ".join(map(str, CONCURRENCIES)))
    args = parser.parse_args()
    set_matrix(args)
    data = load(args.results, args.servers.split())
    triton = read_kv(os.path.join(args.results, "triton.backend"))
    text = render(data, args, triton) + kept_batching_section(args.out)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
