"""Python-backend models (`model.py`) beside ONNX ones, through tritonclient
over HTTP and gRPC. The models are the worker tests' own
(crates/nereid-backend-python/python/tests/models), each with a config."""

from __future__ import annotations

import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from calls import PROTOCOLS, index, infer, model_stats
from conftest import REPO_ROOT, start_server, stop_server

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


def python_model(repo: Path, name: str, model: str, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    shutil.copy(MODELS / model / "1" / "model.py", repo / name / "1" / "model.py")
    (repo / name / "config.pbtxt").write_text(config)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("python_backend")
    repo = tmp / "repo"
    python_model(repo, "add_sub", "add_sub", ADD_SUB)
    python_model(repo, "error_response", "error_response", DOUBLE)
    python_model(repo, "import_error", "import_error", DOUBLE)
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


def test_batched_requests_reach_execute_together_and_answer_separately(srv):
    before = model_stats(srv, "error_response")
    values = [np.full((1, 3), v, dtype=np.float32) for v in (1, -1, 2, 3, -5, 4)]

    def one(x):
        try:
            return infer(srv, "grpc", "error_response", [("IN", x, "FP32")]).outputs["OUT"]
        except InferenceServerException as e:
            return e.message()

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(one, values))
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
