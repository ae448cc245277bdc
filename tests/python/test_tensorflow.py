"""TensorFlow SavedModels (Triton's `tensorflow_savedmodel`) through
tritonclient over HTTP and gRPC.

The SavedModels are written at test time by TensorFlow's own Python API
(tests/python/make_savedmodels.py, on the venv
scripts/setup-tensorflow-python.sh makes), which also records TensorFlow's
answers to fixed inputs; every answer here is compared with those. The
server finds TensorFlow's C API where scripts/setup-tensorflow.sh put it.
Models have no config.pbtxt unless a test writes one: they are autofilled
from their signatures (`--strict-model-config=false`)."""

from __future__ import annotations

import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests

from calls import PROTOCOLS, TIMEOUT_S, index, infer, model_stats, ready
from conftest import REPO_ROOT, start_server, stop_server, wait_until


def setup(script: str) -> str:
    return subprocess.run([str(REPO_ROOT / "scripts" / script)], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture(scope="module")
def library_dir() -> str:
    return setup("setup-tensorflow.sh")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The SavedModels and TensorFlow's answers: (repository, answers)."""
    python = setup("setup-tensorflow-python.sh")
    tmp = tmp_path_factory.mktemp("savedmodels")
    repo, answers = tmp / "repo", tmp / "answers.npz"
    subprocess.run([python, str(Path(__file__).with_name("make_savedmodels.py")), str(repo), str(answers)],
                   check=True, capture_output=True)
    add_configured_models(repo)
    return repo, dict(np.load(answers, allow_pickle=True))


def add_configured_models(repo: Path) -> None:
    """Copies of the dense model with configs that ask for batching, the
    response cache and instance counts, an ensemble over two signatures,
    and version labels on the TF Serving layout."""
    for name, config in {
        "tf_dense_batched": 'max_batch_size: 8\n'
                            'dynamic_batching { max_queue_delay_microseconds: 200000 }\n'
                            'instance_group [ { count: 1 kind: KIND_CPU } ]\n',
        # The thread parameters go into the session's ConfigProto, which
        # TensorFlow parses: a wrong encoding would fail the load.
        "tf_dense_cached": 'max_batch_size: 4\nresponse_cache { enable: true }\n'
                           'instance_group [ { count: 3 kind: KIND_CPU } ]\n'
                           'parameters { key: "TF_NUM_INTRA_THREADS" value: { string_value: "1" } }\n'
                           'parameters { key: "TF_NUM_INTER_THREADS" value: { string_value: "1" } }\n'
                           'parameters { key: "TF_USE_PER_SESSION_THREADS" value: { string_value: "true" } }\n',
        "tf_wrong_tag": 'parameters { key: "TF_GRAPH_TAG" value: { string_value: "gpu" } }\n',
    }.items():
        shutil.copytree(repo / "tf_dense", repo / name)
        (repo / name / "config.pbtxt").write_text('platform: "tensorflow_savedmodel"\n' + config)
    (repo / "tf_pipeline/1").mkdir(parents=True)
    (repo / "tf_pipeline/config.pbtxt").write_text("""
name: "tf_pipeline"
platform: "ensemble"
max_batch_size: 4
input [ { name: "A" data_type: TYPE_INT32 dims: [ 2 ] }, { name: "B" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 2 ] } ]
ensemble_scheduling { step [
  { model_name: "tf_two_signatures" model_version: -1
    input_map { key: "a" value: "A" } input_map { key: "b" value: "B" }
    output_map { key: "sum" value: "S" } },
  { model_name: "tf_multiply" model_version: -1
    input_map { key: "a" value: "S" } input_map { key: "b" value: "B" }
    output_map { key: "product" value: "OUT" } }
] }
""")
    (repo / "tf_serving/traffic.json").write_text(json.dumps({"labels": {"stable": 1, "canary": 2}}))


@pytest.fixture(scope="module")
def srv(made, library_dir, tmp_path_factory):
    repo, _ = made
    server = start_server(tmp_path_factory.mktemp("tf"), [REPO_ROOT / "model_repository", repo], [
        "--strict-model-config=false", f"--tensorflow-library-dir={library_dir}",
        "--model-control-mode=poll", "--repository-poll-secs=1",
        "--cache-config=local,size=1048576",
        # tf_wrong_tag is meant to fail; the rest must serve regardless.
        "--exit-on-error=false", "--strict-readiness=false",
    ])
    yield server
    assert stop_server(server) == 0, server.log()


def check(got, answers: dict, model: str, rtol=1e-5):
    for key, expected in answers.items():
        prefix = f"{model}/out/"
        if key.startswith(prefix):
            name = key[len(prefix):]
            if expected.dtype == object:
                assert got.outputs[name].tolist() == expected.tolist(), name
            else:
                np.testing.assert_allclose(got.outputs[name], expected, rtol=rtol, atol=1e-6)


def inputs(answers: dict, model: str, datatypes: dict[str, str]):
    prefix = f"{model}/in/"
    return [(k[len(prefix):], v, datatypes[k[len(prefix):]]) for k, v in answers.items() if k.startswith(prefix)]


# --- answers against TensorFlow's own ----------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model,datatypes", [
    ("tf_dense", {"x": "FP32"}),
    ("tf_two_signatures", {"a": "INT32", "b": "INT32"}),
    ("tf_multiply", {"a": "INT32", "b": "INT32"}),
    ("tf_strings", {"text": "BYTES"}),
    ("tf_keras", {"features": "FP32"}),
    ("tf_serving", {"x": "FP32"}),
])
def test_answers_are_tensorflows(srv, made, protocol, model, datatypes):
    _, answers = made
    got = infer(srv, protocol, model, inputs(answers, model, datatypes))
    check(got, answers, model)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_rank_one_signature_is_answered_with_the_configs_dims(srv, made, protocol):
    """Autofill gives a `[None]` tensor `dims: [1]` and an empty reshape;
    requests send `[N, 1]`, and answers come back `[N, 1]`, as Triton
    reports an output with a reshape by its config dims."""
    _, answers = made
    text = answers["tf_words/in/text"].reshape(-1, 1)
    got = infer(srv, protocol, "tf_words", [("text", text, "BYTES")])
    assert got.outputs["upper"].tolist() == answers["tf_words/out/upper"].reshape(-1, 1).tolist()


