"""The many-models bench's tools (benches/many_models.sh): makes the
repository, drives a Zipf request stream at a server and watches a server
load every model.

    many_models_bench.py make REPO --models N --megabytes MB
    many_models_bench.py copies REPO OUT --models N --copies K
    many_models_bench.py probe --http PORT --pid PID --out JSON [--count K]
    many_models_bench.py drive --http PORT --pid PID --log LOG --out JSON [...]
    many_models_bench.py watch --pid PID --log LOG --models N --out JSON [...]

`drive` runs closed-loop clients (asyncio and aiohttp, spread over worker
processes), each drawing models from the same Zipf distribution over
ranks that a fixed permutation maps to models, so two servers see the same
stream. Every request's wall-clock start and end are kept; one counts as
having waited for a load when a "model ready model=<its model>" line of
the server's log falls inside them (the line is written when the load
ends, before the waiting requests run). The server's metrics and CPU ticks
are read when the measured window opens and closes; its resident memory
(with its children's) every 100 ms from the first request to the last.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import os
import re
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests/python"))
from many_models import weights_model  # noqa: E402

BODY = b'{"inputs":[{"name":"INDEX","datatype":"INT64","shape":[1],"data":[0]}]}'
# Nereid's line for a load that ended: glog-style UTC time to the microsecond.
READY = re.compile(r'^I(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) \d+ \S+\] '
                   r'"model ready model=(\S+) version=')
# Triton's line for the same.
TRITON_LOADED = re.compile(r"successfully loaded '([^']+)'")


def model_name(i: int) -> str:
    return f"m{i:04d}"


# --- make ------------------------------------------------------------------

def make_some(repo: str, first: int, step: int, models: int, megabytes: float) -> None:
    for i in range(first, models, step):
        weights_model(Path(repo), model_name(i), megabytes, seed=1000 + i)


def make(args: argparse.Namespace) -> None:
    """`models` models of `megabytes` of weights each, seeded apart."""
    workers = os.cpu_count() or 1
    with ProcessPoolExecutor(workers) as pool:
        for done in [pool.submit(make_some, args.repo, w, workers, args.models, args.megabytes)
                     for w in range(workers)]:
            done.result()


def copies(args: argparse.Namespace) -> None:
    """OUT holds `copies` models per model of REPO, each its own folder and
    config whose model.onnx links to the original: a server that reads
    each file into a session of its own (Triton) holds a copy per name."""
    out = Path(args.out)
    for i in range(args.models * args.copies):
        source = Path(args.repo).resolve() / model_name(i % args.models)
        name = f"c{i:05d}"
        (out / name / "1").mkdir(parents=True)
        (out / name / "1/model.onnx").symlink_to(source / "1/model.onnx")
        config = (source / "config.pbtxt").read_text()
        (out / name / "config.pbtxt").write_text(config.replace(f'"{source.name}"', f'"{name}"', 1))


# --- memory, CPU and metrics of a server -------------------------------------

def process_tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return pids


def tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and its descendants (0 once it is gone)."""
    total = 0
    for p in process_tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def tree_ticks(pid: int) -> int:
    """utime + stime of `pid` and its descendants, in clock ticks."""
    total = 0
    for p in process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError):
            pass
    return total


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


