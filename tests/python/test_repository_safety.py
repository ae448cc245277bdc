"""Repository safety: no file a model's config names (its model file through
`default_model_filename`, `label_filename`, warmup `input_data_file`), no
version folder and no `file:` load parameter may be read or written outside
the model's folder: `..`, absolute paths and symbolic links that lead out
make the model UNAVAILABLE with the reason (or the load request fail), and
the other models keep serving. A model folder that is itself a link into
the repository (a common layout) still loads.

Real Triton reads whatever these paths name; refusing them is Nereid's own
rule (docs/compatibility.md "Repository safety")."""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from conftest import REPO_ROOT, start_server, stop_server

SIMPLE = REPO_ROOT / "model_repository" / "simple"
BASE_CONFIG = (SIMPLE / "config.pbtxt").read_text()


def simple_model(repo: Path, name: str, extra: str = "", with_file: bool = True) -> Path:
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(BASE_CONFIG.replace('name: "simple"', f'name: "{name}"') + extra)
    if with_file:
        shutil.copy(SIMPLE / "1" / "model.onnx", folder / "1" / "model.onnx")
    return folder


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("safety")
    outside = tmp / "outside"
    outside.mkdir()
    shutil.copy(SIMPLE / "1" / "model.onnx", outside / "model.onnx")
    (outside / "labels.txt").write_text("secret\n" * 16)
    (outside / "in.bin").write_bytes(np.zeros(16, np.int32).tobytes())
    repo = tmp / "repo"
    repo.mkdir()

    simple_model(repo, "ok")
    simple_model(repo, "dotdot_file", 'default_model_filename: "../../outside/model.onnx"\n', with_file=False)
    simple_model(repo, "absolute_file", f'default_model_filename: "{outside / "model.onnx"}"\n', with_file=False)
    linked = simple_model(repo, "linked_file", with_file=False)
    os.symlink(outside / "model.onnx", linked / "1" / "model.onnx")
    version = simple_model(repo, "linked_version", with_file=False)
    (version / "1").rmdir()
    os.symlink(outside, version / "1")

    labels = BASE_CONFIG.replace('name: "OUTPUT0"', 'name: "OUTPUT0"\n    label_filename: "{}"')
    for name, label in [("dotdot_labels", "../outside/labels.txt"), ("linked_labels", "labels.txt")]:
        folder = repo / name
        (folder / "1").mkdir(parents=True)
        shutil.copy(SIMPLE / "1" / "model.onnx", folder / "1" / "model.onnx")
        (folder / "config.pbtxt").write_text(labels.replace('name: "simple"', f'name: "{name}"').replace("{}", label))
    os.symlink(outside / "labels.txt", repo / "linked_labels" / "labels.txt")

    warm = simple_model(repo, "linked_warmup", """model_warmup [ {
  name: "w" batch_size: 1
  inputs { key: "INPUT0" value: { data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "in.bin" } }
  inputs { key: "INPUT1" value: { data_type: TYPE_INT32 dims: [ 16 ] input_data_file: "in.bin" } }
} ]
""")
    (warm / "warmup").mkdir()
    os.symlink(outside / "in.bin", warm / "warmup" / "in.bin")

    # A model folder that is a link to a folder elsewhere loads.
    elsewhere = simple_model(tmp / "store", "linked_folder")
    os.symlink(elsewhere, repo / "linked_folder")

    s = start_server(tmp, [repo], ["--exit-on-error=false", "--strict-readiness=false"])
    yield s
    assert stop_server(s) == 0, s.log()


def index(srv) -> dict[str, dict]:
    rows = requests.post(f"{srv.base}/v2/repository/index", json={}).json()
    return {r["name"]: r for r in rows}


@pytest.mark.parametrize("name, reason", [
    ("dotdot_file", "must be a relative path that stays inside"),
    ("absolute_file", "must be a relative path that stays inside"),
    ("linked_file", "through a symbolic link"),
    ("linked_version", "through a symbolic link"),
    ("dotdot_labels", "must be a relative path that stays inside"),
    ("linked_labels", "through a symbolic link"),
    ("linked_warmup", "through a symbolic link"),
])
def test_paths_that_leave_the_model_folder_are_refused(srv, name, reason):
    row = index(srv)[name]
    assert row["state"] == "UNAVAILABLE", row
    assert reason in row["reason"], row


@pytest.mark.parametrize("name", ["ok", "linked_folder"])
def test_models_inside_their_folder_serve(srv, name):
    client = httpclient.InferenceServerClient(srv.http_url)
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for i in inputs:
        i.set_data_from_numpy(data)
    result = client.infer(name, inputs)
    assert (result.as_numpy("OUTPUT0") == data * 2).all()


def test_file_parameters_cannot_write_outside(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    s = start_server(tmp_path, [repo], ["--model-control-mode=explicit"])
    try:
        config = {"name": "m", "platform": "onnxruntime_onnx", "max_batch_size": 0}
        model = base64.b64encode((SIMPLE / "1" / "model.onnx").read_bytes()).decode()
        for path in ["../escape.onnx", "1/../../escape.onnx", str(tmp_path / "escape.onnx")]:
            body = {"parameters": {"config": json.dumps(config), f"file:{path}": model}}
            r = requests.post(f"{s.base}/v2/repository/models/m/load", json=body)
            assert r.status_code == 400, (path, r.text)
            assert "must be relative and stay inside the model folder" in r.json()["error"], r.text
        assert not list(tmp_path.rglob("escape.onnx"))
        assert requests.get(f"{s.base}/v2/health/live").status_code == 200
    finally:
        assert stop_server(s) == 0
