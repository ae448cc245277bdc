"""The Python worker's request path for the worker tests' add_sub, step by
step, in-process and without the channel: decoding the execute message,
building the requests, the model's execute, encoding the answer (outputs
written to the arena). Each step is repeated and timed hot, so these are
the floor of what a request costs in Python; a worker woken for each
request runs colder than this. Prints a markdown table (used by
benches/python_profile.sh).

    .venv/bin/python benches/python_steps.py
"""

import importlib.util
import json
import struct
import sys
import time
from pathlib import Path

PYTHON = Path(__file__).resolve().parents[1] / "crates/nereid-backend-python/python"
sys.path.insert(0, str(PYTHON))
sys.path.insert(0, str(PYTHON / "tests"))

import numpy as np  # noqa: E402

import codec  # noqa: E402
import harness  # noqa: E402
from nereid_pb import messages, shm  # noqa: E402
from nereid_pb.inference import InferenceRequest  # noqa: E402
from nereid_pb.wire import region_tensor  # noqa: E402

REPEAT = 20_000


def add_sub():
    spec = importlib.util.spec_from_file_location("add_sub", harness.model_file("add_sub"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    outputs = [{"name": f"OUTPUT{i}", "data_type": "TYPE_FP32", "dims": [4]} for i in range(2)]
    model.initialize({"model_config": json.dumps({"name": "add_sub", "input": [], "output": outputs})})
    return model


def timed(step):
    start = time.perf_counter()
    for _ in range(REPEAT):
        result = step()
    return (time.perf_counter() - start) / REPEAT * 1e6, result


def main():
    model = add_sub()
    server_file = harness.ShmFile()
    files, arena = shm.InputFiles(), shm.OutputArena()
    inputs = [server_file.put(f"INPUT{i}", "FP32", np.ones((1, 4), np.float32)) for i in range(2)]
    print("| requests in the batch | decode µs | build requests µs | model µs | encode µs | all µs per request |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for size in (1, 8):
        batch = [harness.request(str(i), inputs, ["OUTPUT0", "OUTPUT1"]) for i in range(size)]
        _, payload = codec.encode({"op": "execute", "read": 0, "requests": batch}, codec.Keys())
        decode, (_, entries) = timed(lambda: messages.decode_execute(payload))

        def build():
            return [
                InferenceRequest._from_server(
                    key=e.key, inputs=[region_tensor(*t, files) for t in e.inputs],
                    request_id=e.request_id, correlation_id=e.correlation_id, flags=e.flags,
                    timeout=e.timeout, parameters=e.parameters, requested_output_names=e.outputs,
                    cancelled=set())
                for e in entries
            ]

        build_us, requests = timed(build)
        model_us, responses = timed(lambda: model.execute(requests))

        def encode():
            encoder = messages.Encoder()
            encoder.parts.append(struct.pack("<I", len(requests)))
            blocks = []
            for response, request in zip(responses, requests):
                encoder.parts.append(messages.SLOT_ANSWERED)
                encoder.entry(response, request._requested_output_names, arena, blocks)
            message = encoder.message(b"\0")
            arena.free(*blocks)
            return message

        encode_us, _ = timed(encode)
        steps = [decode, build_us, model_us, encode_us]
        print(f"| {size} | " + " | ".join(f"{us / size:.1f}" for us in steps)
              + f" | {sum(steps) / size:.1f} |")
    arena.close()
    server_file.close()


if __name__ == "__main__":
    main()
