"""The GPU check: starts a nereid binary on a machine with a GPU and checks,
through its HTTP and metrics endpoints only (urllib, no HTTP client library):

- discovery: the GPUs it logs, `cuda_shared_memory` among its extensions;
- the nv_gpu_* metrics, labelled by GPU UUID;
- a KIND_GPU Python model that computes with torch on cuda:N and returns a
  GPU tensor through pb_utils.Tensor.from_dlpack;
- two instances placed on the one GPU, and the default placement;
- CUDA shared memory made with tritonclient.utils.cuda_shared_memory:
  inputs read from it, outputs written into it.

Run by scripts/gpu-check.sh, which says what it needs. Every check prints
PASS or FAIL with what it saw; the exit status is the number of failures.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

TORCH_GPU_MODEL = '''import json

import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        kind = args["model_instance_kind"]
        self.device = torch.device(f"cuda:{args['model_instance_device_id']}" if kind == "GPU" else "cpu")

    def execute(self, requests):
        return [self.run(r) for r in requests]

    def run(self, request):
        input0 = pb_utils.get_input_tensor_by_name(request, "INPUT0")
        x = torch.from_dlpack(input0.to_dlpack()).to(self.device)
        y = x * 2
        output = pb_utils.Tensor.from_dlpack("OUTPUT0", y)
        back = torch.from_dlpack(output.to_dlpack())
        info = {"kind": self.args["model_instance_kind"], "device_id": self.args["model_instance_device_id"],
                "instance": self.args["model_instance_name"], "device": str(back.device),
                "is_cpu": output.is_cpu(), "input_is_cpu": input0.is_cpu(),
                "zero_copy": back.data_ptr() == y.data_ptr()}
        rows = np.array([[json.dumps(info)]] * y.shape[0], dtype=np.object_)
        return pb_utils.InferenceResponse([output, pb_utils.Tensor("INFO", rows)])
'''

TORCH_GPU_CONFIG = """backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "INFO" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]
dynamic_batching { }
"""

PLACED_MODEL = '''import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        keys = ("model_instance_kind", "model_instance_device_id", "model_instance_name")
        self.placed = json.dumps({k: args[k] for k in keys}).encode()

    def execute(self, requests):
        time.sleep(0.05)  # so that concurrent requests reach both instances
        out = pb_utils.Tensor("PLACED", np.array([self.placed], dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
'''

PLACED_CONFIG = """backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PLACED" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

IDENTITY_MODEL = '''import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0",
                pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * 3)]) for r in requests]
'''

IDENTITY_CONFIG = """backend: "python"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]
"""

failures = 0


def check(name: str, ok: bool, seen) -> None:
    global failures
    failures += 0 if ok else 1
    print(f"{'PASS' if ok else 'FAIL'} {name}: {seen}", flush=True)


def write_model(repo: Path, name: str, code: str, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(code)
    (repo / name / "config.pbtxt").write_text(config)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nereid:
    def __init__(self, binary: str, repo: Path, log: Path):
        self.http, self.metrics = free_port(), free_port()
        self.log_path = log
        args = [binary, f"--model-repository={repo}", "--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
                "--metrics-address=127.0.0.1", f"--http-port={self.http}", f"--grpc-port={free_port()}",
                f"--metrics-port={self.metrics}", "--metrics-interval-ms=200", "--exit-on-error=false",
                "--strict-readiness=false", f"--backend-config=python,python-path={sys.executable}"]
        self.process = subprocess.Popen(args, stdout=open(log, "w"), stderr=subprocess.STDOUT)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.http}{path}"

    def get(self, path: str):
        with urllib.request.urlopen(self.url(path), timeout=30) as r:
            return json.loads(r.read() or b"null")

    def post(self, path: str, body: dict):
        request = urllib.request.Request(self.url(path), data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def wait_ready(self) -> bool:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with urllib.request.urlopen(self.url("/v2/health/live"), timeout=1):
                    pass
                rows = self.post("/v2/repository/index", {})[1]
                if rows and all(r.get("state") in ("READY", "UNAVAILABLE") for r in rows):
                    return True
            except OSError:
                pass
            time.sleep(0.2)
        return False

    def metrics_text(self) -> str:
        url = f"http://127.0.0.1:{self.metrics}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def check_discovery(server: Nereid) -> None:
    log = server.log_path.read_text(errors="replace")
    gpus = [line.split('"')[1] for line in log.splitlines() if '"GPU ' in line]
    check("discovery", bool(gpus), gpus or log[-2000:])
    extensions = server.get("/v2")["extensions"]
    check("cuda_shared_memory extension", "cuda_shared_memory" in extensions, extensions)
    rows = server.post("/v2/repository/index", {})[1]
    check("models ready", all(r["state"] == "READY" for r in rows), rows)


def check_metrics(server: Nereid) -> None:
    deadline = time.monotonic() + 10
    text = server.metrics_text()
    while "nv_gpu_utilization{" not in text and time.monotonic() < deadline:
        time.sleep(0.2)
        text = server.metrics_text()
    lines = [line for line in text.splitlines() if line.startswith(("nv_gpu_", "nv_energy"))]
    names = {line.split("{")[0] for line in lines}
    wanted = {"nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes",
              "nv_gpu_power_usage", "nv_gpu_power_limit", "nv_energy_consumption"}
    check("nv_gpu_* metrics", wanted <= names and all('gpu_uuid="GPU-' in line for line in lines), lines)


def infer_json(server: Nereid, model: str, inputs: list[dict], outputs: list[dict] | None = None):
    body = {"inputs": inputs}
    if outputs is not None:
        body["outputs"] = outputs
    return server.post(f"/v2/models/{model}/infer", body)


def check_torch_gpu(server: Nereid) -> None:
    data = [1.0, 2.0, 3.5]
    status, body = infer_json(server, "torch_gpu", [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 3],
                                                     "data": data}])
    if status != 200:
        check("torch on cuda:0 through dlpack", False, body)
        return
    outputs = {o["name"]: o for o in body["outputs"]}
    info = json.loads(outputs["INFO"]["data"][0])
    ok = (outputs["OUTPUT0"]["data"] == [2 * x for x in data] and info["kind"] == "GPU"
          and info["device"] == "cuda:0" and info["is_cpu"] is False and info["zero_copy"] is True)
    check("torch on cuda:0 through dlpack", ok, {"OUTPUT0": outputs["OUTPUT0"]["data"], "INFO": info})


