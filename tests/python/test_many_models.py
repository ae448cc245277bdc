"""Many models on one server (docs/many-models.md): on-demand model control
loads a model on its first request, once however many requests wait, and
backs off from a failed load; a memory budget evicts the least recently used
models that are not pinned and have no request in flight; memory comes back
after evictions."""

from __future__ import annotations

import concurrent.futures
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import REPO_ROOT, start_server, stop_server
from many_models import expected_row, weights_model

SIMPLE = REPO_ROOT / "model_repository/simple"


def simple_copy(repo: Path, name: str) -> None:
    shutil.copytree(SIMPLE, repo / name)
    config = repo / name / "config.pbtxt"
    config.write_text(config.read_text().replace('"simple"', f'"{name}"'))


def simple_request() -> dict:
    return {"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}]}


def index(server) -> dict[str, dict]:
    rows = requests.post(f"{server.base}/v2/repository/index", timeout=30).json()
    return {r["name"]: r for r in rows}


def metric(server, name: str, labels: str = "") -> float:
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=30).text
    pattern = rf"^{re.escape(name)}{re.escape(labels)} (\S+)$"
    found = re.findall(pattern, text, re.M)
    return float(found[0]) if found else 0.0


def rss(server) -> int:
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def ask_row(server, model: str, index_: int = 0) -> np.ndarray:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("INDEX", [1], "INT64")
    tensor.set_data_from_numpy(np.array([index_], dtype=np.int64))
    return client.infer(model, [tensor]).as_numpy("ROW")


def budget_after(tmp_path: Path, repo: Path, models: list[str], room: int) -> int:
    """A budget of the server's resident memory once `models` are loaded
    (ONNX Runtime set up with them), plus `room` bytes."""
    folder = tmp_path / "probe"
    folder.mkdir()
    probe = start_server(folder, [repo], ["--model-control-mode=on_demand"])
    try:
        for model in models:
            ask_row(probe, model)
        return rss(probe) + room
    finally:
        assert stop_server(probe) == 0, probe.log()


@pytest.fixture
def repo(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    return folder


def test_a_first_request_loads_its_model_once_for_all_who_wait(tmp_path, repo):
    for i in range(3):
        simple_copy(repo, f"m{i}")
    server = start_server(tmp_path, [repo], ["--model-control-mode=on_demand"])
    try:
        assert all("state" not in row for row in index(server).values()), "nothing loads at startup"
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(
                lambda _: requests.post(f"{server.base}/v2/models/m0/infer", json=simple_request(),
                                        timeout=60), range(16)))
        assert [a.status_code for a in answers] == [200] * 16, answers[0].text
        assert metric(server, "nereid_model_loads_total", '{cause="demand"}') == 1
        assert metric(server, "nereid_model_load_wait_seconds_count") >= 1
        rows = index(server)
        assert rows["m0"]["state"] == "READY" and rows["m0"]["memory_bytes"] > 0
        assert "state" not in rows["m1"]
        # gRPC, metadata first as perf_analyzer does: the metadata call loads.
        client = grpcclient.InferenceServerClient(server.grpc_url)
        assert client.get_model_metadata("m1").name == "m1"
        assert index(server)["m1"]["state"] == "READY"
        # A model the repository does not have: Triton's answer, no load.
        for _ in range(50):
            missing = requests.post(f"{server.base}/v2/models/absent/infer", json=simple_request(),
                                    timeout=30)
            assert missing.status_code == 404
            assert missing.json()["error"] == "Request for unknown model: 'absent' is not found"
        assert metric(server, "nereid_model_loads_total", '{cause="demand"}') == 2
        assert "absent" not in server.log()
    finally:
        assert stop_server(server) == 0, server.log()


def test_a_failed_load_answers_its_waiters_and_is_backed_off_from(tmp_path, repo):
    simple_copy(repo, "broken")
    (repo / "broken/1/model.onnx").write_bytes(b"not an onnx model")
    server = start_server(tmp_path, [repo], ["--model-control-mode=on_demand"])
    url = f"{server.base}/v2/models/broken/infer"
    try:
        first = requests.post(url, json=simple_request(), timeout=60)
        assert first.status_code >= 400
        assert "broken" in first.json()["error"] and "again after 1 s" in first.json()["error"], first.text
        again = requests.post(url, json=simple_request(), timeout=60)
        assert "is tried again on a request after" in again.json()["error"], again.text
        assert server.log().count("model version unavailable model=broken") == 1, "no load while backing off"
        shutil.copyfile(SIMPLE / "1/model.onnx", repo / "broken/1/model.onnx")
        time.sleep(1.1)
        assert requests.post(url, json=simple_request(), timeout=60).status_code == 200
    finally:
        assert stop_server(server) == 0, server.log()


