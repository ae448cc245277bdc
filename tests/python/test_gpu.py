"""GPUs on a machine without one. Without a driver, a KIND_GPU model fails
with Triton's message while the others serve, no nv_gpu_* metric exists and
CUDA shared memory says it is not supported. With NEREID_TEST_FAKE_GPUS the
device layer describes GPUs that exist only in it: placement, the Python
backend's instance args, the GPU metrics and CUDA shared memory run end to
end (a fake IPC handle names a POSIX shared memory object instead of device
memory); nothing computes on them."""

from __future__ import annotations

import base64
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from calls import index, ready
from conftest import REPO_ROOT, start_server, stop_server

PLACED_MODEL = '''import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Answers where its instance runs, as initialize(args) said."""

    def initialize(self, args):
        keys = ("model_instance_kind", "model_instance_device_id", "model_instance_name")
        self.placed = json.dumps({k: args[k] for k in keys}).encode()

    def execute(self, requests):
        out = pb_utils.Tensor("PLACED", np.array([self.placed], dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
'''

PLACED_CONFIG = """backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PLACED" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


def python_model(repo: Path, name: str, groups: str = "") -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(PLACED_MODEL)
    (repo / name / "config.pbtxt").write_text(PLACED_CONFIG + groups)


def simple_copy(repo: Path, name: str, groups: str = "") -> None:
    shutil.copytree(REPO_ROOT / "model_repository/simple", repo / name)
    config = repo / name / "config.pbtxt"
    text = config.read_text().replace('name: "simple"', f'name: "{name}"')
    config.write_text(text + groups)


def tensorrt_model(repo: Path) -> None:
    (repo / "plan" / "1").mkdir(parents=True)
    (repo / "plan" / "1" / "model.plan").write_bytes(b"not an engine")
    (repo / "plan" / "config.pbtxt").write_text(
        'platform: "tensorrt_plan"\nmax_batch_size: 8\n'
        'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )


def gpu_group(gpus: str = "", kind: str = "KIND_GPU", count: int = 1) -> str:
    listed = f" gpus: [ {gpus} ]" if gpus else ""
    return f"instance_group [ {{ kind: {kind} count: {count}{listed} }} ]\n"


def start(tmp_path: Path, repo: Path, fake_gpus: int | None, extra: list[str] | None = None):
    flags = [f"--backend-config=python,python-path={sys.executable}", "--exit-on-error=false",
             "--strict-readiness=false", "--metrics-interval-ms=100", *(extra or [])]
    saved = os.environ.get("NEREID_TEST_FAKE_GPUS")
    if fake_gpus is not None:
        os.environ["NEREID_TEST_FAKE_GPUS"] = str(fake_gpus)
    try:
        return start_server(tmp_path, [repo], flags)
    finally:
        if saved is None:
            os.environ.pop("NEREID_TEST_FAKE_GPUS", None)
        else:
            os.environ["NEREID_TEST_FAKE_GPUS"] = saved


def placed(server, model: str) -> dict:
    import json

    client = httpclient.InferenceServerClient(server.http_url)
    data = httpclient.InferInput("IN", [1], "INT32")
    data.set_data_from_numpy(np.array([1], dtype=np.int32))
    out = client.infer(model, [data]).as_numpy("PLACED")
    return json.loads(out[0])


def metrics(server) -> str:
    return requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text


def wait_for_gpu_metrics(server) -> str:
    import time

    deadline = time.monotonic() + 60
    text = metrics(server)
    while "nv_gpu_utilization{" not in text and time.monotonic() < deadline:
        time.sleep(0.1)
        text = metrics(server)
    return text


def test_without_a_gpu_kind_gpu_fails_with_tritons_message_and_others_serve(tmp_path):
    repo = tmp_path / "repo"
    simple_copy(repo, "on_gpu", gpu_group("0"))
    simple_copy(repo, "on_cpu")
    python_model(repo, "py_default")
    tensorrt_model(repo)
    server = start(tmp_path, repo, None)
    try:
        rows = index(server)
        assert ready(server, "on_cpu") and ready(server, "py_default")
        assert placed(server, "py_default")["model_instance_kind"] == "CPU"
        assert "nv_gpu_" not in metrics(server)
        assert "cuda_shared_memory" not in requests.get(f"{server.base}/v2").json()["extensions"]
        assert "no GPU is used" in server.log()
    finally:
        assert stop_server(server) == 0
    assert rows["on_gpu"]["state"] == "UNAVAILABLE"
    assert "instance group on_gpu_0 of model on_gpu has kind KIND_GPU but no GPUs are available" in rows["on_gpu"]["reason"]
    assert rows["plan"]["state"] == "UNAVAILABLE"
    assert "TensorRT runtime library (libnvinfer) not found" in rows["plan"]["reason"]


def test_fake_gpus_place_instances_as_triton_does(tmp_path):
    repo = tmp_path / "repo"
    python_model(repo, "py_default")
    python_model(repo, "py_gpu1", gpu_group("1", count=2))
    python_model(repo, "py_model", gpu_group(kind="KIND_MODEL"))
    python_model(repo, "py_bad_gpu", gpu_group("5"))
    simple_copy(repo, "onnx_default")
    simple_copy(repo, "onnx_gpu", gpu_group("0"))
    server = start(tmp_path, repo, 2)
    try:
        rows = index(server)
        config = requests.get(f"{server.base}/v2/models/py_default/config").json()
        assert config["instance_group"] == [
            {"name": "py_default", "kind": "KIND_GPU", "count": 1, "gpus": [0, 1], "profile": [],
             "passive": False, "host_policy": "", "secondary_devices": []}]
        on_gpu1 = placed(server, "py_gpu1")
        assert (on_gpu1["model_instance_kind"], on_gpu1["model_instance_device_id"]) == ("GPU", "1")
        assert on_gpu1["model_instance_name"] in ("py_gpu1_0_0", "py_gpu1_0_1")
        assert placed(server, "py_model")["model_instance_kind"] == "MODEL"
        # This machine's ONNX Runtime has no CUDA provider: its models
        # default to the CPU, and an explicit KIND_GPU says why it fails.
        onnx = requests.get(f"{server.base}/v2/models/onnx_default/config").json()
        assert onnx["instance_group"][0]["kind"] == "KIND_CPU"
        assert ready(server, "onnx_default")
    finally:
        assert stop_server(server) == 0
    assert rows["py_bad_gpu"]["state"] == "UNAVAILABLE"
    assert ("specifies invalid or unsupported gpu id 5. GPUs with at least the minimum required CUDA "
            "compute compatibility are: 0, 1") in rows["py_bad_gpu"]["reason"]
    assert rows["onnx_gpu"]["state"] == "UNAVAILABLE"
    assert "CUDA" in rows["onnx_gpu"]["reason"], rows["onnx_gpu"]


def test_cuda_visible_devices_and_compute_capability_pick_gpus(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    python_model(repo, "py_default")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    server = start(tmp_path, repo, 4)
    try:
        config = requests.get(f"{server.base}/v2/models/py_default/config").json()
        assert config["instance_group"][0]["gpus"] == [0, 1]
    finally:
        stop_server(server)
    server = start(tmp_path, repo, 4, ["--min-supported-compute-capability=9.5"])
    try:
        config = requests.get(f"{server.base}/v2/models/py_default/config").json()
        assert config["instance_group"][0]["kind"] == "KIND_CPU"
    finally:
        stop_server(server)


def test_gpu_metrics_carry_tritons_names_and_labels(tmp_path):
    repo = tmp_path / "repo"
    python_model(repo, "py_default")
    server = start(tmp_path, repo, 2)
    try:
        text = wait_for_gpu_metrics(server)
    finally:
        stop_server(server)
    uuids = ["GPU-00000000-0000-0000-0000-000000000000", "GPU-00000000-0000-0000-0000-000000000001"]
    for name in ["nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes",
                 "nv_gpu_power_usage", "nv_gpu_power_limit", "nv_energy_consumption"]:
        for uuid in uuids:
            assert f'{name}{{gpu_uuid="{uuid}"}}' in text, name
    server = start(tmp_path, repo, 2, ["--allow-gpu-metrics=false"])
    try:
        import time

        time.sleep(0.3)
        assert "nv_gpu_" not in metrics(server)
    finally:
        stop_server(server)


def fake_handle(key: str) -> bytes:
    """What the fake device layer takes for a cudaIpcMemHandle_t: a prefix and
    the shared memory key, NUL-padded to 64 bytes."""
    raw = b"nereid-fake-ipc:" + key.lstrip("/").encode()
    return raw.ljust(64, b"\0")


@pytest.fixture
def gpu_server(tmp_path):
    server = start(tmp_path, REPO_ROOT / "model_repository", 1)
    yield server
    stop_server(server)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_cuda_shared_memory_inputs_and_outputs(gpu_server, protocol):
    key = f"/nereid-cuda-{protocol}-{os.getpid()}"
    size = 4 * 16 * 4
    region = shm.create_shared_memory_region(f"cuda_{protocol}", key, size)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    shm.set_shared_memory_region(region, [a, b])
    handle = fake_handle(key)
    lib = httpclient if protocol == "http" else grpcclient
    url = gpu_server.http_url if protocol == "http" else gpu_server.grpc_url
    client = lib.InferenceServerClient(url)
    try:
        assert "cuda_shared_memory" in requests.get(f"{gpu_server.base}/v2").json()["extensions"]
        client.register_cuda_shared_memory("gpu_region", base64.b64encode(handle), 0, size)
        status = client.get_cuda_shared_memory_status()
        if protocol == "http":
            assert status == [{"name": "gpu_region", "device_id": 0, "byte_size": size}]
        else:
            assert status.regions["gpu_region"].byte_size == size
        inputs = [lib.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_shared_memory("gpu_region", 64, 0)
        inputs[1].set_shared_memory("gpu_region", 64, 64)
        outputs = [lib.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
        outputs[0].set_shared_memory("gpu_region", 64, 128)
        outputs[1].set_shared_memory("gpu_region", 64, 192)
        client.infer("simple", inputs, outputs=outputs)
        out0 = shm.get_contents_as_numpy(region, np.int32, [1, 16], offset=128)
        out1 = shm.get_contents_as_numpy(region, np.int32, [1, 16], offset=192)
        np.testing.assert_array_equal(out0, a + b)
        np.testing.assert_array_equal(out1, a - b)
        with pytest.raises(Exception) as e:
            client.register_cuda_shared_memory("gpu_region", base64.b64encode(handle), 0, size)
        assert "already in manager" in str(e.value)
        with pytest.raises(Exception) as e:
            client.register_cuda_shared_memory("too_big", base64.b64encode(handle), 0, size + 1)
        assert "failed to register shared memory region 'too_big': invalid args" in str(e.value)
    finally:
        client.unregister_cuda_shared_memory()
        shm.destroy_shared_memory_region(region)
    empty = client.get_cuda_shared_memory_status()
    assert (empty == []) if protocol == "http" else not empty.regions
