"""Python-backend models (`model.py`) beside ONNX ones, through tritonclient
over HTTP and gRPC. The models are the worker tests' own
(crates/nereid-backend-python/python/tests/models), each with a config."""

from __future__ import annotations

import shutil
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from calls import PROTOCOLS, index, infer, model_stats, ready
from conftest import REPO_ROOT, start_server, stop_server, wait_until

MODELS = REPO_ROOT / "crates/nereid-backend-python/python/tests/models"

ADD_SUB = """backend: "python"
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 20000 }
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

DOUBLE = """backend: "python"
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 20000 }
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""

# For the batching test's six requests: a batch of six goes at once, and
# the batcher waits up to a minute for them, so that clients that start
# late on a busy machine still share a batch (with a 20 ms window they
# could all miss it).
BATCH_OF_SIX = DOUBLE.replace(
    "max_queue_delay_microseconds: 20000",
    "preferred_batch_size: [ 6 ] max_queue_delay_microseconds: 60000000")


BLS_MODEL = '''import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Calls the model named by the request's MODEL input (the ONNX `simple`,
    the Python `add_sub`, or one that does not exist) with X as both inputs;
    answers its first output, or the call's error."""

    def execute(self, requests):
        responses = []
        for request in requests:
            target = pb_utils.get_input_tensor_by_name(request, "MODEL").as_numpy()[0].decode()
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if target == "add_sub":
                x = x.astype(np.float32)
            inputs = [pb_utils.Tensor("INPUT0", x), pb_utils.Tensor("INPUT1", x)]
            answer = pb_utils.InferenceRequest(
                model_name=target, requested_output_names=["OUTPUT0"], inputs=inputs).exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(answer.error().message())))
                continue
            out = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy().astype(np.int32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", out)]))
        return responses
'''

BLS_CONFIG = """backend: "python"
max_batch_size: 0
input [ { name: "MODEL" data_type: TYPE_STRING dims: [ 1 ] }, { name: "X" data_type: TYPE_INT32 dims: [ -1, -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1, -1 ] } ]
"""


# Every datatype tritonclient sends as numpy (BF16, which numpy lacks, is
# covered by the worker's own tests).
TYPES = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
         "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
         "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
         "BYTES": np.object_}


def config_type(wire: str) -> str:
    return "TYPE_STRING" if wire == "BYTES" else f"TYPE_{wire}"


IDENTITY = 'backend: "python"\nmax_batch_size: 0\n' + "".join(
    f'input {{ name: "INPUT_{t}" data_type: {config_type(t)} dims: [ -1, -1 ] }}\n'
    f'output {{ name: "OUTPUT_{t}" data_type: {config_type(t)} dims: [ -1, -1 ] }}\n'
    for t in TYPES)

BYTES_OPS = """backend: "python"
max_batch_size: 0
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "UPPER" data_type: TYPE_STRING dims: [ -1 ] },
         { name: "LENGTH" data_type: TYPE_INT32 dims: [ -1 ] },
         { name: "DECODED" data_type: TYPE_STRING dims: [ -1 ] } ]
"""


