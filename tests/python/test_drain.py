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

from conftest import REPO_ROOT, STOP_S, WAIT_S, start_server, wait_until

# Each execution says it started (a file) and is held until the test opens
# the gate (another file), so that requests are in flight or queued for as
# long as the test needs, however slow the machine, and no longer.
MODEL = '''
import os
import time
import triton_python_backend_utils as pb_utils

STARTED = {started!r}
GATE = {gate!r}


class TritonPythonModel:
    def execute(self, requests):
        open(STARTED, "a").close()
        deadline = time.monotonic() + 600
        while not os.path.exists(GATE) and time.monotonic() < deadline:
            time.sleep(0.01)
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
instance_group [ { count: 1 kind: KIND_CPU } ]
'''
# Long enough for the checks made during the drain on a busy machine; the
# drain itself ends as soon as the gate opens.
EXIT_TIMEOUT = "--exit-timeout-secs=120"
# How long a client waits for an answer held at the gate: through the
# test's waits and checks before it opens.
CLIENT_S = 300


class Gate:
    """The files through which the test sees an execution start and lets
    every execution finish."""

    def __init__(self, tmp: Path):
        self.started = tmp / "slow-started"
        self.gate = tmp / "slow-gate"

    def wait_started(self) -> None:
        wait_until(self.started.exists, "an execution of 'slow' to start")

    def open(self) -> None:
        self.gate.touch()


def repository(tmp: Path, gate: Gate) -> Path:
    model = tmp / "repo" / "slow"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.py").write_text(
        MODEL.format(started=str(gate.started), gate=str(gate.gate)))
    return tmp / "repo"


def pending(s) -> float:
    """nv_inference_pending_request_count of 'slow': requests accepted
    and not yet executing."""
    metrics = requests.get(f"http://127.0.0.1:{s.metrics_port}/metrics", timeout=30).text
    lines = [line for line in metrics.splitlines()
             if line.startswith("nv_inference_pending_request_count") and 'model="slow"' in line]
    return float(lines[0].split()[-1]) if lines else 0.0


def not_ready(s) -> bool:
    return requests.get(f"{s.base}/v2/health/ready", timeout=30).status_code != 200


def http_infer(url: str, value: int) -> np.ndarray:
    client = httpclient.InferenceServerClient(url, network_timeout=CLIENT_S)
    x = httpclient.InferInput("INPUT0", [1, 4], "INT32")
    x.set_data_from_numpy(np.full((1, 4), value, np.int32))
    return client.infer("slow", [x]).as_numpy("OUTPUT0")


def grpc_infer(url: str, value: int) -> np.ndarray:
    client = grpcclient.InferenceServerClient(url)
    x = grpcclient.InferInput("INPUT0", [1, 4], "INT32")
    x.set_data_from_numpy(np.full((1, 4), value, np.int32))
    return client.infer("slow", [x], client_timeout=CLIENT_S).as_numpy("OUTPUT0")


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
        result, error = answers.get(timeout=CLIENT_S)
        assert error is None, error
        got.append(result.as_numpy("OUTPUT0"))
    client.stop_stream()
    return got


def test_sigterm_finishes_every_accepted_request_and_refuses_new_ones(tmp_path):
    gate = Gate(tmp_path)
    s = start_server(tmp_path, [repository(tmp_path, gate)],
                     [f"--backend-config=python,python-path={sys.executable}", EXIT_TIMEOUT])
    with ThreadPoolExecutor(max_workers=25) as pool:
        try:
            # One request runs (held at the gate); the others queue behind it.
            held = pool.submit(http_infer, s.http_url, 50)
            gate.wait_started()
            accepted = [pool.submit(http_infer, s.http_url, v) for v in range(10)]
            accepted += [pool.submit(grpc_infer, s.grpc_url, v) for v in range(10, 20)]
            streamed = pool.submit(stream_infer, s.grpc_url, [20, 21, 22])
            wait_until(lambda: pending(s) >= 23, "every request to be accepted")
            s.process.send_signal(signal.SIGTERM)
            drain(s)
        finally:
            gate.open()
        assert (held.result(timeout=WAIT_S) == 100).all()
        for value, future in enumerate(accepted):
            assert (future.result(timeout=WAIT_S) == value * 2).all()
        assert [a[0][0] for a in streamed.result(timeout=WAIT_S)] == [40, 42, 44]
    assert s.process.wait(timeout=STOP_S) == 0, s.log()
    log = s.log()
    assert "every accepted request was answered" in log, log
    waited = re.search(r"waiting for (\d+) accepted requests", log)
    assert waited and int(waited.group(1)) >= 24, log


def drain(s) -> None:
    """Checks the drain while the accepted requests are held: not ready,
    new requests refused, over HTTP and gRPC."""
    wait_until(lambda: not_ready(s), "the server to turn not ready")
    late = requests.post(f"{s.base}/v2/models/slow/infer", json={"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}, timeout=30)
    assert late.status_code == 503, late.text
    assert "shutting down" in late.json()["error"]
    try:
        grpc_infer(s.grpc_url, 99)
        raise AssertionError("a request during the drain was served")
    except Exception as e:  # noqa: BLE001
        assert "UNAVAILABLE" in str(e) or "shutting down" in str(e), e


FAST_REQUEST = (b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,4],'
                b'"data":[1,2,3,4]}]}')


class KeptConnection:
    """One keep-alive HTTP/1.1 connection on a raw socket, so that the test
    knows each request was written whole before it reads the answer."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
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
    gate = Gate(tmp_path)
    repo = repository(tmp_path, gate)
    shutil.copytree(REPO_ROOT / "tests" / "models" / "identity_fp32", repo / "identity_fp32")
    s = start_server(tmp_path, [repo], [f"--backend-config=python,python-path={sys.executable}",
                                        EXIT_TIMEOUT])
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
        written.wait(timeout=WAIT_S)
        deadline = time.monotonic() + WAIT_S
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
        # A slow request in flight makes the drain last, through which the
        # clients keep sending; it is held until every client has been
        # refused (503) at least once. The drain ends once it is answered.
        try:
            slow = pool.submit(http_infer, s.http_url, 7)
            gate.wait_started()
            running = [pool.submit(client, i) for i in range(clients)]
            written.wait(timeout=WAIT_S)
            s.process.send_signal(signal.SIGTERM)
            wait_until(lambda: all(503 in r["statuses"] or f.done() for r, f in zip(results, running)),
                       "every client to be refused during the drain")
        finally:
            gate.open()
        for future in running:
            future.result(timeout=WAIT_S)
        assert (slow.result(timeout=WAIT_S) == 14).all()
    # The idle connection was closed without a word, after the grace.
    assert idle.answer() is None
    for connection in connections + [idle]:
        connection.close()
    assert s.process.wait(timeout=STOP_S) == 0, s.log()
    for index, result in enumerate(results):
        statuses = result["statuses"]
        assert result["bare_closes"] == 0, (index, statuses[-5:], s.log())
        assert result["closed_cleanly"], (index, statuses[-5:])
        assert set(statuses) <= {200, 503}, (index, set(statuses))
        assert statuses[-1] == 503, (index, statuses[-5:])
    refused = sum(r["statuses"].count(503) for r in results)
    assert refused >= clients, refused
