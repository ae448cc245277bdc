"""Poll mode under load: client threads over HTTP and gRPC keep inferring
while the test edits a config, replaces a model file with one that answers
differently, adds and removes a version, removes a model, and adds a broken
model and then fixes it. No request to a model that stays available may
fail, answers switch when the new model is in, and the index tells what
happened. Works on copies of the models in a tmp folder; waits poll for
the expected state with deadlines."""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import REPO_ROOT, live, start_server, stop_server

ADD_SUB = REPO_ROOT / "model_repository/add_sub_versions"
IDENTITY = REPO_ROOT / "tests/models/identity_fp32"
A = np.array([1, 2, 3, 4], dtype=np.float32)
B = np.array([2, 2, 2, 2], dtype=np.float32)
DEADLINE = 120


def add_sub_config(name: str, policy: str = "") -> str:
    text = (ADD_SUB / "config.pbtxt").read_text()
    text = text.replace('"add_sub_versions"', f'"{name}"')
    return text.replace("version_policy: { all { } }", policy)


def identity_model(repo: Path, name: str, model_file: Path | None = None) -> Path:
    shutil.copytree(IDENTITY, repo / name)
    config = repo / name / "config.pbtxt"
    config.write_text(config.read_text().replace('"identity_fp32"', f'"{name}"'))
    if model_file is not None:
        shutil.copyfile(model_file, repo / name / "1/model.onnx")
    return repo / name


def make_repository(repo: Path) -> None:
    # arith: version 1 adds; the test puts the multiplying model in its place.
    (repo / "arith/1").mkdir(parents=True)
    shutil.copyfile(ADD_SUB / "1/model.onnx", repo / "arith/1/model.onnx")
    (repo / "arith/config.pbtxt").write_text(add_sub_config("arith"))
    # versioned: every version serves; version 2 (multiply) comes and goes.
    (repo / "versioned/1").mkdir(parents=True)
    shutil.copyfile(ADD_SUB / "1/model.onnx", repo / "versioned/1/model.onnx")
    (repo / "versioned/config.pbtxt").write_text(
        add_sub_config("versioned", "version_policy: { all { } }"))
    identity_model(repo, "edited")
    identity_model(repo, "doomed")


def kind(out: np.ndarray) -> str:
    if np.array_equal(out, A + B):
        return "add"
    if np.array_equal(out, A * B):
        return "mul"
    return f"unexpected {out}"


