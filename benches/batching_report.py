"""Writes the "Dynamic batching" section of docs/benchmarks.md and the plot
docs/batching.png from the results folder benches/batching.sh fills.

The folder holds:
  run.env                        busy_before_pct, load_before/after, elapsed_s
  raw_NAME.csv / .env            raw_ort rows (default_before, t1, default_after)
                                 and the CPU other processes took meanwhile
  CONFIG.config.pbtxt / .json    each server config, as written and as resolved
  CONFIG_PROTO_cC.csv            perf_analyzer -f output
  CONFIG_PROTO_cC.before.json    /v2/models/MODEL/stats before and after the run
  CONFIG_PROTO_cC.after.json
  CONFIG_PROTO_cC.env            other_busy_pct, server_ticks, children_ticks
                                 (perf_analyzer), ticks_per_s, retried
The section sits between BEGIN and END markers; the rest of the file (what
benches/report.py writes) is kept, and report.py keeps this section.
batching_data.py reads the folder, batching_plot.py draws.
"""

import argparse
import datetime
import os
import statistics

import batching_plot
from batching_data import (LABELS, RAW_RUNS, cpu_per_inference, get, load, per_exec,
                           raw_best)
from report import BATCHING_BEGIN as BEGIN
from report import BATCHING_END as END
from report import git_rev, machine
# The aims of issue 3.
AIM_RAW_RATIO = 0.5
AIM_C1_P50 = 1.2
AIM_INF_PER_EXEC = 4


def size_summary(sizes):
    """Mean, median and max batch size, and the share of size-1 batches."""
    if not sizes:
        return "—"
    expanded = sorted(s for s, n in sizes.items() for _ in range(n))
    return (f"{statistics.mean(expanded):.1f} / {statistics.median(expanded):.0f} / "
            f"{max(sizes)}; {sizes.get(1, 0) / len(expanded):.0%} size 1")


def fmt(value, digits=0, unit=""):
    return "—" if value is None else f"{value:,.{digits}f}{unit}"