def test_metadata_names_the_signature_keys_and_autofill_batches(srv):
    meta = requests.get(f"{srv.base}/v2/models/tf_dense").json()
    assert meta["platform"] == "tensorflow_savedmodel"
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]
    assert meta["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}]
    config = requests.get(f"{srv.base}/v2/models/tf_dense/config").json()
    assert (config["backend"], config["default_model_filename"]) == ("tensorflow", "model.savedmodel")
    # Triton's autofill: default-max-batch-size 4, and dynamic batching on.
    assert config["max_batch_size"] == 4 and "dynamic_batching" in config
    strings = requests.get(f"{srv.base}/v2/models/tf_strings").json()
    assert {o["name"]: o["datatype"] for o in strings["outputs"]} == {"length": "INT32", "upper": "BYTES"}


def test_the_signature_the_config_names_is_served(srv):
    meta = requests.get(f"{srv.base}/v2/models/tf_multiply").json()
    assert [o["name"] for o in meta["outputs"]] == ["product"]
    meta = requests.get(f"{srv.base}/v2/models/tf_two_signatures").json()
    assert [o["name"] for o in meta["outputs"]] == ["sum"]


def test_tf_serving_layout_serves_the_latest_version(srv):
    versions = requests.get(f"{srv.base}/v2/models/tf_serving").json()["versions"]
    assert "2" in versions
    config = requests.get(f"{srv.base}/v2/models/tf_serving/config").json()
    assert config["platform"] == "tensorflow_savedmodel"


# --- what the server does around the backend ------------------------------

def test_concurrent_requests_are_batched(srv, made):
    _, answers = made
    before = model_stats(srv, "tf_dense_batched")
    x = answers["tf_dense/in/x"]

    def one(i):
        return infer(srv, "grpc", "tf_dense_batched", [("x", x[i % 3:i % 3 + 1], "FP32")])

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(8)))
    for i, got in enumerate(results):
        np.testing.assert_allclose(got.outputs["y"], answers["tf_dense/out/y"][i % 3:i % 3 + 1], rtol=1e-5)
    after = model_stats(srv, "tf_dense_batched")
    inferences = int(after["inference_count"]) - int(before["inference_count"])
    executions = int(after["execution_count"]) - int(before["execution_count"])
    assert inferences == 8 and executions < 8, (inferences, executions)


def test_the_response_cache_answers_a_repeat_and_instances_are_counted(srv, made):
    _, answers = made
    x = answers["tf_dense/in/x"]
    for _ in range(2):
        got = infer(srv, "http-binary", "tf_dense_cached", [("x", x, "FP32")])
        np.testing.assert_allclose(got.outputs["y"], answers["tf_dense/out/y"], rtol=1e-5)
    stats = model_stats(srv, "tf_dense_cached")["inference_stats"]
    assert int(stats["cache_hit"]["count"]) >= 1
    config = requests.get(f"{srv.base}/v2/models/tf_dense_cached/config").json()
    assert config["instance_group"][0]["count"] == 3


