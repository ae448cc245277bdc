"""Cloud model repositories against local stores the tests start (moto's S3
server, gcp-storage-emulator, Azurite; see cloud_stores.py): models load
from each store and answer; poll mode follows a bucket under load (a model
file replaced, a version added, a model removed, a half-uploaded version
and a broken config, the store gone for a while) without a failed request;
explicit loads copy what they load; and each bad input gets an error that
names the bucket, the key and the store's words, the other models serving
on."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient

from cloud_stores import (AWS_ENV, AZURITE_ACCOUNT, AZURITE_KEY, S3, Azure, FaultProxy, Gcs,
                          azurite, gcs_emulator, moto, upload_model)
from conftest import REPO_ROOT, START_S, free_ports, start_server, stop_server

SIMPLE = REPO_ROOT / "model_repository/simple"
ADD_SUB = REPO_ROOT / "model_repository/add_sub_versions"
A = np.array([1, 2, 3, 4], dtype=np.float32)
B = np.array([2, 2, 2, 2], dtype=np.float32)
DEADLINE = 120


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto with a bucket, and a proxy in front of it that tests break."""
    folder = tmp_path_factory.mktemp("s3")
    with moto(folder) as port:
        proxy = FaultProxy(port)
        yield S3(port, "models"), proxy
        proxy.close()


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gcs")
    with gcs_emulator(folder) as port:
        proxy = FaultProxy(port, gcs_xml=True)
        yield Gcs(port, "models"), proxy
        proxy.close()


@pytest.fixture(scope="module")
def azure(tmp_path_factory):
    folder = tmp_path_factory.mktemp("azure")
    with azurite(folder) as port:
        yield Azure(port, "models"), port


@pytest.fixture
def aws_env(monkeypatch, tmp_path):
    """moto's keys, and a mount folder of the test's own."""
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    mount = tmp_path / "mount"
    mount.mkdir()
    monkeypatch.setenv("TRITON_AWS_MOUNT_DIRECTORY", str(mount))
    return mount


def s3_url(proxy: FaultProxy, prefix: str) -> str:
    return f"s3://127.0.0.1:{proxy.port}/models/{prefix}"


def add_sub(store, prefix: str, name: str, versions: dict[str, str], policy: str = "") -> None:
    """A model of add_sub_versions' config whose versions are the given
    ones of add_sub_versions ("1" adds, "2" multiplies)."""
    config = (ADD_SUB / "config.pbtxt").read_text().replace('"add_sub_versions"', f'"{name}"')
    store.put(f"{prefix}/{name}/config.pbtxt",
              config.replace("version_policy: { all { } }", policy).encode())
    for version, source in versions.items():
        store.put(f"{prefix}/{name}/{version}/model.onnx",
                  (ADD_SUB / source / "model.onnx").read_bytes())


def kind(server, model: str, version: str = "") -> str:
    client = httpclient.InferenceServerClient(server.http_url)
    inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(A)
    inputs[1].set_data_from_numpy(B)
    out = client.infer(model, inputs, model_version=version).as_numpy("OUTPUT0")
    client.close()
    if np.array_equal(out, A + B):
        return "add"
    if np.array_equal(out, A * B):
        return "mul"
    return f"unexpected {out}"