def main_table(data, args):
    head = ["protocol", "concurrency", "unbatched infer/s", "batched infer/s",
            "batched ÷ unbatched", "unbatched p50 µs", "batched p50 µs",
            "unbatched p99 µs", "batched p99 µs", "inferences per execution (batched)",
            "other CPU % (unbatched / batched)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for proto in args.protocols:
        for c in args.concurrencies:
            tu, tb = (get(data, k, proto, c, "throughput") for k in ("unbatched", "batched"))
            ratio = f"{tb / tu:.2f}×" if tu and tb else "—"
            other = " / ".join(fmt(get(data, k, proto, c, "env").get("other_busy_pct")
                                   if get(data, k, proto, c, "env") else None)
                               for k in ("unbatched", "batched"))
            lines.append("| " + " | ".join([
                proto, str(c), fmt(tu) + retried(data, "unbatched", proto, c),
                fmt(tb) + retried(data, "batched", proto, c), ratio,
                fmt(get(data, "unbatched", proto, c, "p50")),
                fmt(get(data, "batched", proto, c, "p50")),
                fmt(get(data, "unbatched", proto, c, "p99")),
                fmt(get(data, "batched", proto, c, "p99")),
                fmt(per_exec(data, "batched", proto, c), 1), other]) + " |")
    return "\n".join(lines)


def retried(data, config, proto, c):
    env = get(data, config, proto, c, "env")
    return " †" if env and env.get("retried") else ""


def batcher_rows(data, args):
    """(config, protocol) pairs for the batcher table, in table order."""
    pairs = [("batched", p) for p in args.protocols]
    pairs += [(c, args.sweep_protocol) for c in args.sweep_configs]
    return pairs + [("unbatched", p) for p in args.protocols]


def batcher_table(data, args):
    head = ["config", "protocol", "concurrency", "inferences per execution",
            "batch size mean / median / max; share of size 1", "mean queue µs",
            "mean compute µs per execution", "server CPU µs per inference",
            "perf_analyzer CPU µs per inference"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for config, proto in batcher_rows(data, args):
        for c in args.concurrencies:
            cell = data["cells"].get((config, proto, c))
            s = cell and cell["stats"]
            if not s:
                continue
            lines.append("| " + " | ".join([
                LABELS[config], proto, str(c), fmt(s["per_exec"], 1), size_summary(s["sizes"]),
                fmt(s["queue_us"]), fmt(s["compute_us"]),
                fmt(cpu_per_inference(cell, "server_ticks")),
                fmt(cpu_per_inference(cell, "children_ticks"))]) + " |")
    return "\n".join(lines)


def raw_table(data):
    runs = [r for r in RAW_RUNS if r in data["raw"]]
    head = ["batch"]
    for r in runs:
        head += [f"rows/s ({RAW_RUNS[r]})", f"p50 µs per call ({RAW_RUNS[r]})"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    batches = sorted({b for r in runs for b in data["raw"][r]["rows"]})
    for b in batches:
        row = [str(b)]
        for r in runs:
            x = data["raw"][r]["rows"].get(b)
            row += [fmt(x and x["rows_per_s"]), fmt(x and x["p50_us"], 1)]
        lines.append("| " + " | ".join(row) + " |")
    other = ", ".join(f"{RAW_RUNS[r]}: {data['raw'][r]['env'].get('other_busy_pct', '?')} %"
                      for r in runs)
    return "\n".join(lines), other


def sweep_table(data, args):
    proto = args.sweep_protocol
    head = ["config", "instances", "intra-op threads"]
    for c in args.concurrencies:
        head += [f"c{c} infer/s", f"c{c} p50 µs"]
    head.append(f"c{max(args.concurrencies)} inferences per execution")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for config in ["batched", *args.sweep_configs]:
        resolved = data["configs"].get(config, {})
        instances = sum(g.get("count", 1) for g in resolved.get("instance_group", [])) or "?"
        threads = (resolved.get("parameters", {}).get("intra_op_thread_count", {})
                   .get("string_value", "shared pool"))
        label = f"{LABELS[config]} (the config as made)" if config == "batched" \
            else LABELS[config]
        row = [label, str(instances), threads]
        for c in args.concurrencies:
            row += [fmt(get(data, config, proto, c, "throughput")) + retried(data, config, proto, c),
                    fmt(get(data, config, proto, c, "p50"))]
        row.append(fmt(per_exec(data, config, proto, max(args.concurrencies)), 1))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def sweep_extremes(data, args):
    """(config with the highest top-concurrency throughput, config with the
    lowest c1 p50) over the batching configs of the sweep protocol."""
    proto, top, low = args.sweep_protocol, max(args.concurrencies), min(args.concurrencies)
    configs = ["batched", *args.sweep_configs]
    fastest = [(get(data, c, proto, top, "throughput"), c) for c in configs]
    quickest = [(get(data, c, proto, low, "p50"), c) for c in configs]
    fastest = [x for x in fastest if x[0] is not None]
    quickest = [x for x in quickest if x[0] is not None]
    return (max(fastest)[1] if fastest else None, min(quickest)[1] if quickest else None)


def overall_best(data, args):
    """The batching config of the sweep protocol with the highest geometric
    mean throughput over all concurrencies (each concurrency weighs alike)."""
    proto = args.sweep_protocol
    scores = []
    for config in ["batched", *args.sweep_configs]:
        thr = [get(data, config, proto, c, "throughput") for c in args.concurrencies]
        if None not in thr:
            scores.append((statistics.geometric_mean(thr), config))
    return max(scores)[1] if scores else None


def client_ceiling(data, args, config, proto):
    """Inferences/s the machine could serve if the server cost nothing: all
    cores divided by perf_analyzer's CPU per inference at top concurrency."""
    cell = data["cells"].get((config, proto, max(args.concurrencies)))
    client = cell and cpu_per_inference(cell, "children_ticks")
    return machine()["nproc"] * 1e6 / client if client else None


def reading(data, args):
    out = []
    top, low = max(args.concurrencies), min(args.concurrencies)
    best = raw_best(data)
    raw1 = data["raw"].get("default_before", {}).get("rows", {}).get(1)
    if raw1:
        verdict = "meets" if raw1["p50_us"] >= 100 else "**does not meet**"
        out.append(f"- Compute-bound check: one batch-1 call of the MLP takes {raw1['p50_us']:.0f} µs "
                   f"(p50; mean {raw1['mean_us']:.0f} µs) in-process with ONNX Runtime's default "
                   f"threads, which {verdict} the issue's \"batch-1 call ≥ 100 µs\".")
    if best:
        out.append(f"- Raw ONNX Runtime's best: {best[0]:,.0f} rows/s at batch {best[1]} "
                   f"({RAW_RUNS[best[2]]}).")
    for proto in args.protocols:
        # An explanation shared by both protocols is said once.
        out += [line for line in protocol_reading(data, args, proto, best) if line not in out]
    fastest, quickest = sweep_extremes(data, args)
    if fastest and args.sweep_configs:
        p = args.sweep_protocol
        out.append(f"- Instances × threads ({p}): highest c{top} throughput with "
                   f"**{LABELS[fastest]}** ({get(data, fastest, p, top, 'throughput'):,.0f} "
                   f"infer/s, c{low} p50 {get(data, fastest, p, low, 'p50'):,.0f} µs); lowest "
                   f"c{low} p50 with **{LABELS[quickest]}** "
                   f"({get(data, quickest, p, low, 'p50'):,.0f} µs, c{top} "
                   f"{get(data, quickest, p, top, 'throughput'):,.0f} infer/s).")
    overall = overall_best(data, args)
    if overall and args.sweep_configs:
        p = args.sweep_protocol
        thr = ", ".join(f"c{c} {get(data, overall, p, c, 'throughput'):,.0f}"
                        for c in args.concurrencies)
        out.append(f"- Best over all concurrencies (geometric mean of throughput, {p}): "
                   f"**{LABELS[overall]}** ({thr} infer/s).")
    out += cpu_reading(data, args)
    return out


def cpu_reading(data, args):
    """Where the cores went: the server's and perf_analyzer's CPU per inference."""
    out = []
    top, low, proto = max(args.concurrencies), min(args.concurrencies), args.sweep_protocol
    nproc = machine()["nproc"]
    for config in ["batched", *args.sweep_configs]:
        cell = data["cells"].get((config, proto, top))
        server = cell and cpu_per_inference(cell, "server_ticks")
        client = cell and cpu_per_inference(cell, "children_ticks")
        if server and client and config == overall_best(data, args):
            out.append(f"- CPU budget ({LABELS[config]}, {proto}, c{top}): the server spent "
                       f"{server:,.0f} µs of CPU per inference and perf_analyzer {client:,.0f} µs, "
                       f"so {nproc} cores could serve at most about "
                       f"{nproc * 1e6 / (server + client):,.0f} infer/s in this setup; "
                       f"{get(data, config, proto, top, 'throughput'):,.0f} were measured.")
    one = data["raw"].get("t1", {}).get("rows", {}).get(1)
    cost = f"one batch-1 run takes {one['p50_us']:.0f} µs on one thread" if one else \
        "see raw ONNX Runtime above"
    spin = []
    for config in ["batched", *args.sweep_configs]:
        cell = data["cells"].get((config, proto, low))
        server = cell and cpu_per_inference(cell, "server_ticks")
        if server:
            spin.append(f"{LABELS[config]} {server:,.0f}")
    if spin:
        out.append(f"- Server CPU per inference at c{low} ({proto}), µs: " + "; ".join(spin)
                   + f". Where it is far above the model's own cost ({cost}), ONNX Runtime's intra-op worker threads were spinning between "
                   "runs (its default with more than one intra-op thread; per-thread CPU in "
                   "`/proc` puts it on the instance threads' ORT workers), taking cores the "
                   "client and the request path need.")
    return out


def protocol_reading(data, args, proto, best):
    out = []
    top, low = max(args.concurrencies), min(args.concurrencies)
    tb = get(data, "batched", proto, top, "throughput")
    if best and tb:
        aim = "meets" if tb / best[0] >= AIM_RAW_RATIO else "**misses**"
        ceiling = client_ceiling(data, args, "batched", proto)
        bound = "" if ceiling is None else (
            f" perf_analyzer alone spent CPU for at most {ceiling:,.0f} infer/s on "
            f"{machine()['nproc']} cores ({ceiling / best[0]:.0%} of raw), whatever the server did.")
        out.append(f"- {proto}: batched nereid at c{top} served {tb:,.0f} infer/s, "
                   f"{tb / best[0]:.0%} of raw ONNX Runtime's best; this {aim} the aim "
                   f"of {AIM_RAW_RATIO:.0%}.{bound}")
    pb, pu = (get(data, k, proto, low, "p50") for k in ("batched", "unbatched"))
    if pb and pu:
        aim = "within" if pb <= AIM_C1_P50 * pu else "**outside**"
        qb, qu = (get(data, k, proto, low, "stats") for k in ("batched", "unbatched"))
        queue = "" if not (qb and qu and qb["queue_us"] is not None) else (
            f" Server-side mean queue time: {qb['queue_us']:,.0f} µs batched, "
            f"{qu['queue_us']:,.0f} µs unbatched.")
        out.append(f"- {proto}: at c{low} the batched p50 was {pb:,.0f} µs against "
                   f"{pu:,.0f} µs unbatched ({pb / pu:.2f}×), {aim} the aim of "
                   f"{AIM_C1_P50:.1f}×.{queue}")
        delay = data["configs"].get("batched", {}).get("dynamic_batching", {}).get(
            "max_queue_delay_microseconds")
        if qb and qb["queue_us"] and delay and qb["queue_us"] > 0.25 * delay:
            out.append(f"  Batched at c{low}, lone requests waited for the queue delay ({delay} µs) "
                       "although nothing else was queued. The likely cause, from the code: an instance "
                       "frees its batcher slot only after its responses are sent, so the "
                       "client's next request can arrive while the instance still counts as "
                       "busy; with another instance idle the batcher then waits for the delay "
                       "rather than for the slot (it waits on slots only when none is free).")
    pe = per_exec(data, "batched", proto, top)
    if pe is not None:
        aim = "meets" if pe >= AIM_INF_PER_EXEC else "**misses**"
        out.append(f"- {proto}: at c{top} the batcher ran {pe:.1f} inferences per "
                   f"execution, which {aim} the issue's ≥ {AIM_INF_PER_EXEC}.")
    return out


def load_note(data):
    run = data["run"]
    others = [c["env"]["other_busy_pct"] for c in data["cells"].values()
              if "other_busy_pct" in c["env"]]
    parts = [f"CPU busy before the run: {run.get('busy_before_pct', '?')} %",
             f"1-minute load average {run.get('load_before', '?')} before and "
             f"{run.get('load_after', '?')} after (it counts the benchmark's own processes)"]
    if others:
        parts.append(f"CPU taken by other processes during the perf_analyzer runs: median "
                     f"{statistics.median(others):.0f} %, max {max(others)} % of the machine")
    return "; ".join(parts) + "."


def series(data, args, config, proto, label, style):
    """The plot line of one config and protocol, over the concurrencies measured."""
    cs = [c for c in args.concurrencies if get(data, config, proto, c, "throughput")]
    if not cs:
        return []
    return [batching_plot.Series(
        label, cs, [get(data, config, proto, c, "throughput") for c in cs],
        [get(data, config, proto, c, "p50") for c in cs], style)]


def draw(data, args):
    """docs/batching.png from the results."""
    lines = []
    for proto in args.protocols:
        lines += series(data, args, "batched", proto, f"batched, {proto}", {"fmt": "-o"})
        lines += series(data, args, "unbatched", proto, f"unbatched, {proto}", {"fmt": "--s"})
    for config in args.sweep_configs:
        lines += series(data, args, config, args.sweep_protocol,
                        f"{LABELS[config]}, {args.sweep_protocol} (batched)",
                        {"fmt": ":.", "linewidth": 1, "alpha": 0.7})
    levels = []
    best = raw_best(data)
    if best:
        levels.append(batching_plot.Level(
            best[0], f"raw ONNX Runtime best ({best[0]:,.0f} rows/s, batch {best[1]})",
            {"color": "black", "linestyle": ":"}))
        levels.append(batching_plot.Level(
            AIM_RAW_RATIO * best[0], f"{AIM_RAW_RATIO:.0%} of raw best (aim)",
            {"color": "grey", "linestyle": ":", "linewidth": 0.8}))
    proto, top = args.protocols[0], max(args.concurrencies)
    ceiling = client_ceiling(data, args, "batched", proto)
    # Far above everything else it would only squash the plot; the reading
    # states it in words.
    if ceiling and (not best or ceiling < 2 * best[0]):
        levels.append(batching_plot.Level(
            ceiling, f"{machine()['nproc']} cores ÷ perf_analyzer's CPU per inference "
            f"(c{top}, batched, {proto})",
            {"color": "tab:red", "linestyle": "-.", "linewidth": 0.8}))
    title = (f"nereid, MLP {args.layers}, perf_analyzer on the same "
             f"{machine()['nproc']} cores")
    batching_plot.plot(args.plot, title, args.concurrencies, lines, levels)


def sweep_section(data, args):
    if not args.sweep_configs:
        return []
    return [f"### Instances × intra-op threads ({args.sweep_protocol}, batching on)", "",
            "The batched config with `instance_group [ { kind: KIND_CPU, count: N } ]` and "
            "`parameters { key: \"intra_op_thread_count\" value: { string_value: \"T\" } }` "
            "in place of the defaults.", "",
            sweep_table(data, args), ""]


def section(data, args):
    # When the measurements were taken, not when this report was rendered.
    stamp = os.path.getmtime(os.path.join(args.results, "run.env"))
    now = datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    m = machine()
    raw, raw_other = raw_table(data)
    batched = data["configs"].get("batched", {})
    db = batched.get("dynamic_batching", {})
    groups = batched.get("instance_group", [])
    instances = sum(g.get("count", 1) for g in groups)
    plot_rel = os.path.relpath(args.plot, os.path.dirname(os.path.abspath(args.out)))
    return "\n".join([
        BEGIN,
        "## Dynamic batching",
        "",
        f"Written by `benches/batching.sh` on {now} (nereid at git "
        f"`{os.environ.get('NEREID_REV') or git_rev()}`, "
        f"`{args.nereid_bin}`), on {m['nproc']} CPUs ({m['cpu']}); rerun it to refresh. "
        "One run per cell: read differences of 10 % or so as noise.",
        "",
        "### Setup",
        "",
        f"- Model: `{args.model}`, an FP32 MLP {args.layers} with ReLU between layers and "
        "fixed (seeded) weights, `max_batch_size` 64, "
        + ("from `model_repository/mlp` as committed. " if args.model == "mlp" else
           "made by `scripts/make_models.py --bench-mlp` when the benchmark runs (its "
           "weights are too large to commit; `model_repository/mlp` is the same recipe, "
           "smaller). ")
        + "Every server below is nereid "
        "serving only this model, from a temporary repository whose `config.pbtxt` is "
        "changed as named (`benches/mlp_config.py`).",
        f"- **batched**: `config.pbtxt` as made: `dynamic_batching` with "
        f"`max_queue_delay_microseconds` {db.get('max_queue_delay_microseconds', '?')} "
        f"(resolved `preferred_batch_size` {db.get('preferred_batch_size', [])}, filled in "
        f"by autofill as Triton does), {instances} CPU instance(s) as the config says, no "
        "thread parameter, so the session runs on nereid's process-wide ONNX Runtime pool "
        f"(a thread per core, {m['nproc']} here; docs/scheduler.md).",
        "- **unbatched**: the same with the `dynamic_batching` block removed: one request "
        "per execution.",
        "- All configs run at once, each on its own ports, and are measured in turn cell by "
        "cell, so background load falls on all alike; idle ones sit idle. perf_analyzer "
        "runs on the same 2 cores as the server; at c64 its 64 client threads compete with "
        "the server for them.",
        "- Before and after each perf_analyzer run the script reads "
        f"`/v2/models/{args.model}/stats`: inferences per execution is the `inference_count` delta "
        "over the `execution_count` delta (warm-up included), and the batch sizes come "
        "from the `batch_stats` deltas.",
        "",
        "perf_analyzer (2.51), under `timeout`, one run per config, protocol and "
        "concurrency:",
        "",
        "```text",
        f".tools/perf_analyzer/perf_analyzer.sh {args.pa_args}",
        "```",
        "",
        "Latencies are perf_analyzer's client-side latencies in µs. † marks a run that did "
        "not settle and was measured again with windows twice as long.",
        "",
        f"Background load: {load_note(data)}",
        "",
        "### Batched against unbatched",
        "",
        main_table(data, args),
        "",
        f"![throughput and p50 latency against concurrency]({plot_rel})",
        "",
        "What the batcher did in each run, from the model statistics (queue and compute "
        "times are the server's), and the CPU time the server and perf_analyzer spent per "
        "inference, from `/proc` (10 ms ticks, whole run including warm-up):",
        "",
        batcher_table(data, args),
        "",
        "### Raw ONNX Runtime in-process",
        "",
        "`cargo build --release -p nereid-backend-onnx --example raw_ort`, then "
        "`target/release/examples/raw_ort --intra-threads N --seconds S --csv FILE`: one "
        "session with nereid's session settings, `Session::run` back to back for S seconds "
        "per batch size on one thread, no server and no copies beyond ONNX Runtime's own. "
        f"CPU taken by other processes meanwhile: {raw_other}.",
        "",
        raw,
        "",
        *sweep_section(data, args),
        "### Reading",
        "",
        *reading(data, args),
        END,
    ]) + "\n"


def splice(path, block):
    """The file at path with its batching section replaced by block (or block
    appended when it has none)."""
    text = ""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        return head + block + ("\n" + tail if tail else "")
    return text.rstrip("\n") + ("\n\n" if text else "") + block


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--plot", required=True)
    parser.add_argument("--pa-args", required=True)
    parser.add_argument("--concurrencies", required=True)
    parser.add_argument("--protocols", required=True)
    parser.add_argument("--sweep-protocol", required=True)
    parser.add_argument("--sweep-configs", default="")
    parser.add_argument("--nereid-bin", default="target/release/nereid")
    parser.add_argument("--model", required=True)
    parser.add_argument("--layers", required=True)
    args = parser.parse_args()
    args.concurrencies = [int(c) for c in args.concurrencies.split()]
    args.protocols = args.protocols.split()
    args.sweep_configs = args.sweep_configs.split()
    data = load(args)
    draw(data, args)
    text = splice(args.out, section(data, args))
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
