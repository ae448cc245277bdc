"""Ensembles end to end with the real tritonclient: the example mlp_pipeline
over HTTP (JSON and binary), gRPC and gRPC streaming; every datatype through
a two-step chain; a DAG with parallel branches and a step joining two;
requested outputs; statistics; metadata and config; bad ensembles and bad
requests; explicit model control (loading an ensemble pulls in its models,
unloading one takes the ensemble down) and a composing model unloaded under
load. Works on copies of the models in a tmp folder."""

from __future__ import annotations

import queue
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import REPO_ROOT, start_server, stop_server, wait_until
from calls import PROTOCOLS, TIMEOUT_S, index, infer, model_stats, ready
from models import IDENTITY_MODELS, mlp_reference, sample

DATATYPES = IDENTITY_MODELS + [("identity_bf16", "BF16", ml_dtypes.bfloat16)]


# --- building repositories -------------------------------------------------

def io(name: str, datatype: str, dims: str) -> str:
    kind = "STRING" if datatype == "BYTES" else datatype
    return f'{{ name: "{name}" data_type: TYPE_{kind} dims: [ {dims} ] }}'


def step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items()]
    maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items()]
    return f'{{ model_name: "{model}" model_version: -1 {" ".join(maps)} }}'


def write_ensemble(repo: Path, name: str, inputs: list[str], outputs: list[str],
                   steps: list[str], max_batch_size: int = 8) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: {max_batch_size}\n'
        f'input [ {", ".join(inputs)} ]\noutput [ {", ".join(outputs)} ]\n'
        f'ensemble_scheduling {{ step [ {", ".join(steps)} ] }}\n')


def copy_models(repo: Path, names: list[str]) -> None:
    for name in names:
        source = REPO_ROOT / "model_repository" / name
        if not source.exists():
            source = REPO_ROOT / "tests/models" / name
        shutil.copytree(source, repo / name)


def chain_name(model: str) -> str:
    return model.replace("identity_", "chain_")


def make_repository(root: Path) -> Path:
    """The example pipeline; a chain identity -> identity per datatype; a DAG
    on simple and identity_int32; an ensemble naming a missing model; two
    ensembles using each other."""
    repo = root / "models"
    repo.mkdir()
    copy_models(repo, ["preprocess", "mlp", "mlp_pipeline", "simple"] + [m for m, _, _ in DATATYPES])
    for model, datatype, _ in DATATYPES:
        write_ensemble(repo, chain_name(model), [io("IN", datatype, "-1")], [io("OUT", datatype, "-1")],
                       [step(model, {"INPUT0": "IN"}, {"OUTPUT0": "mid"}),
                        step(model, {"INPUT0": "mid"}, {"OUTPUT0": "OUT"})])
    # A feeds simple and identity_int32 in parallel; the second simple joins
    # both branches: SUM_PLUS_A = (A + B) + A, B_BACK = (A + B) - A.
    write_ensemble(repo, "dag", [io("A", "INT32", "16"), io("B", "INT32", "16")],
                   [io("SUM_PLUS_A", "INT32", "16"), io("B_BACK", "INT32", "16"),
                    io("DIFF", "INT32", "16")],
                   [step("simple", {"INPUT0": "A", "INPUT1": "B"}, {"OUTPUT0": "sum", "OUTPUT1": "diff"}),
                    step("identity_int32", {"INPUT0": "A"}, {"OUTPUT0": "a_copy"}),
                    step("simple", {"INPUT0": "sum", "INPUT1": "a_copy"},
                         {"OUTPUT0": "SUM_PLUS_A", "OUTPUT1": "B_BACK"}),
                    step("identity_int32", {"INPUT0": "diff"}, {"OUTPUT0": "DIFF"})])
    fp32 = ([io("IN", "FP32", "-1")], [io("OUT", "FP32", "-1")])
    write_ensemble(repo, "needs_missing", *fp32, [step("no_such_model", {"INPUT0": "IN"}, {"OUTPUT0": "OUT"})])
    write_ensemble(repo, "cycle_a", *fp32, [step("cycle_b", {"IN": "IN"}, {"OUT": "OUT"})])
    write_ensemble(repo, "cycle_b", *fp32, [step("cycle_a", {"IN": "IN"}, {"OUT": "OUT"})])
    return repo


