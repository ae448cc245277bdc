"""The response cache (`--cache-config local,size=N`, `response_cache {
enable: true }`): a repeated request is answered without running the
model, the statistics count hits and misses as Triton does, and a reload
drops the model's answers."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from calls import infer, model_stats
from conftest import REPO_ROOT, START_S, start_server, stop_server

COUNTER = '''import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUT = IN + the number of executions so far: a cached answer shows
    the count of the execution that made it."""

    def initialize(self, args):
        self.executions = 0

    def execute(self, requests):
        self.executions += 1
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + np.float32(self.executions))])
            for r in requests]
'''


def config(cache: bool) -> str:
    return ('backend: "python"\nmax_batch_size: 0\n'
            'input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
            'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
            + ("response_cache { enable: true }\n" if cache else ""))


@pytest.fixture
def srv(tmp_path):
    repo = tmp_path / "repo"
    for name, cache in [("cached", True), ("uncached", False)]:
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(COUNTER)
        (repo / name / "config.pbtxt").write_text(config(cache))
    server = start_server(tmp_path, [repo], [
        "--cache-config=local,size=1048576", "--model-control-mode=explicit", "--load-model=*",
        f"--backend-config=python,python-path={sys.executable}"])
    yield server
    assert stop_server(server) == 0, server.log()


def call(srv, protocol, model, values):
    x = np.array(values, dtype=np.float32)
    return infer(srv, protocol, model, [("IN", x, "FP32")]).outputs["OUT"].tolist()


def counts(srv, model):
    s = model_stats(srv, model)
    i = s["inference_stats"]
    return {"hit": int(i["cache_hit"]["count"]), "miss": int(i["cache_miss"]["count"]),
            "success": int(i["success"]["count"]), "executions": int(s["execution_count"]),
            "inferences": int(s["inference_count"])}


def test_a_repeated_request_is_answered_from_the_cache_over_both_protocols(srv):
    assert call(srv, "http-binary", "cached", [1, 2]) == [2, 3]
    assert call(srv, "grpc", "cached", [1, 2]) == [2, 3], "the first answer, not a second execution"
    assert call(srv, "http-json", "cached", [1, 2]) == [2, 3]
    assert call(srv, "grpc", "cached", [1, 3]) == [3, 5], "other data is a miss"
    assert counts(srv, "cached") == {"hit": 2, "miss": 2, "success": 4, "executions": 2, "inferences": 2}
    stats = model_stats(srv, "cached")["inference_stats"]
    assert int(stats["cache_hit"]["ns"]) > 0 and int(stats["cache_miss"]["ns"]) > 0
    families = {f.name: f for f in text_string_to_metric_families(
        requests.get(f"http://127.0.0.1:{srv.metrics_port}/metrics").text)}
    hits = {s.labels["model"]: s.value for s in families["nv_cache_num_hits_per_model"].samples}
    misses = {s.labels["model"]: s.value for s in families["nv_cache_num_misses_per_model"].samples}
    assert hits == {"cached": 2} and misses == {"cached": 2}, (hits, misses)
    assert "nv_cache_hit_duration_per_model" in families and "nv_cache_miss_duration_per_model" in families
    assert families["nv_cache_num_entries"].samples[0].value == 2
    assert 0 < families["nv_cache_util"].samples[0].value < 1


def test_a_model_without_response_cache_always_runs(srv):
    assert call(srv, "grpc", "uncached", [1]) == [2]
    assert call(srv, "grpc", "uncached", [1]) == [3]
    assert counts(srv, "uncached") == {"hit": 0, "miss": 0, "success": 2, "executions": 2, "inferences": 2}


def test_a_reload_drops_the_models_answers(srv):
    assert call(srv, "grpc", "cached", [5]) == [6]
    assert call(srv, "grpc", "cached", [5]) == [6]
    config = json.dumps({
        "backend": "python", "max_batch_size": 0, "response_cache": {"enable": True},
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [-1]}]})
    r = requests.post(f"{srv.base}/v2/repository/models/cached/load", json={"parameters": {"config": config}})
    assert r.status_code == 200, r.text
    assert call(srv, "grpc", "cached", [5]) == [6], "the reloaded model ran again (its first execution)"
    assert counts(srv, "cached")["miss"] == 1


@pytest.mark.parametrize("flag, message", [
    ("--cache-config=local,size=lots", "size must be a number of bytes"),
    ("--cache-config=redis,host=localhost", "Must at a minimum specify 'host' and 'port'"),
    ("--cache-config=memcached,host=localhost", "not 'memcached'"),
    ("--cache-config=local", "expected <cache>,<key>=<value>"),
])
def test_a_cache_config_that_cannot_be_parsed_stops_the_server_with_the_reason(flag, message):
    binary = __import__("os").environ.get("NEREID_BIN", str(REPO_ROOT / "target/debug/nereid"))
    run = subprocess.run([binary, "--model-repository", str(REPO_ROOT / "model_repository"), flag],
                         capture_output=True, text=True, timeout=START_S)
    assert run.returncode != 0 and message in run.stderr, run.stderr