def test_the_budget_evicts_the_least_recently_used_and_spares_pinned_models(tmp_path, repo):
    for i, name in enumerate(["a", "b", "c"]):
        weights_model(repo, name, 40, seed=i)
    weights_model(repo, "pinned", 40, seed=10, parameters={"nereid.pinned": "true"})
    weights_model(repo, "huge", 400, seed=11)
    budget = budget_after(tmp_path, repo, ["a", "b"], 30_000_000)  # room for a and b, not c
    server = start_server(tmp_path, [repo], ["--model-control-mode=on_demand",
                                             f"--model-memory-budget={budget}"])
    try:
        for name, seed in (("a", 0), ("b", 1)):
            np.testing.assert_array_equal(ask_row(server, name, 3), expected_row(40, seed, 3))
        ask_row(server, "a")  # a is now more recent than b
        ask_row(server, "c")
        rows = index(server)
        assert rows["b"].get("state") == "UNAVAILABLE", rows
        assert rows["a"]["state"] == "READY" and rows["c"]["state"] == "READY"
        assert metric(server, "nereid_model_evictions_total", '{model="b"}') == 1
        assert rss(server) < budget * 1.1
        ask_row(server, "pinned")
        for name in ("a", "b", "c", "a", "b"):
            ask_row(server, name)
            assert index(server)["pinned"]["state"] == "READY", "a pinned model stays"
        assert rss(server) < budget * 1.1
        too_big = requests.post(f"{server.base}/v2/models/huge/infer", json={"inputs": [
            {"name": "INDEX", "datatype": "INT64", "shape": [1], "data": [0]}]}, timeout=120)
        assert too_big.status_code == 503, too_big.text
        message = too_big.json()["error"]
        assert "model 'huge' needs at least 400" in message and "memory budget of" in message, message
        assert index(server)["b"]["state"] == "READY", "nothing went for a load that cannot fit"
        np.testing.assert_array_equal(ask_row(server, "pinned", 5), expected_row(40, 10, 5))
        assert metric(server, "nereid_memory_budget_bytes", '{place="host"}') == budget
    finally:
        assert stop_server(server) == 0, server.log()


def test_models_loaded_through_the_api_are_pinned_unless_the_operator_says_not(tmp_path, repo):
    for i, name in enumerate(["api", "x", "y"]):
        weights_model(repo, name, 40, seed=i)
    budget = budget_after(tmp_path, repo, ["api", "x"], 20_000_000)
    for pin, kept in (("true", True), ("false", False)):
        folder = tmp_path / f"pin-{pin}"
        folder.mkdir()
        server = start_server(folder, [repo], ["--model-control-mode=on_demand",
                                               f"--model-memory-budget={budget}",
                                               f"--pin-loaded-models={pin}"])
        try:
            assert requests.post(f"{server.base}/v2/repository/models/api/load",
                                 timeout=60).status_code == 200
            ask_row(server, "x")
            ask_row(server, "y")
            assert (index(server)["api"].get("state") == "READY") == kept, index(server)
        finally:
            assert stop_server(server) == 0, server.log()


def test_memory_comes_back_over_200_load_and_evict_cycles(tmp_path, repo):
    """Two 100 MB models and a budget for one: each request loads one and
    evicts the other. The server's resident memory after the last cycle is
    within a small margin of what it was after the first."""
    weights_model(repo, "even", 100, seed=1)
    weights_model(repo, "odd", 100, seed=2)
    budget = budget_after(tmp_path, repo, ["even"], 50_000_000)  # room for one
    server = start_server(tmp_path, [repo], ["--model-control-mode=on_demand",
                                             f"--model-memory-budget={budget}"])
    try:
        samples = []
        for cycle in range(200):
            ask_row(server, "even" if cycle % 2 == 0 else "odd")
            if cycle in (1, 199):
                samples.append(rss(server))
        assert metric(server, "nereid_model_evictions_total", '{model="even"}') >= 99
        print(f"\nRSS after cycle 2: {samples[0] / 1e6:.1f} MB, after 200: {samples[1] / 1e6:.1f} MB")
        assert samples[1] < samples[0] + 10_000_000, samples  # a tenth of the model
    finally:
        assert stop_server(server) == 0, server.log()


def test_a_flood_of_first_requests_for_different_models_loads_them_all(tmp_path, repo):
    names = [f"m{i}" for i in range(24)]
    for name in names:
        simple_copy(repo, name)
    server = start_server(tmp_path, [repo], ["--model-control-mode=on_demand",
                                             "--model-load-limit=2"])
    try:
        with concurrent.futures.ThreadPoolExecutor(24) as pool:
            answers = list(pool.map(
                lambda name: requests.post(f"{server.base}/v2/models/{name}/infer",
                                           json=simple_request(), timeout=120), names))
        assert [a.status_code for a in answers] == [200] * len(names)
        assert metric(server, "nereid_model_loads_total", '{cause="demand"}') == len(names)
        assert metric(server, "nereid_model_loads_in_progress") == 0
    finally:
        assert stop_server(server) == 0, server.log()


def test_a_model_deleted_while_evicted_is_unknown(tmp_path, repo):
    weights_model(repo, "keep", 40, seed=1)
    weights_model(repo, "gone", 40, seed=2)
    budget = budget_after(tmp_path, repo, ["keep"], 20_000_000)  # room for one
    server = start_server(tmp_path, [repo], ["--model-control-mode=on_demand",
                                             f"--model-memory-budget={budget}"])
    try:
        ask_row(server, "gone")
        ask_row(server, "keep")
        assert index(server)["gone"].get("state") == "UNAVAILABLE", "evicted for keep"
        shutil.rmtree(repo / "gone")
        answer = requests.post(f"{server.base}/v2/models/gone/infer", timeout=30, json={"inputs": [
            {"name": "INDEX", "datatype": "INT64", "shape": [1], "data": [0]}]})
        assert answer.status_code == 404, answer.text
        assert "unknown model" in answer.json()["error"], answer.text
        np.testing.assert_array_equal(ask_row(server, "keep", 1), expected_row(40, 1, 1))
    finally:
        assert stop_server(server) == 0, server.log()