@pytest.mark.parametrize("protocol", ["http-json", "grpc"])
def test_an_ensemble_chains_two_savedmodels(srv, protocol):
    a = np.array([[1, 2], [3, 4]], np.int32)
    b = np.array([[5, 6], [7, 8]], np.int32)
    got = infer(srv, protocol, "tf_pipeline", [("A", a, "INT32"), ("B", b, "INT32")])
    np.testing.assert_array_equal(got.outputs["OUT"], (a + b) * b)


def test_version_labels_name_tf_serving_versions(srv, made):
    _, answers = made
    x = answers["tf_dense/in/x"]
    v1 = infer_version(srv, "tf_serving", "stable", x)
    v2 = infer_version(srv, "tf_serving", "canary", x)
    np.testing.assert_allclose(v1, answers["tf_dense/out/y"], rtol=1e-5)
    np.testing.assert_allclose(v2, answers["tf_serving/out/y"], rtol=1e-5)


def infer_version(server, model: str, version: str, x: np.ndarray) -> np.ndarray:
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape), "data": x.ravel().tolist()}]}
    r = requests.post(f"{server.base}/v2/models/{model}/versions/{version}/infer", json=body, timeout=TIMEOUT_S)
    assert r.status_code == 200, r.text
    out = r.json()["outputs"][0]
    return np.array(out["data"], np.float32).reshape(out["shape"])


def test_a_new_version_folder_is_picked_up_and_served(srv, made, tmp_path):
    repo, answers = made
    # Folders are copied beside the repository and moved in whole, as a
    # deployment does, so a poll never sees half a SavedModel.
    staged = tmp_path / "tf_reload"
    shutil.copytree(repo / "tf_serving/1", staged / "1")
    staged.rename(repo / "tf_reload")
    wait_until(lambda: ready(srv, "tf_reload"), "tf_reload version 1")
    x = answers["tf_dense/in/x"]
    np.testing.assert_allclose(infer_version(srv, "tf_reload", "1", x), answers["tf_dense/out/y"], rtol=1e-5)
    shutil.copytree(repo / "tf_serving/2", tmp_path / "2")
    (tmp_path / "2").rename(repo / "tf_reload/2")
    wait_until(lambda: requests.get(f"{srv.base}/v2/models/tf_reload/versions/2/ready").status_code == 200,
               "tf_reload version 2")
    got = infer(srv, "http-json", "tf_reload", [("x", x, "FP32")])
    np.testing.assert_allclose(got.outputs["y"], answers["tf_serving/out/y"], rtol=1e-5)


def test_a_config_that_does_not_match_the_signature_is_refused(srv, made):
    repo, _ = made
    model = repo / "tf_wrong"
    shutil.copytree(repo / "tf_dense/1", model / "1")
    (model / "config.pbtxt").write_text(
        'platform: "tensorflow_savedmodel"\nmax_batch_size: 4\n'
        'input [ { name: "x" data_type: TYPE_INT32 dims: [ 4 ] } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]\n')
    reason = wait_until(lambda: index(srv).get("tf_wrong", {}).get("reason"), "tf_wrong's failure")
    assert "configuration expects datatype TYPE_INT32 for input 'x', model provides TYPE_FP32" in reason


def test_a_graph_tag_the_savedmodel_lacks_is_named(srv):
    reason = index(srv)["tf_wrong_tag"].get("reason", "")
    assert "the SavedModel has no graph tagged 'gpu' (it has 'serve')" in reason, reason


# --- without the library ------------------------------------------------------

def test_without_the_library_other_models_serve_and_savedmodels_say_how_to_install(made, tmp_path):
    repo, _ = made
    server = start_server(tmp_path, [REPO_ROOT / "model_repository", repo], [
        "--strict-model-config=false", f"--tensorflow-library-dir={tmp_path / 'nowhere'}",
        "--exit-on-error=false", "--strict-readiness=false",
    ])
    try:
        assert ready(server, "simple")
        row = index(server)["tf_dense"]
        assert row["state"] == "UNAVAILABLE"
        assert "scripts/setup-tensorflow.sh" in row["reason"] and "libtensorflow_cc.so.2" in row["reason"]
        # Autofill reads the signature without the library.
        meta = requests.get(f"{server.base}/v2/models/tf_dense/config").json()
        assert [i["name"] for i in meta.get("input", [])] in ([], ["x"])
    finally:
        assert stop_server(server) == 0, server.log()
