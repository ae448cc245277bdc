"""Open-loop load for benches/latency_target.sh: sends single-row requests
over gRPC at a fixed rate for a while, whatever the answers, and counts
what came back. perf_analyzer 2.51 stops at the first refused request, so
the part of the benchmark past capacity, where nereid sheds, uses this.

    .venv/bin/python benches/latency_target_load.py --url 127.0.0.1:8001 \
        --model mlp_large --input INPUT --width 256 --rate 2500 --seconds 10

Prints one JSON object: offered and sent rates, answered (ok), refused
(UNAVAILABLE, and how many carried retry-after), other errors, the ok
answers per second over the run, and their latency percentiles in µs.
Requests that are still unanswered 10 s after the sending ends count as
errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import grpc
import numpy as np
from tritonclient.grpc import service_pb2, service_pb2_grpc


def request(model: str, name: str, width: int) -> service_pb2.ModelInferRequest:
    r = service_pb2.ModelInferRequest(model_name=model)
    r.inputs.add(name=name, datatype="FP32", shape=[1, width])
    r.raw_input_contents.append(np.full((1, width), 0.5, np.float32).tobytes())
    return r


async def one(stub, message, out: dict):
    started = time.perf_counter()
    try:
        await stub.ModelInfer(message, timeout=30)
        out["latencies"].append(time.perf_counter() - started)
    except grpc.aio.AioRpcError as e:
        if e.code() == grpc.StatusCode.UNAVAILABLE:
            out["refused"] += 1
            if "retry-after" in dict(e.trailing_metadata() or ()):
                out["retry_after"] += 1
        else:
            out["errors"] += 1


async def run(args) -> dict:
    out = {"latencies": [], "refused": 0, "retry_after": 0, "errors": 0}
    message = request(args.model, args.input, args.width)
    async with grpc.aio.insecure_channel(args.url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:  # connected and warm; a refusal is an answer too
            await stub.ModelInfer(message, timeout=30)
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE:
                raise
        tasks = []
        start = time.perf_counter()
        n = int(args.rate * args.seconds)
        for i in range(n):
            due = start + i / args.rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(stub, message, out)))
        sent_s = time.perf_counter() - start
        done, pending = await asyncio.wait(tasks, timeout=10)
        for t in pending:
            t.cancel()
        out["errors"] += len(pending)
        elapsed = time.perf_counter() - start
    lat = np.array(out.pop("latencies")) * 1e6
    return {
        "offered_per_s": args.rate,
        "sent_per_s": n / sent_s,
        "sent": n,
        "ok": int(lat.size),
        "ok_per_s": lat.size / elapsed,
        "refused": out["refused"],
        "refused_with_retry_after": out["retry_after"],
        "errors": out["errors"],
        "p50_us": float(np.percentile(lat, 50)) if lat.size else None,
        "p99_us": float(np.percentile(lat, 99)) if lat.size else None,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--input", default="INPUT")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--seconds", type=float, default=10)
    print(json.dumps(asyncio.run(run(parser.parse_args()))))


if __name__ == "__main__":
    main()
