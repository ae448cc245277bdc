"""Drain on SIGTERM: the server turns not ready at once, answers new
requests 503 / UNAVAILABLE, finishes every request it had accepted (HTTP,
gRPC and a gRPC stream) within `--exit-timeout-secs`, logs how many it
waited for, and exits 0. Triton stops at once instead (its issue #6230)."""

from __future__ import annotations

import queue
import re
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import start_server

MODEL = '''
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(1.0)
        answers = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 2)]))
        return answers
'''

CONFIG = '''
name: "slow"
backend: "python"
max_batch_size: 32
dynamic_batching { }
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]
'''


def repository(tmp: Path) -> Path:
    model = tmp / "repo" / "slow"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.py").write_text(MODEL)
    return tmp / "repo"


def http_infer(url: str, value: int) -> np.ndarray:
    client = httpclient.InferenceServerClient(url, network_timeout=30)
    x = httpclient.InferInput("INPUT0", [1, 4], "INT32")
    x.set_data_from_numpy(np.full((1, 4), value, np.int32))
    return client.infer("slow", [x]).as_numpy("OUTPUT0")


def grpc_infer(url: str, value: int) -> np.ndarray:
    client = grpcclient.InferenceServerClient(url)
    x = grpcclient.InferInput("INPUT0", [1, 4], "INT32")
    x.set_data_from_numpy(np.full((1, 4), value, np.int32))
    return client.infer("slow", [x], client_timeout=30).as_numpy("OUTPUT0")


def stream_infer(url: str, values: list[int]) -> list[np.ndarray]:
    client = grpcclient.InferenceServerClient(url)
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    for value in values:
        x = grpcclient.InferInput("INPUT0", [1, 4], "INT32")
        x.set_data_from_numpy(np.full((1, 4), value, np.int32))
        client.async_stream_infer("slow", [x])
    got = []
    for _ in values:
        result, error = answers.get(timeout=30)
        assert error is None, error
        got.append(result.as_numpy("OUTPUT0"))
    client.stop_stream()
    return got


def test_sigterm_finishes_every_accepted_request_and_refuses_new_ones(tmp_path):
    s = start_server(tmp_path, [repository(tmp_path)],
                     [f"--backend-config=python,python-path={sys.executable}", "--exit-timeout-secs=20"])
    with ThreadPoolExecutor(max_workers=24) as pool:
        accepted = [pool.submit(http_infer, s.http_url, v) for v in range(10)]
        accepted += [pool.submit(grpc_infer, s.grpc_url, v) for v in range(10, 20)]
        streamed = pool.submit(stream_infer, s.grpc_url, [20, 21, 22])
        # Every request reaches the server (the model holds them 1 s).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            metrics = requests.get(f"http://127.0.0.1:{s.metrics_port}/metrics").text
            pending = [line for line in metrics.splitlines()
                       if line.startswith("nv_inference_pending_request_count")]
            if pending and float(pending[0].split()[-1]) >= 1:
                break
            time.sleep(0.02)
        time.sleep(0.2)
        s.process.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        # Draining: not ready, new requests refused, over HTTP and gRPC.
        assert requests.get(f"{s.base}/v2/health/ready").status_code != 200
        late = requests.post(f"{s.base}/v2/models/slow/infer", json={"inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 4], "data": [1, 2, 3, 4]}]})
        assert late.status_code == 503, late.text
        assert "shutting down" in late.json()["error"]
        try:
            grpc_infer(s.grpc_url, 99)
            raise AssertionError("a request during the drain was served")
        except Exception as e:  # noqa: BLE001
            assert "UNAVAILABLE" in str(e) or "shutting down" in str(e), e
        for value, future in enumerate(accepted):
            assert (future.result(timeout=30) == value * 2).all()
        assert [a[0][0] for a in streamed.result(timeout=30)] == [40, 42, 44]
    assert s.process.wait(timeout=30) == 0, s.log()
    log = s.log()
    assert "every accepted request was answered" in log, log
    waited = re.search(r"waiting for (\d+) accepted requests", log)
    assert waited and int(waited.group(1)) >= 20, log
