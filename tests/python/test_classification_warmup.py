"""Triton's classification extension (`class_count` on a requested output,
labels from `label_filename`) and model warmup (`model_warmup`), end to end
through tritonclient. The models are Python-backend echoes, so the same
repository runs on real Triton (tests/triton_ref/probe_classification.py
checks the answers agree)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from calls import index
from conftest import start_server, stop_server

ECHO = '''import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUT = IN; says in the log how many requests each execute got and
    whether the first input was all zeros."""

    def execute(self, requests):
        first = pb_utils.get_input_tensor_by_name(requests[0], "IN").as_numpy()
        print(f"echo execute: {len(requests)} requests, zeros={not first.any()}", flush=True)
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
'''

FAILS = '''import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        raise pb_utils.TritonModelException("not warm enough")
'''

LABELS = "cat\ndog\n\nbird\n"


def config(dtype: str, batch: int, extra: str = "", label: bool = True) -> str:
    label_line = ' label_filename: "labels.txt"' if label else ""
    return (
        f'backend: "python"\nmax_batch_size: {batch}\n'
        f'input [ {{ name: "IN" data_type: TYPE_{dtype} dims: [ 5 ] }} ]\n'
        f'output [ {{ name: "OUT" data_type: TYPE_{dtype} dims: [ 5 ]{label_line} }} ]\n{extra}'
    )


def model(repo: Path, name: str, config_text: str, source: str = ECHO, labels: str | None = LABELS) -> Path:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(source)
    (repo / name / "config.pbtxt").write_text(config_text)
    if labels is not None:
        (repo / name / "labels.txt").write_text(labels)
    return repo / name


def sample(name: str, batch: int, data: str, count: int = 0) -> str:
    return (
        f'{{ name: "{name}" batch_size: {batch} count: {count} '
        f'inputs {{ key: "IN" value: {{ data_type: TYPE_FP32 dims: [ 5 ] {data} }} }} }}'
    )


def warmup(*samples: str) -> str:
    return f"model_warmup [ {', '.join(samples)} ]\n"


def build_repository(repo: Path) -> None:
    """Every model of these tests (also served on Triton by
    tests/triton_ref/probe_classification.py)."""
    model(repo, "scores", config("FP32", 0))
    model(repo, "scores_batched", config("INT32", 4))
    model(repo, "flags", config("BOOL", 0))
    model(repo, "no_labels", config("FP32", 0, label=False), labels=None)
    model(repo, "missing_labels", config("FP32", 0), labels=None)
    warm = model(repo, "warm", config("FP32", 4, warmup(
        sample("zeros", 3, "zero_data: true", count=2),
        sample("file", 1, 'input_data_file: "in.bin"'))))
    (warm / "warmup").mkdir()
    (warm / "warmup" / "in.bin").write_bytes(np.arange(5, dtype=np.float32).tobytes() + b"extra")
    model(repo, "warm_random", config("FP32", 0, warmup(sample("random", 1, "random_data: true"))))
    model(repo, "warm_short_file", config("FP32", 0, warmup(sample("short", 1, 'input_data_file: "short.bin"'))))
    (repo / "warm_short_file" / "warmup").mkdir()
    (repo / "warm_short_file" / "warmup" / "short.bin").write_bytes(b"\0" * 8)
    model(repo, "warm_missing_file", config("FP32", 0, warmup(sample("gone", 1, 'input_data_file: "gone.bin"'))))
    model(repo, "warm_escapes", config("FP32", 0, warmup(sample("up", 1, 'input_data_file: "../labels.txt"'))))
    model(repo, "warm_fails", config("FP32", 0, warmup(sample("boom", 1, "zero_data: true"))), source=FAILS)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("classify")
    repo = tmp / "repo"
    build_repository(repo)
    server = start_server(tmp, [repo], ["--exit-on-error=false", "--strict-readiness=false",
                                        f"--backend-config=python,python-path={sys.executable}"])
    yield server
    stop_server(server)


def classify_http(srv, name, data, count, binary=True):
    client = httpclient.InferenceServerClient(srv.http_url)
    tensor = httpclient.InferInput("IN", list(data.shape), np_to_wire(data))
    tensor.set_data_from_numpy(data, binary_data=binary)
    out = httpclient.InferRequestedOutput("OUT", binary_data=binary, class_count=count)
    try:
        return client.infer(name, [tensor], outputs=[out]).as_numpy("OUT")
    finally:
        client.close()


def classify_grpc(srv, name, data, count):
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    tensor = grpcclient.InferInput("IN", list(data.shape), np_to_wire(data))
    tensor.set_data_from_numpy(data)
    out = grpcclient.InferRequestedOutput("OUT", class_count=count)
    try:
        return client.infer(name, [tensor], outputs=[out]).as_numpy("OUT")
    finally:
        client.close()


def np_to_wire(data):
    return {np.float32: "FP32", np.int32: "INT32", np.bool_: "BOOL"}[data.dtype.type]


SCORES = np.array([0.5, 2.25, -1.0, 7.0, 2.25], dtype=np.float32)


@pytest.mark.parametrize("how", ["http-binary", "http-json", "grpc"])
def test_top_classes_with_labels(srv, how):
    if how == "grpc":
        got = classify_grpc(srv, "scores", SCORES, 3)
    else:
        got = classify_http(srv, "scores", SCORES, 3, binary=how == "http-binary")
    assert got.shape == (3,)
    # Index 2's label line is empty and index 4 has none: no label for them.
    assert [g.decode() if isinstance(g, bytes) else g for g in got] == [
        "7.000000:3:bird", "2.250000:1:dog", "2.250000:4"]


def test_each_batch_entry_is_classified(srv):
    data = np.array([[3, 9, 1, 0, 4], [-5, -1, -9, -2, -7]], dtype=np.int32)
    got = classify_grpc(srv, "scores_batched", data, 2)
    assert got.shape == (2, 2)
    assert got.tolist() == [[b"9:1:dog", b"4:4"], [b"-1:1:dog", b"-2:3:bird"]]


def test_a_count_beyond_the_output_gives_every_class(srv):
    got = classify_http(srv, "no_labels", SCORES, 50)
    assert got.tolist() == [b"7.000000:3", b"2.250000:1", b"2.250000:4", b"0.500000:0", b"-1.000000:2"]


def test_classification_of_an_unordered_type_is_refused(srv):
    with pytest.raises(InferenceServerException) as e:
        classify_http(srv, "flags", np.array([True, False, True, True, False]), 2)
    assert "class result not available for output due to unsupported type 'BOOL'" in e.value.message()
    assert classify_http(srv, "scores", SCORES, 1).tolist() == [b"7.000000:3:bird"]


def test_a_bad_class_count_is_refused(srv):
    body = {"inputs": [{"name": "IN", "shape": [5], "datatype": "FP32", "data": SCORES.tolist()}],
            "outputs": [{"name": "OUT", "parameters": {"classification": "three"}}]}
    r = requests.post(f"{srv.base}/v2/models/scores/infer", json=body)
    assert r.status_code == 400, r.text
    assert "classification" in r.json()["error"]


def test_a_missing_label_file_fails_the_load(srv):
    row = index(srv)["missing_labels"]
    assert row["state"] == "UNAVAILABLE" and "labels.txt" in row["reason"], row


def test_warmup_runs_before_ready_and_counts_in_the_statistics(srv):
    log = srv.log()
    # Sample "zeros": 3 requests in one execute, twice; sample "file": one.
    assert log.count("echo execute: 3 requests, zeros=True") == 2, log
    assert "echo execute: 1 requests, zeros=False" in log, log
    # As Triton counts them: 7 inferences in 3 executions.
    stats = requests.get(f"{srv.base}/v2/models/warm/stats").json()["model_stats"][0]
    assert (stats["inference_count"], stats["execution_count"]) == (7, 3), stats
    assert index(srv)["warm_random"]["state"] == "READY"


@pytest.mark.parametrize("name, reason", [
    ("warm_short_file", "warmup setting expects 20 bytes, but the data provided from short.bin only has 8 bytes"),
    ("warm_missing_file", "gone.bin"),
    ("warm_escapes", "must name a file inside the model's 'warmup' folder"),
    ("warm_fails", "failed to run warmup sample 'boom'"),
])
def test_a_failing_warmup_makes_the_model_unavailable(srv, name, reason):
    row = index(srv)[name]
    assert row["state"] == "UNAVAILABLE" and reason in row["reason"], row
