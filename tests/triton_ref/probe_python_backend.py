#!/usr/bin/env python3
"""Serves the same Python-backend models (`model.py` files of the worker's
tests, plus a BLS caller) on the real Triton 2.51 and on Nereid, sends both
the same requests through tritonclient and prints where the answers differ.

    scripts/setup-triton.sh && make build
    .venv/bin/python tests/triton_ref/probe_python_backend.py

Each model.py starts with a few lines that put $PYTHONPATH on sys.path:
Triton's stub runs Python isolated, and scripts/run-triton.sh passes the
venv's site-packages (numpy) that way. On Nereid the lines do nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "crates/nereid-backend-python/python/tests/models"

PRELUDE = '''import os as _os, sys as _sys
for _p in reversed(_os.environ.get("PYTHONPATH", "").split(_os.pathsep)):
    if _p and _p not in _sys.path:
        _sys.path.insert(0, _p)
'''

CALLER = '''import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            target = pb_utils.get_input_tensor_by_name(request, "MODEL").as_numpy()[0].decode()
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            inputs = [pb_utils.Tensor("INPUT0", x), pb_utils.Tensor("INPUT1", x)]
            answer = pb_utils.InferenceRequest(
                model_name=target, requested_output_names=["OUTPUT0"], inputs=inputs).exec()
            if answer.has_error():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(answer.error().message())))
                continue
            out = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", out)]))
        return responses
'''

ADD_SUB = """backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
DOUBLE = """backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""
CALLER_CONFIG = """backend: "python"
max_batch_size: 0
input [ { name: "MODEL" data_type: TYPE_STRING dims: [ 1 ] }, { name: "X" data_type: TYPE_FP32 dims: [ 1, 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1, 4 ] } ]
"""


def write(repo: Path, name: str, source: str, config: str | None) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(PRELUDE + source)
    if config is not None:
        (repo / name / "config.pbtxt").write_text(config)


def repository() -> Path:
    repo = Path(tempfile.mkdtemp(prefix="pyprobe-"))
    write(repo, "add_sub", (MODELS / "add_sub/1/model.py").read_text(), ADD_SUB)
    write(repo, "error_response", (MODELS / "error_response/1/model.py").read_text(), DOUBLE)
    write(repo, "auto_complete", (MODELS / "auto_complete/1/model.py").read_text(), None)
    write(repo, "import_error", (MODELS / "import_error/1/model.py").read_text(), DOUBLE)
    write(repo, "caller", CALLER, CALLER_CONFIG)
    return repo


def start(server: str, repo: Path, port: int) -> subprocess.Popen:
    ports = [str(port), str(port + 1), str(port + 2)]
    log = open(repo.parent / f"{repo.name}-{server}.log", "w")
    if server == "triton":
        env = dict(os.environ, TRITON_HTTP_PORT=ports[0], TRITON_GRPC_PORT=ports[1], TRITON_METRICS_PORT=ports[2])
        cmd = [str(ROOT / "scripts/run-triton.sh"), str(repo), "--exit-on-error=false", "--strict-readiness=false"]
    else:
        env = dict(os.environ)
        cmd = [str(ROOT / "target/debug/nereid"), "--model-repository", str(repo), "--http-port", ports[0],
               "--grpc-port", ports[1], "--metrics-port", ports[2], "--exit-on-error=false",
               "--strict-readiness=false", f"--backend-config=python,python-path={ROOT / '.venv/bin/python'}"]
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1).status_code == 200:
                time.sleep(1)
                return process
        except requests.ConnectionError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"{server} did not start; see {log.name}")


def call(client, model: str, inputs: list[tuple[str, np.ndarray, str]]) -> dict:
    tensors = []
    for name, array, datatype in inputs:
        t = httpclient.InferInput(name, list(array.shape), datatype)
        t.set_data_from_numpy(array)
        tensors.append(t)
    try:
        result = client.infer(model, tensors)
    except InferenceServerException as e:
        return {"error": e.message(), "status": str(e.status())}
    response = result.get_response()
    return {o["name"]: result.as_numpy(o["name"]).tolist() for o in response["outputs"]}


def probe(port: int) -> dict:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    answers = {
        "add_sub": call(client, "add_sub", [("INPUT0", a, "FP32"), ("INPUT1", np.ones_like(a), "FP32")]),
        "error_response ok": call(client, "error_response", [("IN", np.ones((1, 3), np.float32), "FP32")]),
        "error_response error": call(client, "error_response", [("IN", -np.ones((1, 3), np.float32), "FP32")]),
        "bls add_sub": call(client, "caller", [("MODEL", np.array([b"add_sub"], dtype=np.object_), "BYTES"),
                                               ("X", a[:1], "FP32")]),
        "bls missing": call(client, "caller", [("MODEL", np.array([b"nope"], dtype=np.object_), "BYTES"),
                                               ("X", a[:1], "FP32")]),
    }
    config = requests.get(f"http://127.0.0.1:{port}/v2/models/auto_complete/config").json()
    answers["auto_complete config"] = {k: config.get(k) for k in ("max_batch_size", "input", "output", "dynamic_batching")}
    rows = requests.post(f"http://127.0.0.1:{port}/v2/repository/index", json={}).json()
    answers["import_error state"] = [(r["state"], r.get("reason", "")) for r in rows if r["name"] == "import_error"]
    return answers


def main() -> None:
    results = {}
    for i, server in enumerate(("triton", "nereid")):
        repo = repository()
        process = start(server, repo, 18300 + 10 * i)
        try:
            results[server] = probe(18300 + 10 * i)
        finally:
            process.terminate()
            process.wait(timeout=60)
            shutil.rmtree(repo, ignore_errors=True)
    print(json.dumps(results, indent=1, default=str))
    for key in results["triton"]:
        same = results["triton"][key] == results["nereid"][key]
        print(f"{'same' if same else 'DIFFERS'}: {key}", file=sys.stderr)


if __name__ == "__main__":
    main()
