"""TorchScript models (Triton's `pytorch_libtorch`) through tritonclient over
HTTP and gRPC, on the `torch` build of nereid (`make test` builds it).

The models are `model_repository_torch/` (the examples `make run TORCH=1`
serves) and `tests/models_torch/`, both made by scripts/make_torch_models.py.
Expected answers come from numpy, or from the ONNX twin of the same MLP."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest
import requests
from tritonclient.utils import InferenceServerException

from calls import PROTOCOLS, TIMEOUT_S, index, infer, model_stats, ready
from conftest import REPO_ROOT, start_server, stop_server
from models import mlp_reference, sample

TORCH_TYPES = [
    ("bool", "BOOL", np.bool_),
    ("uint8", "UINT8", np.uint8),
    ("int8", "INT8", np.int8),
    ("int16", "INT16", np.int16),
    ("int32", "INT32", np.int32),
    ("int64", "INT64", np.int64),
    ("fp16", "FP16", np.float16),
    ("fp32", "FP32", np.float32),
    ("fp64", "FP64", np.float64),
    ("bf16", "BF16", ml_dtypes.bfloat16),
]


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("torch")
    repos = [REPO_ROOT / "model_repository", REPO_ROOT / "model_repository_torch", REPO_ROOT / "tests" / "models_torch"]
    # Some test models are meant to fail; the rest must serve regardless.
    server = start_server(tmp, repos, ["--exit-on-error=false", "--strict-readiness=false"])
    yield server
    assert stop_server(server) == 0, server.log()


# --- the examples ----------------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_torchscript_mlp_answers_as_the_onnx_one(srv, protocol):
    x = sample(np.float32, (5, 256), seed=11) / 100
    got = infer(srv, protocol, "mlp_torch", [("INPUT__0", x, "FP32")])
    np.testing.assert_allclose(got.outputs["OUTPUT__0"], mlp_reference(x), rtol=1e-4, atol=1e-4)
    onnx = infer(srv, protocol, "mlp", [("INPUT", x, "FP32")])
    np.testing.assert_allclose(got.outputs["OUTPUT__0"], onnx.outputs["OUTPUT"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_add_sub_binds_inputs_by_forward_argument_name(srv, protocol):
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.int32)
    got = infer(srv, protocol, "add_sub_torch", [("INPUT1", b, "INT32"), ("INPUT0", a, "INT32")])
    np.testing.assert_array_equal(got.outputs["OUTPUT__0"], a + b)
    np.testing.assert_array_equal(got.outputs["OUTPUT__1"], a - b)


def test_metadata_and_config_say_pytorch(srv):
    meta = requests.get(f"{srv.base}/v2/models/mlp_torch").json()
    assert meta["platform"] == "pytorch_libtorch"
    assert meta["inputs"] == [{"name": "INPUT__0", "datatype": "FP32", "shape": [-1, 256]}]
    config = requests.get(f"{srv.base}/v2/models/mlp_torch/config").json()
    assert (config["backend"], config["default_model_filename"]) == ("pytorch", "model.pt")


def test_concurrent_requests_are_batched(srv):
    before = model_stats(srv, "mlp_torch")
    rows = [sample(np.float32, (1, 256), seed=s) / 100 for s in range(32)]

    def one(x):
        return infer(srv, "grpc", "mlp_torch", [("INPUT__0", x, "FP32")]).outputs["OUTPUT__0"]

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(one, rows))
    for x, y in zip(rows, answers):
        np.testing.assert_allclose(y, mlp_reference(x), rtol=1e-4, atol=1e-4)
    after = model_stats(srv, "mlp_torch")
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == 32
    assert executions < 32, f"{executions} executions for 32 concurrent requests"


# --- Triton's conventions ---------------------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("short,datatype,dtype", TORCH_TYPES)
def test_every_numeric_datatype_round_trips(srv, protocol, short, datatype, dtype):
    if datatype == "BF16":
        if protocol == "http-json":
            pytest.skip("tritonclient sends BF16 over HTTP as binary data only")
        data = sample(np.float32, (3, 4), seed=5).astype(ml_dtypes.bfloat16)
    elif datatype == "FP16" and protocol == "http-json":
        pytest.skip("Triton takes FP16 over HTTP as binary data only (test_http_infer.py)")
    else:
        data = sample(dtype, (3, 4), seed=5)
    got = infer(srv, protocol, f"torch_identity_{short}", [("INPUT__0", data, datatype)])
    out = got.outputs["OUTPUT__0"]
    assert out.dtype == data.dtype and out.shape == data.shape
    assert out.tobytes() == data.tobytes()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_tuple_outputs_by_index_and_only_those_asked_for(srv, protocol):
    x = np.array([[1.0, -2.0, 3.0, -4.0], [0.5, 0.5, 0.5, 0.5]], dtype=np.float32)
    got = infer(srv, protocol, "torch_multi_output", [("INPUT__0", x, "FP32")])
    np.testing.assert_array_equal(got.outputs["OUT__0"], x + 1)
    np.testing.assert_array_equal(got.outputs["OUT__1"], x.sum(axis=1, keepdims=True).astype(np.int64))
    np.testing.assert_array_equal(got.outputs["OUT__2"], x > 0)
    only = infer(srv, protocol, "torch_multi_output", [("INPUT__0", x, "FP32")], outputs=["OUT__2"])
    assert only.names == ["OUT__2"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_list_outputs_in_config_order(srv, protocol):
    x = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    got = infer(srv, protocol, "torch_list_output", [("INPUT__0", x, "FP32")])
    np.testing.assert_array_equal(got.outputs["DOUBLE"], x * 2)
    np.testing.assert_array_equal(got.outputs["TRIPLE"], x * 3)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_strings_are_list_str_byte_exact(srv, protocol):
    if protocol == "http-json":
        strings = [b"abc", b"", "\u00e9t\u00e9".encode(), b"x" * 300]
    else:
        strings = [b"abc", b"", b"\x00nul\x00", b"\xff\xfe", "\u00e9".encode(), b"x" * 300]
    data = np.array(strings, dtype=np.object_)
    got = infer(srv, protocol, "torch_strings", [("INPUT__0", data, "BYTES")])
    assert list(got.outputs["OUTPUT__0"]) == strings
    ascii_lengths = [len(s) for s in strings if s.isascii()]
    lengths = [int(n) for s, n in zip(strings, got.outputs["OUTPUT__1"]) if s.isascii()]
    assert lengths == ascii_lengths


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_dict_input_and_naming_conventions(srv, protocol):
    a = np.array([[5.0, 7.0]], dtype=np.float32)
    b = np.array([[1.0, 2.0]], dtype=np.float32)
    got = infer(srv, protocol, "torch_dict_input", [("a", a, "FP32"), ("b", b, "FP32")])
    np.testing.assert_array_equal(got.outputs["OUTPUT__0"], a - b)
    # forward(x, y) returns x - y; the config lists y first.
    got = infer(srv, protocol, "torch_forward_args", [("x", a, "FP32"), ("y", b, "FP32")])
    np.testing.assert_array_equal(got.outputs["OUTPUT__0"], a - b)
    # Neither argument names nor NAME__index: the config's order is forward()'s.
    got = infer(srv, protocol, "torch_strict_order", [("second", b, "FP32"), ("first", a, "FP32")])
    np.testing.assert_array_equal(got.outputs["difference"], a - b)


@pytest.mark.parametrize("protocol", ["http-binary", "grpc"])
def test_triton_parameters_with_two_instances_sharing_weights(srv, protocol):
    x = np.array([[3.0, 3.0]], dtype=np.float32)
    y = np.array([[1.0, 2.0]], dtype=np.float32)
    got = infer(srv, protocol, "torch_parameters", [("x", x, "FP32"), ("y", y, "FP32")])
    np.testing.assert_array_equal(got.outputs["OUTPUT__0"], x - y)
    config = requests.get(f"{srv.base}/v2/models/torch_parameters/config").json()
    assert config["parameters"]["INFERENCE_MODE"] == {"string_value": "false"}


# --- errors ----------------------------------------------------------------

def test_an_exception_in_forward_is_the_request_error(srv):
    body = {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [2], "data": [1.0, -1.0]}]}
    r = requests.post(f"{srv.base}/v2/models/torch_raises/infer", json=body, timeout=TIMEOUT_S)
    assert r.status_code == 500, r.text
    assert "PyTorch execute failure" in r.json()["error"] and "negative input" in r.json()["error"]
    with pytest.raises(InferenceServerException) as e:
        infer(srv, "grpc", "torch_raises", [("INPUT__0", np.array([-1.0], dtype=np.float32), "FP32")])
    assert "negative input" in e.value.message() and e.value.status() == "StatusCode.INTERNAL"
    ok = infer(srv, "grpc", "torch_raises", [("INPUT__0", np.array([2.0], dtype=np.float32), "FP32")])
    assert ok.outputs["OUTPUT__0"].tolist() == [2.0]


def test_a_scalar_output_is_refused(srv):
    with pytest.raises(InferenceServerException) as e:
        infer(srv, "http-binary", "torch_scalar_output", [("INPUT__0", np.ones(3, dtype=np.float32), "FP32")])
    assert "output 'OUTPUT__0' is a scalar which is not supported." in e.value.message()


def test_failed_models_say_why_and_the_rest_serve(srv):
    rows = index(srv)
    bad = rows["torch_bad_file"]
    assert bad["state"] == "UNAVAILABLE"
    assert "failed to load model 'torch_bad_file'" in bad["reason"] and "zip" in bad["reason"], bad
    no_config = rows["torch_no_config"]
    assert no_config["state"] == "UNAVAILABLE"
    assert "'x' must specify 'data_type'" in no_config["reason"], no_config
    assert ready(srv, "mlp_torch") and ready(srv, "mlp")


def copy_identity(repo, name: str, edit) -> None:
    """`torch_identity_fp32` as `name`, its config changed by `edit`."""
    shutil.copytree(REPO_ROOT / "tests/models_torch/torch_identity_fp32", repo / name)
    path = repo / name / "config.pbtxt"
    path.write_text(edit(path.read_text().replace("torch_identity_fp32", name)))


def test_configs_the_module_cannot_serve_fail_with_the_reason(tmp_path):
    """BYTES for an argument forward() takes as a Tensor, and an instance on a
    GPU this machine lacks: each model fails its load saying why."""
    repo = tmp_path / "repo"
    copy_identity(repo, "torch_bytes", lambda c: c.replace("TYPE_FP32", "TYPE_STRING").replace("max_batch_size: 8", "max_batch_size: 0"))
    copy_identity(repo, "torch_gpu", lambda c: c + "instance_group [\n  {\n    kind: KIND_GPU\n    gpus: [ 0 ]\n  }\n]\n")
    copy_identity(repo, "torch_fine", lambda c: c)
    server = start_server(tmp_path, [repo], ["--exit-on-error=false", "--strict-readiness=false"])
    try:
        rows = index(server)
        assert ready(server, "torch_fine")
    finally:
        assert stop_server(server) == 0
    assert rows["torch_bytes"]["state"] == "UNAVAILABLE"
    assert "BYTES inputs must be List[str]" in rows["torch_bytes"]["reason"], rows["torch_bytes"]
    assert rows["torch_gpu"]["state"] == "UNAVAILABLE"
    assert "gpu" in rows["torch_gpu"]["reason"].lower(), rows["torch_gpu"]