def simple_answers(server, model: str = "simple") -> bool:
    client = httpclient.InferenceServerClient(server.http_url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    result = client.infer(model, inputs)
    client.close()
    return np.array_equal(result.as_numpy("OUTPUT0"), a + a)


def index(server) -> list[dict]:
    return requests.post(f"{server.base}/v2/repository/index", timeout=30).json()


def row(server, name: str, version: str | None = None) -> dict:
    return next((r for r in index(server) if r["name"] == name and r.get("version") == version),
                {})


def wait_until(what: str, predicate, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting until {what}")


def test_s3_models_load_and_serve(s3, aws_env, tmp_path):
    store, proxy = s3
    upload_model(store, "load", "simple", SIMPLE)
    add_sub(store, "load", "add_sub", {"1": "1", "2": "2"}, "version_policy: { all { } }")
    server = start_server(tmp_path, [s3_url(proxy, "load")])
    try:
        assert simple_answers(server)
        assert (kind(server, "add_sub", "1"), kind(server, "add_sub", "2")) == ("add", "mul")
        copies = list(aws_env.glob("nereid-repository-*/models/simple/1/model.onnx"))
        assert len(copies) == 1, "copied under TRITON_AWS_MOUNT_DIRECTORY"
    finally:
        assert stop_server(server) == 0, server.log()
    assert list(aws_env.iterdir()) == [], "the copies go with the server"


def test_gcs_models_load_and_serve(gcs, monkeypatch, tmp_path):
    store, proxy = gcs
    upload_model(store, "load", "simple", SIMPLE)
    mount = tmp_path / "mount"
    mount.mkdir()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("TRITON_GCS_MOUNT_DIRECTORY", str(mount))
    server = start_server(tmp_path, ["gs://models/load"])
    try:
        assert simple_answers(server)
        assert list(mount.glob("nereid-repository-*/models/simple/config.pbtxt"))
    finally:
        assert stop_server(server) == 0, server.log()


def azure_env(monkeypatch, port: int, key: str = AZURITE_KEY) -> None:
    monkeypatch.setenv("AZURE_STORAGE_USE_EMULATOR", "true")
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", AZURITE_ACCOUNT)
    monkeypatch.setenv("AZURE_STORAGE_KEY", key)


def test_azure_models_load_and_serve(azure, monkeypatch, tmp_path):
    store, port = azure
    upload_model(store, "load", "simple", SIMPLE)
    add_sub(store, "load", "add_sub", {"1": "2"})
    azure_env(monkeypatch, port)
    mount = tmp_path / "mount"
    mount.mkdir()
    monkeypatch.setenv("TRITON_AZURE_MOUNT_DIRECTORY", str(mount))
    server = start_server(tmp_path, [f"as://{AZURITE_ACCOUNT}/models/load"])
    try:
        assert simple_answers(server)
        assert kind(server, "add_sub") == "mul"
        assert list(mount.glob("nereid-repository-*/models/add_sub/1/model.onnx"))
    finally:
        assert stop_server(server) == 0, server.log()


class Client:
    """Infers in a loop on its own thread; keeps every answer and error."""

    def __init__(self, server, model: str):
        self.server, self.model = server, model
        self.answers: list[str] = []
        self.errors: list[str] = []

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.answers.append(kind(self.server, self.model))
            except Exception as e:  # noqa: BLE001 - every failure counts
                self.errors.append(str(e))
            time.sleep(0.01)


def test_s3_poll_follows_the_bucket_without_failing_a_request(s3, aws_env, tmp_path):
    store, proxy = s3
    prefix = "poll"
    add_sub(store, prefix, "arith", {"1": "1"})
    add_sub(store, prefix, "versioned", {"1": "1"}, "version_policy: { all { } }")
    upload_model(store, prefix, "doomed", SIMPLE)
    server = start_server(tmp_path, [s3_url(proxy, prefix)],
                          ["--model-control-mode=poll", "--repository-poll-secs=1"])
    clients = [Client(server, "arith"), Client(server, "arith"), Client(server, "versioned")]
    stop = threading.Event()
    threads = [threading.Thread(target=c.run, args=(stop,)) for c in clients]
    for t in threads:
        t.start()
    try:
        wait_until("every client got answers", lambda: all(c.answers for c in clients))
        # A model file overwritten by one that multiplies.
        store.put(f"{prefix}/arith/1/model.onnx", (ADD_SUB / "2/model.onnx").read_bytes())
        wait_until("arith multiplies", lambda: kind(server, "arith") == "mul")
        # The clients' answers switch too (checked below).
        wait_until("the arith clients multiply",
                   lambda: all(c.answers[-1:] == ["mul"] for c in clients[:2]))

        # A version added.
        store.put(f"{prefix}/versioned/2/model.onnx", (ADD_SUB / "2/model.onnx").read_bytes())
        wait_until("versioned 2 serves", lambda: row(server, "versioned", "2").get("state") == "READY")
        assert kind(server, "versioned", "2") == "mul"

        # A version half uploaded: its folder without the model file.
        store.put(f"{prefix}/versioned/3/notes.txt", b"the model file comes next")
        object_url = f"{s3_url(proxy, prefix)}/versioned/3/model.onnx"
        wait_until("the index names the missing object",
                   lambda: object_url in row(server, "versioned", "2").get("reason", ""))
        assert row(server, "versioned", "1")["state"] == "READY"
        store.put(f"{prefix}/versioned/3/model.onnx", (ADD_SUB / "1/model.onnx").read_bytes())
        wait_until("versioned 3 serves", lambda: row(server, "versioned", "3").get("state") == "READY")
        assert "reason" not in row(server, "versioned", "2")

        # A config that does not parse: the serving version stays.
        config = f"{prefix}/arith/config.pbtxt"
        good = store.client.get_object(Bucket="models", Key=config)["Body"].read()
        store.put(config, b"name: \"arith\"\nplatform: {")
        wait_until("the index names the broken config",
                   lambda: f"{s3_url(proxy, prefix)}/arith/config.pbtxt" in
                   row(server, "arith", "1").get("reason", ""))
        assert kind(server, "arith") == "mul"
        store.put(config, good)
        wait_until("arith is fixed", lambda: "reason" not in row(server, "arith", "1"))

        # The store out of reach for a while: everything serves on.
        proxy.rules.append(("GET", "/models", "refuse"))
        wait_until("a failed listing is logged",
                   lambda: "cannot read the model repository" in server.log())
        assert kind(server, "arith") == "mul" and simple_answers(server, "doomed")
        proxy.rules.clear()

        # A model removed.
        store.delete(f"{prefix}/doomed/")
        wait_until("doomed is gone", lambda: all(r["name"] != "doomed" for r in index(server)))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        proxy.rules.clear()
        code = stop_server(server)
    assert code == 0, server.log()
    for c in clients:
        assert c.errors == [], f"{c.model}: {c.errors[:3]}"
        assert not any(a.startswith("unexpected") for a in c.answers)
    for c in clients[:2]:
        runs = [a for i, a in enumerate(c.answers) if i == 0 or c.answers[i - 1] != a]
        assert runs == ["add", "mul"], "switched once, for good"


def test_s3_explicit_loads_copy_what_they_load(s3, aws_env, tmp_path):
    store, proxy = s3
    prefix = "explicit"
    upload_model(store, prefix, "simple", SIMPLE)
    add_sub(store, prefix, "arith", {"1": "1"})
    server = start_server(tmp_path, [s3_url(proxy, prefix)],
                          ["--model-control-mode=explicit", "--load-model=simple"])
    base = server.base
    try:
        assert simple_answers(server)
        assert row(server, "arith") == {"name": "arith"}, "listed, not loaded"
        assert not list(aws_env.glob("nereid-repository-*/copies/*/arith")), "not copied yet"
        assert requests.post(f"{base}/v2/repository/models/arith/load").status_code == 200
        assert kind(server, "arith") == "add"

        # Loading again reads the bucket again.
        store.put(f"{prefix}/arith/1/model.onnx", (ADD_SUB / "2/model.onnx").read_bytes())
        assert requests.post(f"{base}/v2/repository/models/arith/load").status_code == 200
        assert kind(server, "arith") == "mul"

        r = requests.post(f"{base}/v2/repository/models/nope/load")
        assert r.status_code == 500, "as Triton answers"
        assert r.json()["error"] == "failed to load 'nope', failed to poll from model repository"
        assert requests.post(f"{base}/v2/repository/models/arith/unload").status_code == 200
        assert row(server, "arith", "1")["state"] == "UNAVAILABLE"
    finally:
        assert stop_server(server) == 0, server.log()


def test_s3_failed_copies_leave_the_other_models_serving(s3, aws_env, tmp_path):
    """A body cut short on the way (a network error mid-copy) and an
    object overwritten between the listing and its read: both models are
    UNAVAILABLE with the object's URL and the store's words, simple serves,
    and the next poll copies them."""
    store, proxy = s3
    prefix = "faults"
    upload_model(store, prefix, "simple", SIMPLE)
    add_sub(store, prefix, "flaky", {"1": "1"})
    add_sub(store, prefix, "changing", {"1": "1"})
    changing_key = f"{prefix}/changing/1/model.onnx"
    overwritten = []

    def overwrite_once() -> None:
        if not overwritten:
            overwritten.append(True)
            store.put(changing_key, (ADD_SUB / "2/model.onnx").read_bytes())

    proxy.rules[:] = [("GET", f"/{prefix}/flaky/1/model.onnx", "truncate"),
                      ("GET", f"/{changing_key}", overwrite_once)]
    try:
        server = start_server(tmp_path, [s3_url(proxy, prefix)],
                              ["--model-control-mode=poll", "--repository-poll-secs=1",
                               "--exit-on-error=false", "--strict-readiness=false"])
        assert simple_answers(server)
        flaky, changing = row(server, "flaky"), row(server, "changing")
        assert flaky["state"] == "UNAVAILABLE"
        assert flaky["reason"].startswith(
            f"cannot copy {s3_url(proxy, prefix)}/flaky/1/model.onnx: "), flaky
        assert changing["state"] == "UNAVAILABLE"
        assert changing["reason"].startswith(
            f"{s3_url(proxy, prefix)}/changing/1/model.onnx changed while it was copied"), changing
        proxy.rules.clear()
        wait_until("flaky is copied at the next look",
                   lambda: row(server, "flaky", "1").get("state") == "READY")
        wait_until("changing is copied at the next look",
                   lambda: row(server, "changing", "1").get("state") == "READY")
        assert kind(server, "flaky") == "add" and kind(server, "changing") == "mul"
    finally:
        proxy.rules.clear()
    assert stop_server(server) == 0, server.log()


def run_briefly(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Runs nereid expecting it to stop at startup."""
    import os

    binary = os.environ.get("NEREID_BIN", str(REPO_ROOT / "target/debug/nereid"))
    http, grpc, metrics = free_ports(3)
    ports = [f"--http-port={http}", f"--grpc-port={grpc}",
             f"--metrics-port={metrics}", "--http-address=127.0.0.1",
             "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"]
    return subprocess.run([binary, *args, *ports], capture_output=True, text=True, timeout=START_S,
                          env={**os.environ, **(env or {}), "RUST_BACKTRACE": "0"})


@pytest.mark.parametrize("url, words", [
    ("s3://", "malformed cloud repository URL 's3://': no bucket name found"),
    ("s3://host:9000", "no bucket name found after the endpoint 'host:9000'"),
    ("gs://bucket/../models", "the path may not hold a '..' part"),
    ("as://account", "no container name found"),
    ("https://example.com/models", "'https://' repositories are not supported"),
])
def test_malformed_urls_fail_at_startup(url, words):
    done = run_briefly([f"--model-repository={url}"])
    assert done.returncode != 0
    assert words in done.stderr, done.stderr


def test_store_errors_at_startup_name_the_bucket(s3, tmp_path):
    store, proxy = s3
    missing = run_briefly([f"--model-repository=s3://127.0.0.1:{proxy.port}/nosuchbucket/m"],
                          AWS_ENV)
    assert missing.returncode != 0
    assert f"cannot list s3://127.0.0.1:{proxy.port}/nosuchbucket/m" in missing.stderr
    assert "NoSuchBucket: The specified bucket does not exist" in missing.stderr, missing.stderr

    with moto(tmp_path, auth=True) as port:
        wrong = run_briefly([f"--model-repository=s3://127.0.0.1:{port}/models/m"], AWS_ENV)
    assert wrong.returncode != 0
    assert f"cannot list s3://127.0.0.1:{port}/models/m" in wrong.stderr
    assert "InvalidAccessKeyId" in wrong.stderr, wrong.stderr

    no_key_file = run_briefly(["--model-repository=gs://models/m"],
                              {"GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "none.json")})
    assert no_key_file.returncode != 0
    assert "cannot set up the client for gs://models/m" in no_key_file.stderr, no_key_file.stderr


def test_azure_wrong_key_is_the_stores_error(azure, monkeypatch):
    store, port = azure
    azure_env(monkeypatch, port, key="d3Jvbmcga2V5")
    done = run_briefly([f"--model-repository=as://{AZURITE_ACCOUNT}/models/load"])
    assert done.returncode != 0
    assert f"cannot list as://{AZURITE_ACCOUNT}/models/load" in done.stderr
    assert "403" in done.stderr and "AuthorizationFailure" in done.stderr, done.stderr


def test_credential_file_per_prefix(s3, tmp_path, monkeypatch):
    store, proxy = s3
    upload_model(store, "creds", "simple", SIMPLE)
    url = s3_url(proxy, "creds")
    for name in AWS_ENV:
        monkeypatch.delenv(name, raising=False)
    credentials = tmp_path / "cloud.json"
    credentials.write_text(
        '{"s3": {"%s": {"key_id": "testing", "secret_key": "testing", "region": "us-east-1"}}}'
        % url[: -len("/creds")])
    monkeypatch.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(credentials))
    server = start_server(tmp_path, [url])
    try:
        assert simple_answers(server)
    finally:
        assert stop_server(server) == 0, server.log()
    other = run_briefly(["--model-repository=s3://elsewhere/m"])
    assert other.returncode != 0
    assert f"no credential in {credentials} (TRITON_CLOUD_CREDENTIAL_PATH) matches" in other.stderr


def test_mount_directory_must_exist(s3, monkeypatch, tmp_path):
    store, proxy = s3
    missing = tmp_path / "no-such-folder"
    done = run_briefly([f"--model-repository={s3_url(proxy, 'load')}"],
                       {**AWS_ENV, "TRITON_AWS_MOUNT_DIRECTORY": str(missing)})
    assert done.returncode != 0
    assert f"cannot make the local folder for {s3_url(proxy, 'load')} in {missing}" in done.stderr