@dataclass
class Client:
    """One thread inferring in a loop; remembers every answer and error."""
    protocol: str
    model: str
    version: str = ""
    answers: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def run(self, url: dict[str, str], stop: threading.Event) -> None:
        lib = httpclient if self.protocol == "http" else grpcclient
        client = lib.InferenceServerClient(url[self.protocol])
        while not stop.is_set():
            try:
                self.answers.append(self.infer(lib, client))
            except Exception as e:  # noqa: BLE001 - every failure counts
                self.errors.append(str(e))
            time.sleep(0.005)
        client.close()

    def infer(self, lib, client) -> str:
        if self.model == "edited":
            x = np.arange(6, dtype=np.float32).reshape(1, 6)
            t = lib.InferInput("INPUT0", [1, 6], "FP32")
            t.set_data_from_numpy(x)
            out = client.infer(self.model, [t]).as_numpy("OUTPUT0")
            return "identity" if np.array_equal(out, x) else f"unexpected {out}"
        inputs = [lib.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(A)
        inputs[1].set_data_from_numpy(B)
        result = client.infer(self.model, inputs, model_version=self.version)
        return kind(result.as_numpy("OUTPUT0"))


def wait_until(what: str, predicate, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting until {what}")


def runs(answers: list[str]) -> list[str]:
    """Consecutive answers collapsed: ["add", "add", "mul"] -> ["add", "mul"]."""
    return [a for i, a in enumerate(answers) if i == 0 or answers[i - 1] != a]


@pytest.fixture
def poll_server(tmp_path):
    repo = tmp_path / "models"
    repo.mkdir()
    make_repository(repo)
    server = start_server(tmp_path, [repo],
                          ["--model-control-mode=poll", "--repository-poll-secs=1"])
    yield server, repo
    assert stop_server(server) == 0, server.log()


def test_reloads_under_load_never_fail_a_request(poll_server):
    server, repo = poll_server
    base = server.base
    url = {"http": server.http_url, "grpc": server.grpc_url}

    def index() -> list[dict]:
        return requests.post(f"{base}/v2/repository/index", timeout=30).json()

    def row(name: str, version: str | None) -> dict | None:
        return next((r for r in index() if r["name"] == name and r.get("version") == version), None)

    def answer(model: str, version: str = "") -> str:
        return Client("http", model, version).infer(httpclient, httpclient.InferenceServerClient(url["http"]))

    clients = [Client("http", "arith"), Client("grpc", "arith"), Client("http", "edited"),
               Client("grpc", "edited"), Client("grpc", "versioned", "1"),
               Client("http", "versioned")]
    stop = threading.Event()
    threads = [threading.Thread(target=c.run, args=(url, stop)) for c in clients]
    for t in threads:
        t.start()
    try:
        wait_until("every client got answers", lambda: all(c.answers for c in clients))

        # A config edit: two instances instead of one.
        config = repo / "edited/config.pbtxt"
        config.write_text(config.read_text() + "\ninstance_group [ { kind: KIND_CPU count: 2 } ]\n")
        wait_until("the edited config serves", lambda: requests.get(
            f"{base}/v2/models/edited/config").json()["instance_group"][0]["count"] == 2)

        # A model file replaced in place by one that multiplies; the
        # clients' answers switch (the checks below need them to have).
        arith = [c for c in clients if c.model == "arith"]
        unversioned = next(c for c in clients if c.model == "versioned" and c.version == "")
        shutil.copyfile(ADD_SUB / "2/model.onnx", repo / "arith/1/model.onnx")
        wait_until("arith multiplies", lambda: answer("arith") == "mul")
        wait_until("the arith clients multiply", lambda: all(c.answers[-1:] == ["mul"] for c in arith))

        # A version added, then removed.
        shutil.copytree(ADD_SUB / "2", repo / "versioned/2")
        wait_until("versioned 2 serves", lambda: answer("versioned") == "mul")
        wait_until("the unversioned client gets 2", lambda: unversioned.answers[-1:] == ["mul"])
        assert row("versioned", "1")["state"] == "READY"
        shutil.rmtree(repo / "versioned/2")
        wait_until("versioned 2 is unloaded", lambda: row("versioned", "2") == {
            "name": "versioned", "version": "2", "state": "UNAVAILABLE", "reason": "unloaded"})
        assert answer("versioned") == "add"
        wait_until("the unversioned client gets 1 again", lambda: unversioned.answers[-1:] == ["add"])

        # A model removed.
        shutil.rmtree(repo / "doomed")
        wait_until("doomed is gone", lambda: all(r["name"] != "doomed" for r in index()))
        assert requests.get(f"{base}/v2/models/doomed").status_code == 404

        # A broken model added, then fixed.
        broken = identity_model(repo, "broken")
        (broken / "1/model.onnx").write_bytes(b"half a model")
        wait_until("broken is UNAVAILABLE", lambda: (row("broken", "1") or {}).get("state") == "UNAVAILABLE")
        assert row("broken", "1")["reason"], "the index says why"
        assert requests.get(f"{base}/v2/health/ready").status_code == 400, "strict readiness"
        for name, version in (("arith", "1"), ("edited", "1"), ("versioned", "1")):
            assert row(name, version)["state"] == "READY", f"{name} untouched"
        shutil.copyfile(IDENTITY / "1/model.onnx", broken / "1/model.onnx")
        wait_until("broken is fixed", lambda: (row("broken", "1") or {}).get("state") == "READY")
        wait_until("the server is ready again",
                   lambda: requests.get(f"{base}/v2/health/ready").status_code == 200)
        wait_until("every client has more than 20 answers", lambda: all(len(c.answers) > 20 for c in clients))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)

    for c in clients:
        assert c.errors == [], f"{c.protocol} {c.model} {c.version}: {c.errors[:3]}"
        assert len(c.answers) > 20, f"{c.protocol} {c.model}: {len(c.answers)} answers"
        assert not any(a.startswith("unexpected") for a in c.answers), c.answers
    for c in arith:
        assert runs(c.answers) == ["add", "mul"], f"{c.protocol}: switched once, for good"
    pinned = next(c for c in clients if c.model == "versioned" and c.version == "1")
    assert runs(pinned.answers) == ["add"]
    assert runs(unversioned.answers) == ["add", "mul", "add"]
    grpc_index = grpcclient.InferenceServerClient(url["grpc"]).get_model_repository_index()
    states = {(m.name, m.version): m.state for m in grpc_index.models}
    assert states[("broken", "1")] == "READY"
    assert ("doomed", "1") not in states
    print(f"\nanswers per client: {[(c.protocol, c.model, c.version, len(c.answers)) for c in clients]}")


def test_a_broken_new_version_leaves_the_old_one_serving_and_says_so(tmp_path):
    """Version 2 of a latest-1 model uploaded broken: version 1 serves on,
    and the log says the new version failed and the old one stays, not
    that it was unloaded (issue 35)."""
    repo = tmp_path / "models"
    (repo / "latest/1").mkdir(parents=True)
    shutil.copyfile(ADD_SUB / "1/model.onnx", repo / "latest/1/model.onnx")
    (repo / "latest/config.pbtxt").write_text(add_sub_config("latest"))
    server = start_server(tmp_path, [repo],
                          ["--model-control-mode=poll", "--repository-poll-secs=1"])
    try:
        (repo / "latest/2").mkdir()
        (repo / "latest/2/model.onnx").write_bytes(b"not an onnx model")
        deadline = time.monotonic() + DEADLINE
        while "serves on" not in server.log():
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.1)
        log = server.log()
        assert "version unloaded" not in log, log
        ready = requests.get(f"{server.base}/v2/models/latest/versions/1/ready", timeout=30)
        assert ready.status_code == 200
        client = httpclient.InferenceServerClient(server.http_url)
        inputs = [httpclient.InferInput("INPUT0", [4], "FP32"),
                  httpclient.InferInput("INPUT1", [4], "FP32")]
        inputs[0].set_data_from_numpy(A)
        inputs[1].set_data_from_numpy(B)
        answer = client.infer("latest", inputs)
        assert answer.get_response()["model_version"] == "1"
        np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), A + B)
    finally:
        assert stop_server(server) == 0, server.log()


