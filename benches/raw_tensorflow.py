#!/usr/bin/env python3
"""TensorFlow called in-process, with no server in front: the ceiling
benches/tensorflow.sh compares nereid's SavedModel backend against.

Loads a SavedModel with tf.saved_model.load, then for each batch size calls
its serving signature back to back for a fixed time, and prints one JSON
object per batch size: rows per second and the p50 latency of one call.
Inputs are seeded FP32 values made once per batch size, outside the timed
loop.

Usage: $(scripts/setup-tensorflow-python.sh) benches/raw_tensorflow.py SAVEDMODEL [--batches 1,64] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def measure(fn, name: str, batch: int, features: int, seconds: float) -> dict:
    x = tf.constant(np.random.default_rng(batch).standard_normal((batch, features)).astype(np.float32))
    for _ in range(20):
        fn(**{name: x})
    latencies = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        fn(**{name: x})
        latencies.append(time.perf_counter() - t0)
    total = sum(latencies)
    return {
        "batch": batch,
        "calls": len(latencies),
        "rows_per_s": batch * len(latencies) / total,
        "p50_us": statistics.median(latencies) * 1e6,
        "threads": tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--batches", default="1,64")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--input", default="INPUT")
    args = parser.parse_args()
    fn = tf.saved_model.load(args.model).signatures["serving_default"]
    for batch in (int(b) for b in args.batches.split(",")):
        print(json.dumps(measure(fn, args.input, batch, args.features, args.seconds)), flush=True)


if __name__ == "__main__":
    main()
