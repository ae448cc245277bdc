"""Drain on SIGTERM: the server turns not ready at once, answers new
requests 503 / UNAVAILABLE, finishes every request it had accepted (HTTP,
gRPC and a gRPC stream) within `--exit-timeout-secs`, logs how many it
waited for, and exits 0. Triton stops at once instead (its issue #6230).
Clients that keep their connections and send request after request, one
written just before the signal, get an answer to every request (200, then
503 with `Connection: close`), never a bare close."""

from __future__ import annotations

import queue
import re
import shutil
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import REPO_ROOT, start_server

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


FAST_REQUEST = (b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,4],'
                b'"data":[1,2,3,4]}]}')


class KeptConnection:
    """One keep-alive HTTP/1.1 connection on a raw socket, so that the test
    knows each request was written whole before it reads the answer."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.pending = b""

    def send(self) -> None:
        self.sock.sendall(b"POST /v2/models/identity_fp32/infer HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(FAST_REQUEST) + FAST_REQUEST)

    def answer(self) -> tuple[int, bool] | None:
        """(status, whether the server closes after it), or None for a bare
        close: the connection ended with no answer."""
        try:
            while b"\r\n\r\n" not in self.pending:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return None
                self.pending += chunk
            head, self.pending = self.pending.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
            length = int(headers.get("content-length", "0"))
            while len(self.pending) < length:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return None
                self.pending += chunk
            self.pending = self.pending[length:]
            return int(lines[0].split()[1]), headers.get("connection", "").lower() == "close"
        except ConnectionResetError:
            return None

    def close(self) -> None:
        self.sock.close()


def test_kept_connections_get_an_answer_to_every_request_through_the_drain(tmp_path):
    repo = repository(tmp_path)
    shutil.copytree(REPO_ROOT / "tests" / "models" / "identity_fp32", repo / "identity_fp32")
    s = start_server(tmp_path, [repo], [f"--backend-config=python,python-path={sys.executable}",
                                        "--exit-timeout-secs=20"])
    clients = 8
    connections = [KeptConnection(s.http_port) for _ in range(clients)]
    idle = KeptConnection(s.http_port)
    idle.send()
    assert idle.answer() == (200, False)
    written = threading.Barrier(clients + 1)
    results: list[dict] = [{"statuses": [], "bare_closes": 0, "closed_cleanly": False}
                           for _ in range(clients)]

    def client(index: int) -> None:
        connection, result = connections[index], results[index]
        for _ in range(20):  # warm, before the signal
            connection.send()
            result["statuses"].append(connection.answer()[0])
        connection.send()  # a request written just before the signal
        written.wait(timeout=20)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            answer = connection.answer()
            if answer is None:
                result["bare_closes"] += 1
                return
            status, closing = answer
            result["statuses"].append(status)
            if closing:
                result["closed_cleanly"] = connection.answer() is None
                return
            connection.send()

    with ThreadPoolExecutor(max_workers=clients + 1) as pool:
        # A slow request in flight makes the drain last about a second,
        # through which the clients keep sending.
        slow = pool.submit(http_infer, s.http_url, 7)
        time.sleep(0.3)
        running = [pool.submit(client, i) for i in range(clients)]
        written.wait(timeout=20)
        s.process.send_signal(signal.SIGTERM)
        for future in running:
            future.result(timeout=60)
        assert (slow.result(timeout=30) == 14).all()
    # The idle connection was closed without a word, after the grace.
    assert idle.answer() is None
    for connection in connections + [idle]:
        connection.close()
    assert s.process.wait(timeout=30) == 0, s.log()
    for index, result in enumerate(results):
        statuses = result["statuses"]
        assert result["bare_closes"] == 0, (index, statuses[-5:], s.log())
        assert result["closed_cleanly"], (index, statuses[-5:])
        assert set(statuses) <= {200, 503}, (index, set(statuses))
        assert statuses[-1] == 503, (index, statuses[-5:])
    refused = sum(r["statuses"].count(503) for r in results)
    assert refused >= clients, refused
