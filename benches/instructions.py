"""Instructions per inference, the regression guard: counts with callgrind
what nereid executes for a fixed mix of requests, so that a later change
that adds cost shows as a larger figure. Instruction counts do not move with
the machine's load the way times do; runs of the same build agree to a few
per cent (thread hand-offs spin a little differently each time).

Run by benches/instructions.sh, which starts nereid under
`valgrind --tool=callgrind --instr-atstart=no`; this script switches
instrumentation on, sends each kind of request COUNT times one after
another, dumps the counts per kind, and writes the "Instructions per
inference" section of docs/benchmarks.md.

    instructions.py --pid PID --http HOST:PORT --grpc HOST:PORT --out FILE --count N
"""

from __future__ import annotations

import argparse
import datetime
import glob
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

sys.path.insert(0, str(Path(__file__).parent))
from sections import write_section  # noqa: E402

BEGIN = "<!-- instructions:begin -->"
END = "<!-- instructions:end -->"


def simple_inputs(lib, binary: bool = True):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [lib.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for t in inputs:
        if lib is httpclient:
            t.set_data_from_numpy(a, binary_data=binary)
        else:
            t.set_data_from_numpy(a)
    return inputs


def mlp_inputs(lib):
    x = np.linspace(-1, 1, 256, dtype=np.float32).reshape(1, 256)
    t = lib.InferInput("INPUT", [1, 256], "FP32")
    t.set_data_from_numpy(x)
    return [t]


def mix(http, grpc):
    """The fixed request kinds: (name, one call)."""
    h = httpclient.InferenceServerClient(http)
    g = grpcclient.InferenceServerClient(grpc)
    binary = [httpclient.InferRequestedOutput(n, binary_data=True) for n in ("OUTPUT0", "OUTPUT1")]
    return [
        ("`simple` HTTP, binary tensors", lambda: h.infer("simple", simple_inputs(httpclient), outputs=binary)),
        ("`simple` HTTP, JSON tensors", lambda: h.infer("simple", simple_inputs(httpclient, binary=False))),
        ("`simple` gRPC", lambda: g.infer("simple", simple_inputs(grpcclient))),
        ("`mlp` gRPC (batch 1)", lambda: g.infer("mlp", mlp_inputs(grpcclient))),
    ]


def callgrind(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def dumped_total(pattern: str, before: set[str]) -> tuple[int, str]:
    """The instruction total of the one dump file written since `before`."""
    for _ in range(200):
        new = sorted(set(glob.glob(pattern)) - before)
        if new:
            time.sleep(0.2)
            with open(new[-1]) as f:
                for line in f:
                    if line.startswith(("summary:", "totals:")):
                        return int(line.split()[1]), new[-1]
        time.sleep(0.05)
    raise RuntimeError("callgrind wrote no dump")


def measure(args) -> list[tuple[str, float]]:
    rows = []
    pattern = f"{args.dump_prefix}*"
    for name, call in mix(args.http, args.grpc):
        for _ in range(20):  # warm the connection and the code paths
            call()
        callgrind(args.pid, "--instr=on")
        callgrind(args.pid, "--zero")
        for _ in range(args.count):
            call()
        before = set(glob.glob(pattern))
        callgrind(args.pid, "--dump")
        total, _ = dumped_total(pattern, before)
        callgrind(args.pid, "--instr=off")
        rows.append((name, total / args.count))
        print(f"{name}: {total / args.count:,.0f} instructions per inference", flush=True)
    return rows


def section(rows, args) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    lines = [
        "## Instructions per inference (regression guard)", "",
        f"Written by `benches/instructions.sh` on {now} (git `{rev}`); rerun it (`make bench`) "
        "after a change to the request path and compare. The server runs under "
        "`valgrind --tool=callgrind`; each request kind is sent "
        f"{args.count} times in a row by one client (after 20 unmeasured), and the server's "
        "instructions over those requests (every thread: frontends, engine, instance threads, "
        "ONNX Runtime) are divided by their number. Counting instructions, not time, makes the "
        "figure independent of the machine's load; a change that adds cost per request shows "
        "as a higher count.", "",
        "| request | instructions per inference |", "|---|---|",
    ]
    lines += [f"| {name} | {value:,.0f} |" for name, value in rows]
    return "\n".join(lines) + "\n\n"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--http", required=True)
    p.add_argument("--grpc", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--count", type=int, default=300)
    p.add_argument("--dump-prefix", required=True)
    args = p.parse_args()
    rows = measure(args)
    if os.environ.get("BENCH_WRITE", "1") != "0":
        write_section(Path(args.out), BEGIN, END, section(rows, args))


if __name__ == "__main__":
    main()
