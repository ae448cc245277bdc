#!/usr/bin/env python3
"""Asks the real Triton 2.51 what its trace extension answers: settings over
HTTP and gRPC (global and per model, updates, clears, wrong types), the
trace files it writes for TIMESTAMPS and TENSORS, and when it writes them.
tests/python/test_trace.py's expectations were checked against this
output (docs/triton-reference.md "Trace settings").

    scripts/setup-triton.sh
    .venv/bin/python tests/triton_ref/probe_trace.py
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

ROOT = Path(__file__).resolve().parents[2]
BASE = "http://127.0.0.1:18200"
GRPC = "127.0.0.1:18201"


def start(tmp: Path, *args: str) -> subprocess.Popen:
    repo = tmp / "repo"
    if not repo.exists():
        shutil.copytree(ROOT / "tests/triton_ref/models/simple", repo / "simple")
        shutil.copytree(ROOT / "tests/triton_ref/models/identity_bytes", repo / "identity_bytes")
    env = dict(os.environ, TRITON_HTTP_PORT="18200", TRITON_GRPC_PORT="18201", TRITON_METRICS_PORT="18202")
    log = open(tmp / "triton.log", "a")
    proc = subprocess.Popen([str(ROOT / "scripts/run-triton.sh"), str(repo), *args], env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            if requests.get(f"{BASE}/v2/health/ready", timeout=1).ok:
                return proc
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    raise SystemExit("triton did not start")


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)


def show(label: str, r: requests.Response) -> None:
    print(f"{label}: {r.status_code} {r.text}")


def simple_infer(n: int = 1) -> None:
    client = httpclient.InferenceServerClient("127.0.0.1:18200")
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    for _ in range(n):
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        client.infer("simple", inputs, request_id="req-7")


def files(tmp: Path) -> None:
    for f in sorted((tmp / "tr").glob("*")):
        text = f.read_text()
        print(f"file {f.name}: {len(text)} chars")
        try:
            print(json.dumps(json.loads(text))[:3000])
        except ValueError as e:
            print(f"  not JSON ({e}): {text[:400]!r}")


def settings_probe(tmp: Path) -> None:
    (tmp / "tr").mkdir()
    proc = start(tmp)
    try:
        show("GET default (no flags)", requests.get(f"{BASE}/v2/trace/setting"))
        show("POST level without file", requests.post(f"{BASE}/v2/trace/setting", json={"trace_level": ["TIMESTAMPS"]}))
        show("POST rate 0", requests.post(f"{BASE}/v2/trace/setting", json={"trace_rate": "0"}))
        show("POST count -5", requests.post(f"{BASE}/v2/trace/setting", json={"trace_count": "-5"}))
        show("POST rate -1", requests.post(f"{BASE}/v2/trace/setting", json={"trace_rate": "-1"}))
        show("POST level list of ints", requests.post(f"{BASE}/v2/trace/setting", json={"trace_level": [1]}))
        show("POST body not object", requests.post(f"{BASE}/v2/trace/setting", data="[1]"))
        show("POST bad json", requests.post(f"{BASE}/v2/trace/setting", data="{"))
        show("POST empty body", requests.post(f"{BASE}/v2/trace/setting", data=""))
        show("POST level OFF and TIMESTAMPS", requests.post(f"{BASE}/v2/trace/setting", json={"trace_level": ["OFF", "TIMESTAMPS"]}))
        show("POST mode", requests.post(f"{BASE}/v2/trace/setting", json={"trace_mode": "opentelemetry"}))
        show("POST log_frequency x", requests.post(f"{BASE}/v2/trace/setting", json={"log_frequency": "x"}))
        show("POST trace_file null", requests.post(f"{BASE}/v2/trace/setting", json={"trace_file": None}))
        show("POST global null", requests.post(f"{BASE}/v2/trace/setting", json={"trace_rate": None}))
        show("GET model version path", requests.get(f"{BASE}/v2/models/simple/versions/1/trace/setting"))
        show("GET unknown model", requests.get(f"{BASE}/v2/models/nope/trace/setting"))
        show("POST unknown model", requests.post(f"{BASE}/v2/models/nope/trace/setting", json={"trace_rate": "2"}))
        g = grpcclient.InferenceServerClient(GRPC)
        print("gRPC get:", g.get_trace_settings(as_json=True))
        print("gRPC model get:", g.get_trace_settings(model_name="simple", as_json=True))
        print("gRPC update:", g.update_trace_settings(settings={"trace_rate": "5", "trace_level": ["OFF"]}, as_json=True))
        print("gRPC model update:", g.update_trace_settings(model_name="simple", settings={"trace_count": "4"}, as_json=True))
        print("gRPC model clear:", g.update_trace_settings(model_name="simple", settings={"trace_count": None}, as_json=True))
        try:
            print("gRPC level TIMESTAMPS w/o file", g.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"]}, as_json=True))
        except Exception as e:  # noqa: BLE001
            print("gRPC level TIMESTAMPS w/o file ->", e)
        for bad in ({"trace_rate": "y"}, {"trace_file": "/tmp/x"}, {"trace_level": ["BOGUS"]}):
            try:
                print("gRPC update", bad, g.update_trace_settings(settings=bad, as_json=True))
            except Exception as e:  # noqa: BLE001
                print("gRPC update", bad, "->", type(e).__name__, e)
        try:
            print("gRPC unknown model", g.get_trace_settings(model_name="nope", as_json=True))
        except Exception as e:  # noqa: BLE001
            print("gRPC unknown model ->", e)
        print("server extensions:", requests.get(f"{BASE}/v2").json())
    finally:
        stop(proc)


def files_probe(tmp: Path) -> None:
    (tmp / "tr").mkdir()
    trace = str(tmp / "tr" / "trace.json")
    proc = start(tmp, "--trace-config", f"triton,file={trace}", "--trace-config", "level=TIMESTAMPS",
                 "--trace-config", "level=TENSORS", "--trace-config", "rate=1", "--trace-config", "count=3")
    try:
        show("GET with flags", requests.get(f"{BASE}/v2/trace/setting"))
        simple_infer(2)
        show("GET after 2", requests.get(f"{BASE}/v2/trace/setting"))
        files(tmp)
        simple_infer(2)
        show("GET after 4", requests.get(f"{BASE}/v2/trace/setting"))
        time.sleep(0.5)
        files(tmp)
        show("POST count 2 log_freq 0", requests.post(f"{BASE}/v2/trace/setting", json={"trace_count": "2", "trace_level": ["TIMESTAMPS"]}))
        # gRPC request
        g = grpcclient.InferenceServerClient(GRPC)
        i = [grpcclient.InferInput("INPUT0", [1, 3], "BYTES")]
        i[0].set_data_from_numpy(np.array([[b"a", b"bc", b"\"q\""]], dtype=object))
        g.infer("identity_bytes", i)
        time.sleep(0.5)
        print("after one gRPC trace, before exit:")
        files(tmp)
        show("POST model simple count 1", requests.post(f"{BASE}/v2/models/simple/trace/setting", json={"trace_count": "1"}))
        show("GET global", requests.get(f"{BASE}/v2/trace/setting"))
    finally:
        stop(proc)
    print("after exit:")
    files(tmp)


def tensors_probe(tmp: Path) -> None:
    (tmp / "tr").mkdir()
    trace = str(tmp / "tr" / "t.json")
    proc = start(tmp, "--trace-config", f"triton,file={trace}", "--trace-config", "level=TENSORS",
                 "--trace-config", "rate=1", "--trace-config", "triton,log-frequency=1")
    try:
        g = grpcclient.InferenceServerClient(GRPC)
        i = [grpcclient.InferInput("INPUT0", [1, 3], "BYTES")]
        i[0].set_data_from_numpy(np.array([[b"a", b"bc", b"\"q\""]], dtype=object))
        g.infer("identity_bytes", i)
        simple_infer(1)
        time.sleep(0.5)
        files(tmp)
    finally:
        stop(proc)


def otel_probe(tmp: Path) -> None:
    proc = start(tmp, "--trace-config", "mode=opentelemetry", "--trace-config", "opentelemetry,url=127.0.0.1:18299/v1/traces",
                 "--trace-config", "rate=1", "--trace-config", "level=TIMESTAMPS")
    try:
        show("otel GET", requests.get(f"{BASE}/v2/trace/setting"))
        show("otel POST rate", requests.post(f"{BASE}/v2/trace/setting", json={"trace_rate": "3"}))
        show("otel POST log_frequency", requests.post(f"{BASE}/v2/trace/setting", json={"log_frequency": "3"}))
        show("otel model GET", requests.get(f"{BASE}/v2/models/simple/trace/setting"))
    finally:
        stop(proc)


def main() -> None:
    which = sys.argv[1:] or ["settings", "files", "tensors", "otel"]
    for name in which:
        print(f"===== {name}")
        tmp = Path(tempfile.mkdtemp())
        globals()[f"{name}_probe"](tmp)


if __name__ == "__main__":
    main()