@pytest.fixture(scope="module")
def ens(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ensembles")
    server = start_server(tmp, [make_repository(tmp)], ["--exit-on-error=false", "--strict-readiness=false"])
    yield server
    assert stop_server(server) == 0, server.log()


@pytest.fixture(scope="module")
def explicit(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ensembles_explicit")
    repo = tmp / "models"
    repo.mkdir()
    copy_models(repo, ["preprocess", "mlp", "mlp_pipeline", "simple"])
    server = start_server(tmp, [repo], ["--model-control-mode=explicit"])
    yield server
    assert stop_server(server) == 0, server.log()


def pipeline_input(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    raw = sample(np.uint8, (rows, 256), seed=seed)
    return raw, mlp_reference(raw.astype(np.float32) / 255)


def assert_serving(server) -> None:
    """The server is up and still answers an ensemble correctly."""
    assert server.process.poll() is None, server.log()
    raw, expected = pipeline_input(2, seed=99)
    got = infer(server, "http-binary", "mlp_pipeline", [("RAW", raw, "UINT8")])
    np.testing.assert_allclose(got.outputs["OUTPUT"], expected, rtol=1e-5, atol=1e-5)


# --- 1. the example pipeline over every protocol ---------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("ask_output", [False, True])
def test_mlp_pipeline(ens, protocol, ask_output):
    raw, expected = pipeline_input(3, seed=1)
    got = infer(ens, protocol, "mlp_pipeline", [("RAW", raw, "UINT8")],
                outputs=["OUTPUT"] if ask_output else None, request_id=f"req-{protocol}")
    assert got.names == ["OUTPUT"]
    assert got.outputs["OUTPUT"].shape == (3, 16) and got.outputs["OUTPUT"].dtype == np.float32
    np.testing.assert_allclose(got.outputs["OUTPUT"], expected, rtol=1e-5, atol=1e-5)
    assert got.id == f"req-{protocol}"


def test_mlp_pipeline_grpc_stream(ens):
    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(ens.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    expected = {}
    try:
        for k in range(5):
            raw, expected[f"s{k}"] = pipeline_input(k + 1, seed=10 + k)
            t = grpcclient.InferInput("RAW", list(raw.shape), "UINT8")
            t.set_data_from_numpy(raw)
            output = "NOPE" if k == 2 else "OUTPUT"  # a bad request does not end the stream
            client.async_stream_infer("mlp_pipeline", [t], request_id=f"s{k}",
                                      outputs=[grpcclient.InferRequestedOutput(output)])
        errors = []
        for _ in range(5):
            result, error = answers.get(timeout=TIMEOUT_S)
            if error is not None:
                errors.append(error.message())
                continue
            want = expected.pop(result.get_response().id)
            np.testing.assert_allclose(result.as_numpy("OUTPUT"), want, rtol=1e-5, atol=1e-5)
    finally:
        client.stop_stream()
        client.close()
    assert list(expected) == ["s2"]
    assert len(errors) == 1 and "unexpected inference output 'NOPE'" in errors[0], errors


# --- 2. every datatype, byte exact -----------------------------------------

@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model,datatype,dtype", DATATYPES)
def test_every_datatype_through_a_chain(ens, protocol, model, datatype, dtype):
    if datatype == "BF16":
        if protocol == "http-json":
            pytest.skip("tritonclient sends BF16 over HTTP as binary data only")
        data = sample(np.float32, (2, 5), seed=3).astype(ml_dtypes.bfloat16)
    elif datatype == "FP16" and protocol == "http-json":
        pytest.skip("Triton takes FP16 over HTTP as binary data only (test_http_infer.py)")
    elif datatype == "BYTES" and protocol == "http-json":
        data = np.array([[b"abc", b"", "é".encode(), b"x" * 300, b"z"]] * 2, dtype=np.object_)
    else:
        data = sample(dtype, (2, 5), seed=3)  # BYTES: empty, NUL, 0xff 0xfe, UTF-8
    got = infer(ens, protocol, chain_name(model), [("IN", data, datatype)])
    out = got.outputs["OUT"]
    assert out.shape == data.shape
    if datatype == "BYTES":
        assert list(out.flatten()) == list(data.flatten())
    else:
        assert out.dtype == data.dtype
        assert out.tobytes() == data.tobytes()


# --- 3, 4. a DAG, and only the requested outputs ---------------------------

def dag_inputs():
    a = np.arange(48, dtype=np.int32).reshape(3, 16) - 20
    b = sample(np.int32, (3, 16), seed=4) // 4  # no overflow in a + b + a
    return a, b, [("A", a, "INT32"), ("B", b, "INT32")]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_dag_with_parallel_branches_and_a_join(ens, protocol):
    a, b, inputs = dag_inputs()
    got = infer(ens, protocol, "dag", inputs)
    assert sorted(got.names) == ["B_BACK", "DIFF", "SUM_PLUS_A"]
    np.testing.assert_array_equal(got.outputs["SUM_PLUS_A"], a + b + a)
    np.testing.assert_array_equal(got.outputs["B_BACK"], b)
    np.testing.assert_array_equal(got.outputs["DIFF"], a - b)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_only_requested_outputs_are_returned(ens, protocol):
    a, b, inputs = dag_inputs()
    got = infer(ens, protocol, "dag", inputs, outputs=["DIFF"])
    assert got.names == ["DIFF"]
    np.testing.assert_array_equal(got.outputs["DIFF"], a - b)
    got = infer(ens, protocol, "dag", inputs, outputs=["B_BACK", "SUM_PLUS_A"])
    assert sorted(got.names) == ["B_BACK", "SUM_PLUS_A"]
    np.testing.assert_array_equal(got.outputs["SUM_PLUS_A"], a + b + a)


@pytest.mark.parametrize("protocol", ["http-binary", "grpc"])
def test_output_requested_twice_is_answered_once(ens, protocol):
    a, b, inputs = dag_inputs()
    plain = infer(ens, protocol, "simple", [("INPUT0", a, "INT32"), ("INPUT1", b, "INT32")],
                  outputs=["OUTPUT1", "OUTPUT1"])
    assert plain.names == ["OUTPUT1"], "a plain model answers it once"
    got = infer(ens, protocol, "dag", inputs, outputs=["DIFF", "DIFF"])
    assert got.names == ["DIFF"], got.names


# --- 5. statistics ---------------------------------------------------------

def test_statistics_count_ensemble_and_composing_models(ens):
    models = ["mlp_pipeline", "preprocess", "mlp"]
    before = {m: model_stats(ens, m) for m in models}
    rows = [1, 3, 2, 5, 1]
    for k, n in enumerate(rows):  # one at a time: each is one execution of each step
        raw, expected = pipeline_input(n, seed=30 + k)
        got = infer(ens, PROTOCOLS[k % 3], "mlp_pipeline", [("RAW", raw, "UINT8")])
        np.testing.assert_allclose(got.outputs["OUTPUT"], expected, rtol=1e-5, atol=1e-5)
    after = {m: model_stats(ens, m) for m in models}

    def grew(model, *path):
        value_after, value_before = after[model], before[model]
        for key in path:
            value_after, value_before = value_after[key], value_before[key]
        return value_after - value_before

    assert grew("mlp_pipeline", "inference_stats", "success", "count") == len(rows)
    assert grew("mlp_pipeline", "inference_count") == sum(rows)
    assert grew("mlp_pipeline", "inference_stats", "fail", "count") == 0
    for model in ("preprocess", "mlp"):
        assert grew(model, "inference_stats", "success", "count") == len(rows), model
        assert grew(model, "inference_count") == sum(rows), model
        assert grew(model, "execution_count") == len(rows), model
    assert after["mlp_pipeline"]["last_inference"] >= after["mlp"]["last_inference"] > 0


# --- 6. metadata, config, index --------------------------------------------

def test_metadata_config_and_index(ens):
    meta = requests.get(f"{ens.base}/v2/models/mlp_pipeline").json()
    assert meta["platform"] == "ensemble" and meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": "RAW", "datatype": "UINT8", "shape": [-1, 256]}]
    assert meta["outputs"] == [{"name": "OUTPUT", "datatype": "FP32", "shape": [-1, 16]}]
    config = requests.get(f"{ens.base}/v2/models/mlp_pipeline/config").json()
    assert config["platform"] == "ensemble" and config["max_batch_size"] == 64
    steps = config["ensemble_scheduling"]["step"]
    assert [(s["model_name"], s["input_map"], s["output_map"]) for s in steps] == [
        ("preprocess", {"RAW": "RAW"}, {"SCALED": "scaled"}),
        ("mlp", {"INPUT": "scaled"}, {"OUTPUT": "OUTPUT"})]

    client = grpcclient.InferenceServerClient(ens.grpc_url)
    try:
        assert client.get_model_metadata("mlp_pipeline", as_json=True)["platform"] == "ensemble"
        grpc_steps = client.get_model_config("mlp_pipeline", as_json=True)["config"]["ensemble_scheduling"]["step"]
        assert [s["model_name"] for s in grpc_steps] == ["preprocess", "mlp"]
        assert client.is_model_ready("mlp_pipeline") and client.is_model_ready("dag")
    finally:
        client.close()

    rows = index(ens)
    for name in ("mlp_pipeline", "dag", "chain_fp32", "preprocess", "mlp"):
        assert rows[name] == {"name": name, "version": "1", "state": "READY"}


# --- 7. bad ensembles and bad requests -------------------------------------

def test_ensemble_naming_a_missing_model(ens):
    row = index(ens)["needs_missing"]
    assert row["state"] == "UNAVAILABLE" and "no_such_model" in row["reason"], row
    assert not ready(ens, "needs_missing")
    with pytest.raises(InferenceServerException) as err:
        infer(ens, "http-binary", "needs_missing", [("IN", np.ones((1, 2), np.float32), "FP32")])
    assert "needs_missing" in str(err.value)
    assert_serving(ens)


def test_cycle_between_ensembles(ens):
    rows = index(ens)
    for name in ("cycle_a", "cycle_b"):
        assert rows[name]["state"] == "UNAVAILABLE", rows[name]
        assert "circular dependency" in rows[name]["reason"], rows[name]
        assert not ready(ens, name)
    assert_serving(ens)


@pytest.mark.parametrize("output", ["NOPE", "scaled"])  # "scaled" is internal to the ensemble
def test_request_for_an_output_the_ensemble_does_not_declare(ens, output):
    raw, _ = pipeline_input(1, seed=5)
    body = {"inputs": [{"name": "RAW", "datatype": "UINT8", "shape": [1, 256], "data": raw.flatten().tolist()}],
            "outputs": [{"name": output}]}
    r = requests.post(f"{ens.base}/v2/models/mlp_pipeline/infer", json=body, timeout=TIMEOUT_S)
    assert r.status_code == 400, r.text
    assert output in r.json()["error"]
    with pytest.raises(InferenceServerException) as err:
        infer(ens, "grpc", "mlp_pipeline", [("RAW", raw, "UINT8")], outputs=[output])
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT" and output in err.value.message()
    assert_serving(ens)


def test_wrong_input_datatype(ens):
    body = {"inputs": [{"name": "RAW", "datatype": "FP32", "shape": [1, 256], "data": [0.5] * 256}]}
    r = requests.post(f"{ens.base}/v2/models/mlp_pipeline/infer", json=body, timeout=TIMEOUT_S)
    assert r.status_code == 400, r.text
    assert "RAW" in r.json()["error"] and "UINT8" in r.json()["error"]
    with pytest.raises(InferenceServerException) as err:
        infer(ens, "grpc", "mlp_pipeline", [("RAW", np.zeros((1, 256), np.float32), "FP32")])
    assert err.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert_serving(ens)


# --- 8, 9. explicit model control ------------------------------------------

def test_explicit_load_and_unload(explicit):
    client = httpclient.InferenceServerClient(explicit.http_url, network_timeout=TIMEOUT_S)
    assert "state" not in index(explicit)["mlp_pipeline"], "nothing is loaded yet"
    client.load_model("mlp_pipeline")
    for model in ("mlp_pipeline", "preprocess", "mlp"):
        assert client.is_model_ready(model), model
        assert index(explicit)[model]["state"] == "READY"
    assert not client.is_model_ready("simple")
    assert_serving(explicit)

    client.unload_model("mlp", unload_dependents=True)
    assert not client.is_model_ready("mlp") and not client.is_model_ready("mlp_pipeline")
    assert client.is_model_ready("preprocess"), "only the model and its dependents go"
    assert index(explicit)["mlp_pipeline"]["state"] == "UNAVAILABLE"

    client.load_model("mlp_pipeline")
    assert client.is_model_ready("mlp") and client.is_model_ready("mlp_pipeline")
    client.unload_model("mlp")  # without unload_dependents: the ensemble cannot serve either
    assert not client.is_model_ready("mlp_pipeline")
    raw, _ = pipeline_input(1, seed=8)
    for protocol in PROTOCOLS:
        start = time.monotonic()
        with pytest.raises(InferenceServerException) as err:
            infer(explicit, protocol, "mlp_pipeline", [("RAW", raw, "UINT8")])
        assert time.monotonic() - start < 5
        assert "mlp" in str(err.value), err.value
    assert explicit.process.poll() is None

    client.load_model("mlp")  # the ensemble serves again once its model is back
    assert client.is_model_ready("mlp_pipeline")
    assert_serving(explicit)
    client.close()


def test_explicit_unload_of_the_ensemble(explicit):
    """As Triton (L0_lifecycle test_model_control): unloading the ensemble leaves
    its models loaded, and an ensemble unloaded on purpose does not come back
    when one of its models loads again."""
    client = httpclient.InferenceServerClient(explicit.http_url, network_timeout=TIMEOUT_S)
    client.load_model("mlp_pipeline")
    client.unload_model("mlp_pipeline")
    assert not client.is_model_ready("mlp_pipeline")
    assert client.is_model_ready("preprocess") and client.is_model_ready("mlp")
    client.unload_model("mlp")
    client.load_model("mlp")
    assert not client.is_model_ready("mlp_pipeline")
    assert index(explicit)["mlp_pipeline"]["state"] == "UNAVAILABLE"
    client.close()


def test_ensemble_shows_unavailable_while_a_composing_model_is_unloaded(explicit):
    client = httpclient.InferenceServerClient(explicit.http_url, network_timeout=TIMEOUT_S)
    client.load_model("mlp_pipeline")
    client.unload_model("mlp")
    try:
        assert not client.is_model_ready("mlp_pipeline")
        assert index(explicit)["mlp_pipeline"]["state"] == "UNAVAILABLE", index(explicit)["mlp_pipeline"]
        raw, _ = pipeline_input(1, seed=2)
        body = {"inputs": [{"name": "RAW", "datatype": "UINT8", "shape": [1, 256],
                            "data": raw.flatten().tolist()}]}
        r = requests.post(f"{explicit.base}/v2/models/mlp_pipeline/infer", json=body, timeout=TIMEOUT_S)
        assert (r.status_code, r.json()["error"]) == (
            404, "Request for unknown model: 'mlp_pipeline' has no available versions")
    finally:
        client.load_model("mlp")
        client.close()


def test_unload_ensemble_with_dependents_unloads_its_models(explicit):
    client = httpclient.InferenceServerClient(explicit.http_url, network_timeout=TIMEOUT_S)
    for model in ("mlp_pipeline", "preprocess", "mlp"):
        client.unload_model(model)
    client.load_model("mlp_pipeline")  # preprocess and mlp come with it
    client.unload_model("mlp_pipeline", unload_dependents=True)
    try:
        states = {m: client.is_model_ready(m) for m in ("mlp_pipeline", "preprocess", "mlp")}
        assert states == {"mlp_pipeline": False, "preprocess": False, "mlp": False}, states
    finally:
        client.close()


def test_composing_model_unloaded_under_load(explicit):
    client = httpclient.InferenceServerClient(explicit.http_url, network_timeout=TIMEOUT_S)
    client.load_model("mlp_pipeline")
    inputs = [pipeline_input(1 + k % 4, seed=50 + k) for k in range(8)]
    stop = threading.Event()
    unloaded_at = []
    # Per worker: answers, errors, answers to requests sent after the
    # unload, and requests sent after it (whatever came of them).
    tallies = [{"ok": 0, "errors": [], "late_ok": 0, "late": 0} for _ in range(16)]

    def worker(w: int) -> None:
        tally = tallies[w]
        k = w
        while not stop.is_set():
            raw, expected = inputs[k % len(inputs)]
            sent = time.monotonic()
            late = bool(unloaded_at and sent > unloaded_at[0] + 0.1)
            try:
                got = infer(explicit, PROTOCOLS[w % 3], "mlp_pipeline", [("RAW", raw, "UINT8")])
            except InferenceServerException as e:
                tally["errors"].append(str(e))
            else:
                np.testing.assert_allclose(got.outputs["OUTPUT"], expected, rtol=1e-5, atol=1e-5)
                tally["ok"] += 1
                tally["late_ok"] += late
            tally["late"] += late
            k += 1

    def total(key: str) -> int:
        return sum(t[key] for t in tallies)

    with ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(worker, w) for w in range(16)]
        try:
            # Under load before the unload, and long enough after it that
            # requests sent once it was done have been answered.
            wait_until(lambda: total("ok") >= 16 or any(f.done() for f in futures),
                       "answers before the unload")
            client.unload_model("mlp")
            unloaded_at.append(time.monotonic())
            wait_until(lambda: total("late") >= 16 or any(f.done() for f in futures),
                       "requests sent after the unload")
        finally:
            stop.set()
        for f in futures:
            f.result(timeout=2 * TIMEOUT_S)
    results = [(t["ok"], t["errors"], t["late_ok"]) for t in tallies]
    ok = sum(r[0] for r in results)
    errors = [e for r in results for e in r[1]]
    assert ok > 0 and errors, (ok, len(errors))
    assert sum(r[2] for r in results) == 0, "requests sent after the unload succeeded"
    assert all("mlp" in e for e in errors), set(errors)
    print(f"\n{ok} answered, {len(errors)} failed: {sorted(set(errors))}")
    assert requests.get(f"{explicit.base}/v2/health/live").status_code == 200
    client.load_model("mlp")
    assert_serving(explicit)
    client.close()
