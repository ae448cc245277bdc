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
