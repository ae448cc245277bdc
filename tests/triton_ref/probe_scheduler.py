#!/usr/bin/env python3
"""Runs the dynamic batcher checks of tests/python/scheduler_checks.py
against the real Triton 2.51 (Python backend models with the same configs
as the Nereid tests in tests/python/test_scheduler_parity.py) and prints
what it answered. The findings are in docs/triton-reference.md ("Dynamic
batcher").

    scripts/setup-triton.sh
    .tools/triton-venv/bin/python tests/triton_ref/probe_scheduler.py
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

from scheduler_checks import (  # noqa: E402
    batching_configs,
    model_head,
    preferred_sizes_go_at_once,
    rejection,
    waves_go_as_one_batch,
)

PORTS = [int(os.environ.get(k, d)) for k, d in
         (("TRITON_HTTP_PORT", 18200), ("TRITON_GRPC_PORT", 18201), ("TRITON_METRICS_PORT", 18202))]
URL = f"127.0.0.1:{PORTS[0]}"

HEAD = model_head('backend: "python"')

MODEL_PY = '''
import os, sys
for _p in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
    if _p and _p not in sys.path:
        sys.path.insert(0, _p)
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT").as_numpy()
            y = x[:, :16].astype(np.float32)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", y)]))
        return out
'''


def main():
    repo = tempfile.mkdtemp(prefix="triton-sched-")
    for name, config in batching_configs(HEAD).items():
        os.makedirs(os.path.join(repo, name, "1"))
        with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
            f.write(config)
        with open(os.path.join(repo, name, "1", "model.py"), "w") as f:
            f.write(MODEL_PY)
    env = dict(os.environ, TRITON_HTTP_PORT=str(PORTS[0]), TRITON_GRPC_PORT=str(PORTS[1]),
               TRITON_METRICS_PORT=str(PORTS[2]))
    log = open(os.path.join(repo, "..", "triton-sched.log"), "w+")
    proc = subprocess.Popen([os.path.join(ROOT, "scripts/run-triton.sh"), repo],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if requests.get(f"http://{URL}/v2/health/ready", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        results = {}
        started = time.monotonic()
        results["preferred_batch_sizes"] = preferred_sizes_go_at_once(URL)
        results["preferred_seconds"] = round(time.monotonic() - started, 2)
        started = time.monotonic()
        results["wave_batch_sizes"] = waves_go_as_one_batch(URL)
        results["wave_seconds"] = round(time.monotonic() - started, 2)
        results["short_default_long_request_timeout"] = rejection(URL, "short_default_timeout", 10_000_000)
        results["long_default_1us_request_timeout"] = rejection(URL, "long_default_timeout", 1)
        results["no_default_1us_request_timeout"] = rejection(URL, "no_default_timeout", 1)
        results["long_default_10s_request_timeout"] = rejection(URL, "long_default_timeout", 10_000_000)
        print(json.dumps(results, indent=2))
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