def python_model(repo: Path, name: str, model: str, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    shutil.copy(MODELS / model / "1" / "model.py", repo / name / "1" / "model.py")
    (repo / name / "config.pbtxt").write_text(config)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("python_backend")
    repo = tmp / "repo"
    python_model(repo, "add_sub", "add_sub", ADD_SUB)
    python_model(repo, "error_response", "error_response", BATCH_OF_SIX)
    python_model(repo, "import_error", "import_error", DOUBLE)
    python_model(repo, "identity", "identity", IDENTITY)
    python_model(repo, "bytes_ops", "bytes_ops", BYTES_OPS)
    python_model(repo, "faulty", "faulty", DOUBLE)
    (repo / "auto_complete" / "1").mkdir(parents=True)
    shutil.copy(MODELS / "auto_complete" / "1" / "model.py", repo / "auto_complete" / "1" / "model.py")
    shutil.copytree(REPO_ROOT / "model_repository" / "simple", repo / "simple")
    (repo / "bls" / "1").mkdir(parents=True)
    (repo / "bls" / "1" / "model.py").write_text(BLS_MODEL)
    (repo / "bls" / "config.pbtxt").write_text(BLS_CONFIG)
    server = start_server(tmp, [repo], ["--exit-on-error=false", "--strict-readiness=false",
                                        f"--backend-config=python,python-path={sys.executable}"])
    yield server
    assert stop_server(server) == 0, server.log()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_add_sub_in_python_beside_onnx(srv, protocol):
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.ones((2, 4), dtype=np.float32)
    got = infer(srv, protocol, "add_sub", [("INPUT0", a, "FP32"), ("INPUT1", b, "FP32")])
    np.testing.assert_array_equal(got.outputs["OUTPUT0"], a + b)
    np.testing.assert_array_equal(got.outputs["OUTPUT1"], a - b)
    x = np.arange(16, dtype=np.int32).reshape(1, 16)
    onnx = infer(srv, protocol, "simple", [("INPUT0", x, "INT32"), ("INPUT1", x, "INT32")])
    np.testing.assert_array_equal(onnx.outputs["OUTPUT0"], 2 * x)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_identity_returns_every_datatype_unchanged(srv, protocol):
    if protocol == "http-json":
        # One request carries every datatype, and Triton takes FP16 over
        # HTTP as binary data only (test_http_infer.py checks JSON per type).
        pytest.skip("FP16 cannot travel as JSON")
    rng = np.random.default_rng(7)
    inputs = []
    for wire, dtype in TYPES.items():
        if wire == "BYTES":
            # JSON carries BYTES as text, so only there are they UTF-8.
            odd = b"\x00" if protocol == "http-json" else b"\xff"
            array = np.array([[b"a\x00b", odd], [b"", "é".encode()]], dtype=np.object_)
        elif wire == "BOOL":
            array = rng.integers(0, 2, (2, 2)).astype(np.bool_)
        else:
            array = rng.integers(0, 100, (2, 2)).astype(dtype)
        inputs.append((f"INPUT_{wire}", array, wire))
    got = infer(srv, protocol, "identity", inputs)
    for name, array, wire in inputs:
        out = got.outputs["OUTPUT" + name[len("INPUT"):]]
        assert out.shape == array.shape, wire
        if wire == "BYTES":
            assert out.tolist() == array.tolist()
        else:
            assert out.dtype == array.dtype, wire
            np.testing.assert_array_equal(out, array)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_bytes_model_answers_byte_exact(srv, protocol):
    text = np.array([b"hello", b"", "grüße".encode(), b"nul\x00byte"], dtype=np.object_)
    got = infer(srv, protocol, "bytes_ops", [("TEXT", text, "BYTES")])
    assert got.outputs["UPPER"].tolist() == [t.upper() for t in text]
    assert got.outputs["LENGTH"].tolist() == [len(t) for t in text]
    assert got.outputs["DECODED"].tolist() == [t.decode().encode() for t in text]


@pytest.mark.parametrize("protocol", ["http-json", "grpc"])
def test_a_model_without_a_config_completes_its_own(srv, protocol):
    config = requests.get(f"{srv.base}/v2/models/auto_complete/config").json()
    assert config["max_batch_size"] == 4 and "dynamic_batching" in config, config
    assert [i["name"] for i in config["input"]] == ["INPUT0", "INPUT1"]
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    got = infer(srv, protocol, "auto_complete", [("INPUT0", x, "FP32")])
    np.testing.assert_array_equal(got.outputs["OUTPUT0"], x)


def test_an_exception_in_execute_fails_the_batch_with_the_traceback(srv):
    client = httpclient.InferenceServerClient(srv.http_url)
    tensor = httpclient.InferInput("IN", [1, 2], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 2), dtype=np.float32))
    with pytest.raises(InferenceServerException) as e:
        client.infer("faulty", [tensor], parameters={"mode": "raise"})
    message = e.value.message()
    assert "Failed to process the request(s) for model 'faulty_0'" in message, message
    assert "ValueError: boom" in message and "helper_that_fails" in message, message
    got = client.infer("faulty", [tensor])
    np.testing.assert_array_equal(got.as_numpy("OUT"), np.ones((1, 2), dtype=np.float32))
    client.close()