class RssSampler(threading.Thread):
    """The peak of tree_rss(pid), sampled every `period` seconds."""

    def __init__(self, pid: int, period: float = 0.1):
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.samples: list[tuple[float, int]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.samples.append((time.time(), tree_rss(self.pid)))
            self.done.wait(self.period)

    def peak(self, start: float = 0.0, end: float = float("inf")) -> int:
        return max((r for t, r in self.samples if start <= t <= end), default=0)


def scrape(url: str | None) -> dict[str, float]:
    """Prometheus text as {"name{labels}": value}; empty without a URL."""
    if not url:
        return {}
    import requests
    values = {}
    for line in requests.get(url, timeout=30).text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            values[key] = float(value)
    return values


def total(metrics: dict[str, float], name: str, labels: str = "") -> float:
    """The sum over the series of `name` whose labels hold `labels`."""
    return sum(v for k, v in metrics.items()
               if k.split("{")[0] == name and labels in k)


def histogram_delta(before: dict, after: dict, name: str, labels: str) -> list[tuple[float, float]]:
    """(upper bound, observations) per bucket of `name` between two scrapes."""
    buckets = []
    for key, value in after.items():
        match = re.match(rf'{re.escape(name)}_bucket\{{(.*)le="([^"]+)"', key)
        if match and labels in match.group(1):
            buckets.append((float(match.group(2)), value - before.get(key, 0.0)))
    return sorted(buckets)


def histogram_quantile(buckets: list[tuple[float, float]], q: float) -> float | None:
    """Prometheus's histogram_quantile: linear within the bucket."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank, lower, below = q * buckets[-1][1], 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = upper, count
    return lower


# --- one model's footprint ---------------------------------------------------

def probe(args: argparse.Namespace) -> None:
    """One model's footprint, the median of the repository index's
    memory_bytes once a request each has loaded the first `count` models,
    and the server's resident memory with none loaded: when ready, and once
    those have been unloaded again (ONNX Runtime's library and environment
    are set up by then, and stay)."""
    import requests
    base = f"http://127.0.0.1:{args.http}"
    rss_ready = tree_rss(args.pid)
    names = [model_name(i) for i in range(args.count)]
    for name in names:
        requests.post(f"{base}/v2/models/{name}/infer", data=BODY, timeout=120).raise_for_status()
    rows = requests.post(f"{base}/v2/repository/index", json={"ready": True}, timeout=30).json()
    footprints = sorted(int(r["memory_bytes"]) for r in rows if "memory_bytes" in r)
    rss_loaded = tree_rss(args.pid)
    for name in names:
        requests.post(f"{base}/v2/repository/models/{name}/unload", timeout=120).raise_for_status()
    time.sleep(2)  # the janitor trims the allocator a moment after an unload
    result = {"rss_ready": rss_ready, "rss_loaded": rss_loaded, "rss_unloaded": tree_rss(args.pid),
              "count": args.count, "footprints": footprints, "footprint": int(np.median(footprints))}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "footprints"}))


# --- the request stream ------------------------------------------------------

def stream(seed: int, client: int, models: int, exponent: float, count: int) -> np.ndarray:
    """Client `client`'s models: Zipf ranks (P(k) ~ k^-exponent) mapped to
    models by a permutation fixed by `seed`."""
    weights = np.arange(1, models + 1, dtype=np.float64) ** -exponent
    order = np.random.default_rng(seed).permutation(models)
    ranks = np.random.default_rng([seed, client]).choice(models, count, p=weights / weights.sum())
    return order[ranks]


async def one_client(session, url: str, models: np.ndarray, stop_at: float, out: list,
                     errors: list) -> None:
    import aiohttp
    for m in itertools.cycle(models):
        if time.time() >= stop_at:
            return
        start = time.time_ns()
        try:
            async with session.post(url.format(model_name(int(m))), data=BODY) as answer:
                body = await answer.read()
                status = answer.status
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            body, status = repr(e).encode(), 0
        out.append((int(m), start, time.time_ns(), status))
        if status != 200 and len(errors) < 20:
            errors.append(f"{status} {body[:300].decode(errors='replace')}")


async def clients(port: int, streams: list[np.ndarray], start_at: float,
                  stop_at: float) -> tuple[list, list]:
    import aiohttp
    url = f"http://127.0.0.1:{port}/v2/models/{{}}/infer"
    out: list = []
    errors: list = []
    connector = aiohttp.TCPConnector(limit=len(streams))
    timeout = aiohttp.ClientTimeout(total=120)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as s:
        await asyncio.sleep(max(0.0, start_at - time.time()))
        await asyncio.gather(*(one_client(s, url, m, stop_at, out, errors) for m in streams))
    return out, errors


def worker(port: int, streams: list[np.ndarray], start_at: float,
           stop_at: float) -> tuple[np.ndarray, list[str]]:
    """(model, start ns, end ns, HTTP status or 0) per request, and the
    first error answers."""
    records, errors = asyncio.run(clients(port, streams, start_at, stop_at))
    return np.array(records, dtype=np.int64).reshape(-1, 4), errors


def ready_times(log: Path) -> dict[int, np.ndarray]:
    """Per model index, the wall-clock ns of its "model ready" lines."""
    year = datetime.now(timezone.utc).year
    found: dict[int, list[int]] = {}
    for line in log.read_text(errors="replace").splitlines():
        match = READY.match(line)
        if not match or not match.group(7).startswith("m"):
            continue
        month, day, hour, minute, second, micros = (int(g) for g in match.groups()[:6])
        when = datetime(year, month, day, hour, minute, second, micros, tzinfo=timezone.utc)
        found.setdefault(int(match.group(7)[1:]), []).append(int(when.timestamp() * 1e6) * 1000)
    return {m: np.array(sorted(t)) for m, t in found.items()}


def waited_for_load(records: np.ndarray, ready: dict[int, np.ndarray]) -> np.ndarray:
    """Whether each request's [start, end] holds a ready line of its model."""
    cold = np.zeros(len(records), dtype=bool)
    for i, (m, start, end, _) in enumerate(records):
        times = ready.get(int(m))
        if times is not None:
            j = np.searchsorted(times, start)
            cold[i] = j < len(times) and times[j] <= end
    return cold


def latency(ms: np.ndarray) -> dict:
    if len(ms) == 0:
        return {"count": 0, "p50_ms": None, "p99_ms": None}
    return {"count": int(len(ms)), "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)), "mean_ms": float(ms.mean())}


def server_figures(before: dict, after: dict) -> dict:
    """Loads, evictions and load times between two scrapes (nereid's names)."""
    def delta(name: str, labels: str = "") -> float:
        return total(after, name, labels) - total(before, name, labels)
    load_buckets = histogram_delta(before, after, "nereid_model_load_seconds", 'cause="demand"')
    wait_buckets = histogram_delta(before, after, "nereid_model_load_wait_seconds", "")
    loads = delta("nereid_model_load_seconds_count", 'cause="demand"')
    waits = delta("nereid_model_load_wait_seconds_count")
    return {
        "loads": delta("nereid_model_loads_total", 'cause="demand"'),
        "evictions": delta("nereid_model_evictions_total"),
        "load_p50_s": histogram_quantile(load_buckets, 0.5),
        "load_p99_s": histogram_quantile(load_buckets, 0.99),
        "load_mean_s": delta("nereid_model_load_seconds_sum", 'cause="demand"') / loads if loads else None,
        "wait_p50_s": histogram_quantile(wait_buckets, 0.5),
        "wait_mean_s": delta("nereid_model_load_wait_seconds_sum") / waits if waits else None,
        "wait_failures": delta("nereid_model_load_wait_failures_total"),
        "models_resident": sum(1 for k in after if k.startswith("nereid_model_memory_bytes{")),
    }


def drive(args: argparse.Namespace) -> None:
    per_client = int(args.seconds + args.warmup) * 200
    streams = [stream(args.seed, c, args.models, args.zipf, per_client) for c in range(args.clients)]
    groups = [streams[w::args.processes] for w in range(args.processes)]
    sampler = RssSampler(args.pid)
    sampler.start()
    start_at = time.time() + 1.0
    t0, t1 = start_at + args.warmup, start_at + args.warmup + args.seconds
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(args.processes, mp_context=context) as pool:
        running = [pool.submit(worker, args.http, g, start_at, t1) for g in groups]
        time.sleep(max(0.0, t0 - time.time()))
        before, ticks_before = scrape(args.metrics), tree_ticks(args.pid)
        time.sleep(max(0.0, t1 - time.time()))
        after, ticks_after = scrape(args.metrics), tree_ticks(args.pid)
        done = [r.result() for r in running]
    records = np.concatenate([d[0] for d in done])
    errors = sorted({e for d in done for e in d[1]})[:10]
    sampler.done.set()
    sampler.join()
    window = records[(records[:, 1] >= t0 * 1e9) & (records[:, 1] < t1 * 1e9)]
    ok = window[:, 3] == 200
    statuses = dict(zip(*(v.tolist() for v in np.unique(window[:, 3], return_counts=True))))
    cold = waited_for_load(window, ready_times(Path(args.log)))
    ms = (window[:, 2] - window[:, 1]) / 1e6
    ticks = ticks_after - ticks_before
    result = {
        "clients": args.clients, "processes": args.processes, "zipf": args.zipf,
        "models": args.models, "seconds": args.seconds, "warmup": args.warmup,
        "requests": int(len(window)), "errors": int((~ok).sum()),
        "statuses": {str(k): v for k, v in statuses.items()}, "error_samples": errors,
        "rps": float(ok.sum() / args.seconds),
        "warm": latency(ms[ok & ~cold]), "cold": latency(ms[ok & cold]),
        "all": latency(ms[ok]),
        "distinct_models": int(len(np.unique(window[:, 0]))),
        "peak_rss": sampler.peak(), "peak_rss_window": sampler.peak(t0, t1),
        "end_rss": tree_rss(args.pid),
        "cpu_ticks": ticks, "ticks_per_s": os.sysconf("SC_CLK_TCK"),
        "cpu_us_per_request": ticks * 1e6 / os.sysconf("SC_CLK_TCK") / max(int(ok.sum()), 1),
        **server_figures(before, after),
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("rps", "errors", "warm", "cold", "peak_rss")}))