def check_placement(server: Nereid) -> None:
    config = server.get("/v2/models/two_on_gpu0/config")["instance_group"]
    check("two instances on GPU 0 (config)", config[0]["count"] == 2 and config[0]["gpus"] == [0], config)
    seen: list[dict] = []

    def call() -> None:
        status, body = infer_json(server, "two_on_gpu0", [{"name": "IN", "datatype": "INT32", "shape": [1],
                                                           "data": [1]}])
        if status == 200:
            seen.append(json.loads(body["outputs"][0]["data"][0]))

    threads = [threading.Thread(target=call) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    names = sorted({s["model_instance_name"] for s in seen})
    devices = sorted({(s["model_instance_kind"], s["model_instance_device_id"]) for s in seen})
    check("two instances on GPU 0 (served)", names == ["two_on_gpu0_0_0", "two_on_gpu0_0_1"]
          and devices == [("GPU", "0")], {"instances": names, "devices": devices})
    default = server.get("/v2/models/default_placement/config")["instance_group"]
    check("default placement is KIND_GPU on every GPU", default[0]["kind"] == "KIND_GPU", default)


def load_cuda_shared_memory():
    """tritonclient.utils.cuda_shared_memory; tritonclient.utils imports
    ml_dtypes (for BF16 only), which this Python may lack."""
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        shim = types.ModuleType("ml_dtypes")
        shim.bfloat16 = type("bfloat16", (), {})
        sys.modules["ml_dtypes"] = shim
    import tritonclient.utils.cuda_shared_memory as cudashm

    return cudashm


def check_cuda_shared_memory(server: Nereid) -> None:
    try:
        cudashm = load_cuda_shared_memory()
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        check("tritonclient.utils.cuda_shared_memory imports", False, repr(e))
        return
    size = 16 * 4
    region = cudashm.create_shared_memory_region("gpu_in_out", 2 * size, 0)
    try:
        values = np.arange(16, dtype=np.float32)
        cudashm.set_shared_memory_region(region, [values])
        handle = cudashm.get_raw_handle(region)
        status, body = server.post("/v2/cudasharedmemory/region/gpu_in_out/register",
                                   {"raw_handle": {"b64": handle.decode()}, "device_id": 0,
                                    "byte_size": 2 * size})
        check("CUDA shared memory register", status == 200, (status, body))
        listed = server.get("/v2/cudasharedmemory/status")
        check("CUDA shared memory status", listed == [{"name": "gpu_in_out", "device_id": 0,
                                                       "byte_size": 2 * size}], listed)
        place = {"shared_memory_region": "gpu_in_out", "shared_memory_byte_size": size}
        status, body = infer_json(
            server, "identity_x3",
            [{"name": "INPUT0", "datatype": "FP32", "shape": [16], "parameters": place}],
            [{"name": "OUTPUT0", "parameters": {**place, "shared_memory_offset": size}}])
        out = cudashm.get_contents_as_numpy(region, np.float32, [32])[16:]
        check("CUDA shared memory infer (in and out on the device)",
              status == 200 and np.array_equal(out, values * 3), {"status": status, "body": body,
                                                                  "output": out.tolist()})
        status, body = server.post("/v2/cudasharedmemory/region/bad/register",
                                   {"raw_handle": {"b64": handle.decode()}, "device_id": 0,
                                    "byte_size": 1 << 40})
        check("CUDA shared memory too large is refused", status == 400, (status, body))
    finally:
        server.post("/v2/cudasharedmemory/unregister", {})
        cudashm.destroy_shared_memory_region(region)


def main() -> int:
    binary = sys.argv[1]
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp())
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        write_model(repo, "torch_gpu", TORCH_GPU_MODEL, TORCH_GPU_CONFIG)
        write_model(repo, "two_on_gpu0", PLACED_MODEL,
                    PLACED_CONFIG + "instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] } ]\n")
        write_model(repo, "default_placement", PLACED_MODEL, PLACED_CONFIG)
        write_model(repo, "identity_x3", IDENTITY_MODEL, IDENTITY_CONFIG)
        server = Nereid(binary, repo, out / "nereid.log")
        try:
            if not server.wait_ready():
                check("server starts", False, server.log_path.read_text(errors="replace")[-3000:])
                return 1
            for step in (check_discovery, check_metrics, check_torch_gpu, check_placement,
                         check_cuda_shared_memory):
                try:
                    step(server)
                except Exception as e:  # noqa: BLE001 - one check's crash must not hide the others
                    check(step.__name__, False, repr(e))
        finally:
            server.stop()
    print(f"{failures} check(s) failed")
    return failures


if __name__ == "__main__":
    sys.exit(main())