def test_startup_readiness_forgives_a_bad_upload_but_not_a_bad_start(tmp_path):
    """--strict-readiness=startup, the chart's default (docs/deploy.md):
    a server whose models do not all serve yet is not ready; once it has
    been ready, a broken upload (a new version beside a serving one, or a
    new model) leaves it ready, and the model's own readiness and the
    index tell. Triton's strict rule, on the same repository, is not."""
    repo = tmp_path / "models"
    (repo / "latest/1").mkdir(parents=True)
    shutil.copyfile(ADD_SUB / "1/model.onnx", repo / "latest/1/model.onnx")
    (repo / "latest/config.pbtxt").write_text(add_sub_config("latest"))
    (repo / "fresh/1").mkdir(parents=True)
    (repo / "fresh/1/model.onnx").write_bytes(b"not an onnx model")
    (repo / "fresh/config.pbtxt").write_text(add_sub_config("fresh"))
    (tmp_path / "startup").mkdir()
    server = start_server(tmp_path / "startup", [repo],
                          ["--model-control-mode=poll", "--repository-poll-secs=1",
                           "--strict-readiness=startup", "--exit-on-error=false"], ready=live)
    ready = lambda path="": requests.get(f"{server.base}/v2{path}/health/ready"
                                         if not path else f"{server.base}/v2/models/{path}/ready",
                                         timeout=30).status_code
    try:
        wait_until("fresh to fail", lambda: "fresh" in server.log() and "failed" in server.log())
        assert ready() == 400, "a model that serves nothing at startup holds readiness back"
        shutil.copyfile(ADD_SUB / "1/model.onnx", repo / "fresh/1/model.onnx")
        wait_until("ready once fresh serves", lambda: ready() == 200)

        (repo / "latest/2").mkdir()
        (repo / "latest/2/model.onnx").write_bytes(b"not an onnx model")
        shutil.copytree(repo / "fresh", repo / "newbie")
        (repo / "newbie/config.pbtxt").write_text(add_sub_config("newbie"))
        (repo / "newbie/1/model.onnx").write_bytes(b"not an onnx model")

        def states():
            rows = requests.post(f"{server.base}/v2/repository/index", timeout=30).json()
            return {(r["name"], r.get("version")): r.get("state") for r in rows}
        wait_until("both bad uploads to fail",
                   lambda: states().get(("latest", "2")) == "UNAVAILABLE"
                   and states().get(("newbie", "1")) == "UNAVAILABLE")
        assert ready() == 200, "a bad upload does not take the server out"
        assert ready("latest") == 200, "version 1 serves on"
        assert ready("latest/versions/2") == 400
        assert ready("newbie") == 400

        strict = start_server(tmp_path, [repo], ["--exit-on-error=false"], ready=live)
        try:
            assert requests.get(f"{strict.base}/v2/health/ready", timeout=30).status_code == 400
        finally:
            assert stop_server(strict) == 0, strict.log()
    finally:
        assert stop_server(server) == 0, server.log()
