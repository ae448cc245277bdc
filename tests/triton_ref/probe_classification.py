#!/usr/bin/env python3
"""Serves tests/python/test_classification_warmup.py's repository on the real
Triton 2.51 and prints what it answers to the same classification requests,
each model's state and reason, and the warmup lines of its log; the test's
expectations were checked against this output (docs/triton-reference.md).

    scripts/setup-triton.sh
    .venv/bin/python tests/triton_ref/probe_classification.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/python"))

import test_classification_warmup as t  # noqa: E402

PRELUDE = '''import os as _os, sys as _sys
for _p in reversed(_os.environ.get("PYTHONPATH", "").split(_os.pathsep)):
    if _p and _p not in _sys.path:
        _sys.path.insert(0, _p)
'''


class Srv:
    http_url = "127.0.0.1:18100"
    grpc_url = "127.0.0.1:18101"
    base = "http://127.0.0.1:18100"


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    repo = tmp / "repo"
    t.build_repository(repo)
    for model_py in repo.glob("*/1/model.py"):
        model_py.write_text(PRELUDE + model_py.read_text())
    env = dict(os.environ, TRITON_HTTP_PORT="18100", TRITON_GRPC_PORT="18101", TRITON_METRICS_PORT="18102")
    log = open(tmp / "triton.log", "w")
    proc = subprocess.Popen([str(ROOT / "scripts/run-triton.sh"), str(repo), "--exit-on-error=false",
                             "--strict-readiness=false", "--log-verbose=1"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                if requests.get(f"{Srv.base}/v2/health/live", timeout=1).ok:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.1)
        time.sleep(5)
        srv = Srv()
        calls = {
            "http-binary": lambda: t.classify_http(srv, "scores", t.SCORES, 3),
            "http-json": lambda: t.classify_http(srv, "scores", t.SCORES, 3, binary=False),
            "grpc": lambda: t.classify_grpc(srv, "scores", t.SCORES, 3),
            "batched": lambda: t.classify_grpc(srv, "scores_batched", np.array(
                [[3, 9, 1, 0, 4], [-5, -1, -9, -2, -7]], dtype=np.int32), 2),
            "beyond": lambda: t.classify_http(srv, "no_labels", t.SCORES, 50),
            "bool": lambda: t.classify_http(srv, "flags", np.array([True, False, True, True, False]), 2),
        }
        for name, call in calls.items():
            try:
                print(name, call().tolist())
            except Exception as e:  # noqa: BLE001 - printing what Triton says
                print(name, "ERROR", e)
        body = {"inputs": [{"name": "IN", "shape": [5], "datatype": "FP32", "data": t.SCORES.tolist()}],
                "outputs": [{"name": "OUT", "parameters": {"classification": "three"}}]}
        r = requests.post(f"{Srv.base}/v2/models/scores/infer", json=body)
        print("bad count", r.status_code, r.text)
        for row in requests.post(f"{Srv.base}/v2/repository/index").json():
            print("index", row)
        stats = requests.get(f"{Srv.base}/v2/models/warm/stats").json()
        print("warm stats", stats["model_stats"][0]["inference_count"], stats["model_stats"][0]["execution_count"])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    print("".join(line for line in open(tmp / "triton.log") if "echo execute" in line or "warmup" in line.lower()))


if __name__ == "__main__":
    main()