def test_batched_requests_reach_execute_together_and_answer_separately(srv):
    before = model_stats(srv, "error_response")
    values = [np.full((1, 3), v, dtype=np.float32) for v in (1, -1, 2, 3, -5, 4)]
    # Each thread connects first and all send at once.
    clients = [grpcclient.InferenceServerClient(srv.grpc_url) for _ in values]
    for client in clients:
        assert client.is_server_ready()
    together = threading.Barrier(len(values))

    def one(client, x):
        tensor = grpcclient.InferInput("IN", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        together.wait(timeout=120)
        try:
            return client.infer("error_response", [tensor], client_timeout=120).as_numpy("OUT")
        except InferenceServerException as e:
            return e.message()

    try:
        with ThreadPoolExecutor(len(values)) as pool:
            answers = list(pool.map(one, clients, values))
    finally:
        for client in clients:
            client.close()
    for x, answer in zip(values, answers):
        if x[0, 0] < 0:
            assert "IN must not be negative" in answer
        else:
            np.testing.assert_array_equal(answer, x * 2)
    after = model_stats(srv, "error_response")
    assert after["execution_count"] - before["execution_count"] < 6, "the requests were batched"


def test_an_import_error_makes_the_model_unavailable_with_the_reason(srv):
    row = index(srv)["import_error"]
    assert row["state"] == "UNAVAILABLE"
    assert "Error" in row["reason"] and "Traceback" not in row["reason"], row


@pytest.mark.parametrize("protocol", ["http-binary", "grpc"])
def test_bls_calls_onnx_and_python_models_and_reports_their_errors(srv, protocol):
    x = np.arange(16, dtype=np.int32).reshape(1, 16)
    for target in ("simple", "add_sub"):
        if target == "add_sub":
            y = np.arange(4, dtype=np.int32).reshape(1, 4)
        else:
            y = x
        got = infer(srv, protocol, "bls", [("MODEL", np.array([target.encode()], dtype=np.object_), "BYTES"),
                                          ("X", y, "INT32")])
        np.testing.assert_array_equal(got.outputs["OUT"], 2 * y)
    with pytest.raises(InferenceServerException) as e:
        infer(srv, protocol, "bls", [("MODEL", np.array([b"nope"], dtype=np.object_), "BYTES"), ("X", x, "INT32")])
    assert "nope" in e.value.message()


DIES = '''import os
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Echoes IN, unless it is negative: then the process dies (a crash no
    Python exception handler sees)."""

    def execute(self, requests):
        for request in requests:
            if (pb_utils.get_input_tensor_by_name(request, "IN").as_numpy() < 0).any():
                os._exit(3)
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
'''

WAITS = '''import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Says in the log that it started, then waits (up to 2 minutes) for
    its request to be cancelled; answers CANCELLED if it was, OUT = IN if
    not."""

    def execute(self, requests):
        pb_utils.Logger.log_info("execute started")
        deadline = time.monotonic() + 120
        while not requests[0].is_cancelled() and time.monotonic() < deadline:
            time.sleep(0.005)
        if requests[0].is_cancelled():
            error = pb_utils.TritonError("request cancelled", pb_utils.TritonError.CANCELLED)
            return [pb_utils.InferenceResponse(error=error)]
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(requests[0], "IN").as_numpy())])]
'''

SLOW = """backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""


@pytest.fixture
def explicit_srv(tmp_path):
    repo = tmp_path / "repo"
    (repo / "dies" / "1").mkdir(parents=True)
    (repo / "dies" / "1" / "model.py").write_text(DIES)
    (repo / "dies" / "config.pbtxt").write_text(SLOW)
    (repo / "cancellable" / "1").mkdir(parents=True)
    (repo / "cancellable" / "1" / "model.py").write_text(WAITS)
    (repo / "cancellable" / "config.pbtxt").write_text(SLOW)
    server = start_server(tmp_path, [repo], [
        "--model-control-mode=explicit", "--load-model=dies", "--load-model=cancellable",
        f"--backend-config=python,python-path={sys.executable}"])
    yield server
    assert stop_server(server) == 0, server.log()


def test_a_worker_that_keeps_dying_makes_the_model_unavailable_until_it_is_loaded_again(explicit_srv):
    srv = explicit_srv
    good = [("IN", np.ones(2, dtype=np.float32), "FP32")]
    bad = [("IN", -np.ones(2, dtype=np.float32), "FP32")]
    for attempt in range(3):
        with pytest.raises(InferenceServerException) as e:
            infer(srv, "grpc", "dies", bad)
        assert "the Python worker exited" in e.value.message() or "died" in e.value.message()
        if attempt < 2:
            assert ready(srv, "dies"), "restarted after a death"
            np.testing.assert_array_equal(infer(srv, "http-json", "dies", good).outputs["OUT"], good[0][1])
    # The instance thread marks the version after it has answered the
    # batch, so the client may look a moment before it does.
    wait_until(lambda: not ready(srv, "dies"), "the version to leave READY")
    row = index(srv)["dies"]
    assert row["state"] == "UNAVAILABLE" and "died 3 times" in row["reason"], row
    with pytest.raises(InferenceServerException):
        infer(srv, "grpc", "dies", good)
    assert ready(srv, "cancellable"), "the other model serves on"
    r = requests.post(f"{srv.base}/v2/repository/models/dies/load")
    assert r.status_code == 200, r.text
    assert index(srv)["dies"]["state"] == "READY"
    np.testing.assert_array_equal(infer(srv, "grpc", "dies", good).outputs["OUT"], good[0][1])


def test_a_cancelled_grpc_request_is_seen_by_is_cancelled(explicit_srv):
    """Without the cancellation the model would answer the request
    normally, after 2 minutes."""
    srv = explicit_srv
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    tensor = grpcclient.InferInput("IN", [2], "FP32")
    tensor.set_data_from_numpy(np.ones(2, dtype=np.float32))
    done = []
    call = client.async_infer("cancellable", [tensor], callback=lambda result, error: done.append(error))
    wait_until(lambda: "execute started" in srv.log(), "the request to reach the model")
    call.cancel()

    def failed() -> dict | None:
        stats = model_stats(srv, "cancellable")["inference_stats"]
        return stats if stats["fail"]["count"] else None

    stats = wait_until(failed, "the model to see the cancellation")
    assert stats["success"]["count"] == 0
    client.close()
