"""The streaming benchmark's client: CONCURRENCY gRPC streams at once
(tritonclient.grpc.aio, one process), each sending REQUESTS requests to a
decoupled model one after another and reading every response; prints one
JSON line: responses per second over the run, and the time to first
response and to the last, per request, in ms (p50, p99).

    decoupled_client.py URL MODEL RESPONSES CONCURRENCY REQUESTS
"""

import asyncio
import json
import sys
import time

import numpy as np
import tritonclient.grpc.aio as grpcclient


async def one_stream(client, model, responses, requests, samples):
    for _ in range(requests):
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([responses], dtype=np.int32))
        queue = asyncio.Queue()

        async def requests_iterator():
            yield {"model_name": model, "inputs": [tensor]}
            await queue.get()  # keep the stream open until the last answer

        start = time.perf_counter()
        first = None
        seen = 0
        async for result, error in client.stream_infer(requests_iterator()):
            if error is not None:
                raise RuntimeError(error)
            seen += 1
            if first is None:
                first = time.perf_counter() - start
            if seen == responses:
                break
        queue.put_nowait(None)
        samples.append((first, time.perf_counter() - start))


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


async def main(url, model, responses, concurrency, requests):
    client = grpcclient.InferenceServerClient(url)
    warm = []
    await one_stream(client, model, responses, 2, warm)
    samples = []
    start = time.perf_counter()
    await asyncio.gather(*(
        one_stream(client, model, responses, requests, samples) for _ in range(concurrency)
    ))
    wall = time.perf_counter() - start
    await client.close()
    first = [s[0] * 1000 for s in samples]
    last = [s[1] * 1000 for s in samples]
    print(json.dumps({
        "responses_per_s": round(len(samples) * responses / wall, 1),
        "requests": len(samples),
        "ttfr_p50_ms": round(percentile(first, 50), 2),
        "ttfr_p99_ms": round(percentile(first, 99), 2),
        "total_p50_ms": round(percentile(last, 50), 2),
        "total_p99_ms": round(percentile(last, 99), 2),
    }))


if __name__ == "__main__":
    url, model, responses, concurrency, requests = sys.argv[1:6]
    asyncio.run(main(url, model, int(responses), int(concurrency), int(requests)))
