#!/usr/bin/env python3
"""libtorch called in-process, with no server in front: the ceiling
benches/torch.sh compares nereid's TorchScript backend against.

Loads a TorchScript file with torch.jit.load, then for each batch size calls
forward() back to back, under inference mode as Triton's PyTorch backend
runs it, for a fixed time, and prints one JSON object per batch size:
rows per second and the p50 latency of one call. Inputs are seeded FP32
values made once per batch size, outside the timed loop.

Usage: $(scripts/setup-torch-python.sh) benches/raw_torch.py MODEL.pt [--batches 1,64] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch


def measure(module, batch: int, features: int, seconds: float) -> dict:
    x = torch.from_numpy(np.random.default_rng(batch).standard_normal((batch, features)).astype(np.float32))
    with torch.inference_mode():
        for _ in range(20):  # warm-up: the JIT profiles and optimises on the first calls
            module(x)
        latencies = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            module(x)
            latencies.append(time.perf_counter() - t0)
    total = sum(latencies)
    return {
        "batch": batch,
        "calls": len(latencies),
        "rows_per_s": batch * len(latencies) / total,
        "p50_us": statistics.median(latencies) * 1e6,
        "threads": torch.get_num_threads(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--batches", default="1,64")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--features", type=int, default=256)
    args = parser.parse_args()
    module = torch.jit.load(args.model)
    for batch in (int(b) for b in args.batches.split(",")):
        print(json.dumps(measure(module, batch, args.features, args.seconds)), flush=True)


if __name__ == "__main__":
    main()