# --- watch a server load every model -----------------------------------------

def watch(args: argparse.Namespace) -> None:
    """Follows a server loading `models` models at startup until all have
    loaded, it exits, memory runs short or time runs out; says which."""
    started, series, reason = time.time(), [], "time"
    peak, floor = 0, args.min_available
    while time.time() - started < args.timeout:
        loaded = len(TRITON_LOADED.findall(Path(args.log).read_text(errors="replace")))
        rss, available = tree_rss(args.pid), mem_available()
        peak = max(peak, rss)
        series.append((round(time.time() - started, 1), loaded, rss, available))
        if loaded >= args.models:
            reason = "all loaded"
            break
        if not Path(f"/proc/{args.pid}").exists():
            reason = "exited"
            break
        if available < floor:
            reason = "memory"
            break
        time.sleep(args.period)
    result = {"reason": reason, "models": args.models, "loaded": series[-1][1],
              "rss": series[-1][2], "peak_rss": peak,
              "available": series[-1][3], "seconds": time.time() - started,
              "min_available": floor, "series": series[:: max(1, len(series) // 200)]}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "series"}))


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("make")
    p.add_argument("repo")
    p.add_argument("--models", type=int, default=1000)
    p.add_argument("--megabytes", type=float, default=3.0)
    p = sub.add_parser("copies")
    p.add_argument("repo")
    p.add_argument("out")
    p.add_argument("--models", type=int, default=1000)
    p.add_argument("--copies", type=int, default=8)
    p = sub.add_parser("probe")
    p.add_argument("--http", type=int, required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--count", type=int, default=20)
    p = sub.add_parser("drive")
    p.add_argument("--http", type=int, required=True)
    p.add_argument("--metrics")
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--models", type=int, default=1000)
    p.add_argument("--zipf", type=float, default=1.0)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--warmup", type=float, default=15)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--seed", type=int, default=36)
    p = sub.add_parser("watch")
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--models", type=int, default=1000)
    p.add_argument("--min-available", type=int, default=6 << 30)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--period", type=float, default=0.2)
    args = parser.parse_args()
    {"make": make, "copies": copies, "probe": probe, "drive": drive, "watch": watch}[args.command](args)


if __name__ == "__main__":
    main()
