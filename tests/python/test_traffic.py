"""Traffic management from a Triton client's side: version labels where a
version goes (HTTP path, gRPC model_version), the traffic endpoint and a
load's traffic parameter, a weighted split over 10,000 requests checked
with a chi-square test, sticky keys, the route log, label flips and
rollbacks under perf_analyzer's load losing no request, and shadows whose
failures and slowness never reach the client."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import REPO_ROOT, start_server, stop_server, wait_until

PERF_ANALYZER = REPO_ROOT / ".tools" / "perf_analyzer" / "perf_analyzer.sh"
# The 99.9999th percentile of chi-square with one degree of freedom: a fair
# split fails the test once in a million runs (at the 99.9th, 10.83, one
# run of CI in a thousand would), while a share off by a fifth (10 % seen
# as 8 or 12 % over 10,000 requests) still gives 44 and fails it.
CHI2_1DF = 23.93

# Version 1 adds, version 2 multiplies: the answer says which version gave it.
AB = REPO_ROOT / "model_repository" / "add_sub_versions"

PY_CONFIG = """
backend: "python"
max_batch_size: 0
version_policy: { all { } }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

PLUS = """
import os
import time
import triton_python_backend_utils as pb_utils


def wait_for(path):
    \"\"\"Until the test creates `path` (at most 10 minutes).\"\"\"
    deadline = time.monotonic() + 600
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


class TritonPythonModel:
    def execute(self, requests):
        {before}
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + {add})])
            for r in requests]
"""


# An ensemble whose one step names `ab`'s version by a label.
ENSEMBLE = """
platform: "ensemble"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
parameters { key: "version_label:ab" value: { string_value: "canary" } }
ensemble_scheduling { step [ {
  model_name: "ab" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" }
  input_map { key: "INPUT1" value: "INPUT1" }
  output_map { key: "OUTPUT0" value: "OUTPUT0" }
} ] }
"""


# A Python model whose BLS call names `ab`'s version by a label.
BLS_LABEL_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

BLS_LABEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for r in requests:
            call = pb_utils.InferenceRequest(
                model_name="ab", model_version="canary", requested_output_names=["OUTPUT0"],
                inputs=[pb_utils.get_input_tensor_by_name(r, "INPUT0"),
                        pb_utils.get_input_tensor_by_name(r, "INPUT1")])
            answer = call.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            answers.append(pb_utils.InferenceResponse(
                [pb_utils.get_output_tensor_by_name(answer, "OUTPUT0")]))
        return answers
"""


def python_model(root: Path, name: str, versions: dict[int, tuple[int, str]], traffic: dict):
    """A Python model whose version v adds versions[v][0] after running
    versions[v][1] (a statement: a wait, a raise)."""
    (root / name).mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(PY_CONFIG)
    for v, (add, before) in versions.items():
        (root / name / str(v)).mkdir()
        (root / name / str(v) / "model.py").write_text(PLUS.format(add=add, before=before or "pass"))
    (root / name / "traffic.json").write_text(json.dumps(traffic))


def shadow_gate(tmp: Path) -> Path:
    return tmp / "shadow-gate"


@pytest.fixture(scope="module")
def traffic_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("traffic")
    repo = tmp / "repo"
    repo.mkdir()
    for name in ("ab", "flip"):
        shutil.copytree(AB, repo / name)
        config = repo / name / "config.pbtxt"
        config.write_text(config.read_text().replace('"add_sub_versions"', f'"{name}"'))
    (repo / "ab" / "traffic.json").write_text(json.dumps({
        "labels": {"stable": 1, "canary": 2},
        "split": {"stable": 90, "canary": 10},
        "sticky_key": "user",
        "log_tensors": 0.5,
    }))
    (repo / "flip" / "traffic.json").write_text(json.dumps({
        "labels": {"stable": 1}, "split": {"stable": 1}}))
    (repo / "ab_pipeline" / "1").mkdir(parents=True)
    (repo / "ab_pipeline" / "config.pbtxt").write_text(ENSEMBLE)
    (repo / "ab_bls" / "1").mkdir(parents=True)
    (repo / "ab_bls" / "config.pbtxt").write_text(BLS_LABEL_CONFIG)
    (repo / "ab_bls" / "1" / "model.py").write_text(BLS_LABEL)
    # The shadow version is held until the test opens its gate.
    python_model(repo, "shadowed", {1: (1, ""), 2: (2, f"wait_for({str(shadow_gate(tmp))!r})")},
                 {"split": {"1": 1}, "shadow": {"version": "2", "fraction": 1.0, "queue": 2}})
    python_model(repo, "failing_shadow", {1: (1, ""), 2: (2, "raise RuntimeError('shadow broke')")},
                 {"split": {"1": 1}, "shadow": {"version": "2", "fraction": 1.0}})
    log = tmp / "routes.jsonl"
    server = start_server(tmp, [repo], ["--model-control-mode=explicit", "--load-model=*",
                                        f"--route-log={log}"])
    yield server, log
    shadow_gate(tmp).touch()
    stop_server(server)


def ab_inputs(module):
    a = np.array([5, 5, 5, 5], dtype=np.float32)
    b = np.array([1, 2, 3, 4], dtype=np.float32)
    inputs = [module.InferInput("INPUT0", [4], "FP32"), module.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def version_of(result) -> int:
    """1 when the answer is a sum, 2 when it is a product."""
    out = result.as_numpy("OUTPUT0")
    return 1 if out[0] == 6 else 2


def test_labels_go_where_versions_go(traffic_server):
    server, _ = traffic_server
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    assert version_of(http.infer("ab", ab_inputs(httpclient), model_version="stable")) == 1
    assert version_of(http.infer("ab", ab_inputs(httpclient), model_version="canary")) == 2
    answer = grpc.infer("ab", ab_inputs(grpcclient), model_version="canary")
    assert version_of(answer) == 2
    assert answer.get_response().model_version == "2"
    assert grpc.is_model_ready("ab", "canary")
    assert http.get_model_metadata("ab", "canary")["versions"] == ["2"]
    assert http.get_model_metadata("ab")["labels"] == {"canary": "2", "stable": "1"}
    rows = {(r["name"], r.get("version")): r for r in http.get_model_repository_index()}
    assert rows[("ab", "1")]["labels"] == ["stable"]
    assert rows[("ab", "2")]["labels"] == ["canary"]
    # An ensemble step names its version by a label too, and so does a
    # Python model's BLS call.
    assert version_of(http.infer("ab_pipeline", ab_inputs(httpclient))) == 2
    assert version_of(http.infer("ab_bls", ab_inputs(httpclient))) == 2
    # An unknown label answers as an unknown version does.
    with pytest.raises(InferenceServerException, match="no version label 'beta'"):
        http.infer("ab", ab_inputs(httpclient), model_version="beta")
    with pytest.raises(InferenceServerException, match="no version label 'beta'") as refused:
        grpc.infer("ab", ab_inputs(grpcclient), model_version="beta")
    assert refused.value.status() == "StatusCode.NOT_FOUND"
    # A model without labels answers a word as Triton does.
    with pytest.raises(InferenceServerException, match="version string 'beta'"):
        grpc.infer("ab_pipeline", ab_inputs(grpcclient), model_version="beta")


def test_grpc_metadata_and_index_show_labels_where_triton_clients_skip_them(traffic_server, tmp_path):
    """The labels ride in fields numbered past Triton's (100): read with
    Nereid's own proto they are there, and tritonclient, which does not
    know them, still parses both answers."""
    import grpc as grpcio
    from google.protobuf import descriptor_pool, message_factory
    from test_proto_descriptors import compile_protos

    server, _ = traffic_server
    pool = descriptor_pool.DescriptorPool()
    for file in compile_protos(("grpc_service.proto",), tmp_path).file:
        pool.Add(file)

    def call(method: str, request_type: str, response_type: str, **fields):
        request = message_factory.GetMessageClass(pool.FindMessageTypeByName(request_type))(**fields)
        response = message_factory.GetMessageClass(pool.FindMessageTypeByName(response_type))
        with grpcio.insecure_channel(server.grpc_url) as channel:
            rpc = channel.unary_unary(f"/inference.GRPCInferenceService/{method}",
                                      request_serializer=lambda m: m.SerializeToString(),
                                      response_deserializer=response.FromString)
            return rpc(request, timeout=30)

    metadata = call("ModelMetadata", "inference.ModelMetadataRequest",
                    "inference.ModelMetadataResponse", name="ab")
    assert dict(metadata.labels) == {"canary": "2", "stable": "1"}
    index = call("RepositoryIndex", "inference.RepositoryIndexRequest",
                 "inference.RepositoryIndexResponse")
    rows = {(m.name, m.version): list(m.labels) for m in index.models}
    assert rows[("ab", "1")] == ["stable"] and rows[("ab", "2")] == ["canary"]
    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert client.get_model_metadata("ab").versions == ["1", "2"]
    assert {(m.name, m.version) for m in client.get_model_repository_index().models} >= {("ab", "1"), ("ab", "2")}


def test_a_split_follows_its_weights_over_10000_requests(traffic_server):
    server, log = traffic_server
    n = 10_000
    local = threading.local()

    def one(i: int) -> int:
        if not hasattr(local, "client"):
            local.client = httpclient.InferenceServerClient(server.http_url)
        return version_of(local.client.infer("ab", ab_inputs(httpclient), request_id=f"split-{i}"))

    with ThreadPoolExecutor(4) as pool:
        versions = list(pool.map(one, range(n)))
    canary = versions.count(2)
    expected = [0.9 * n, 0.1 * n]
    chi2 = sum((seen - e) ** 2 / e for seen, e in zip([n - canary, canary], expected))
    assert chi2 < CHI2_1DF, f"{canary} of {n} went to the canary"
    # Per-version statistics count them.
    stats = {s["version"]: s["inference_stats"]["success"]["count"]
             for s in requests.get(f"{server.base}/v2/models/ab/stats").json()["model_stats"]}
    assert stats["2"] >= canary and stats["1"] >= n - canary
    # The route log has a line per request, ids and all.
    def logged() -> list[dict]:
        lines = [json.loads(l) for l in log.read_text().splitlines() if l.strip()]
        split = [l for l in lines if l.get("id", "").startswith("split-")]
        return split if len(split) >= n else []

    split = wait_until(logged, f"{n} lines in the route log", interval_s=0.2)
    assert len(split) == n
    by_id = {l["id"]: l for l in split}
    assert by_id["split-7"]["model"] == "ab"
    assert by_id["split-7"]["routed_by"] == "weight"
    assert {l["version"] for l in split} == {"1", "2"}
    assert all(l["latency_us"] > 0 for l in split)
    sampled = [l for l in split if "inputs" in l]
    assert 0.4 * n < len(sampled) < 0.6 * n
    assert sampled[0]["inputs"][0]["data"] == [5, 5, 5, 5]
    assert len(sampled[0]["outputs"][0]["data"]) == 4


def test_sticky_keys_keep_a_caller_on_one_version(traffic_server):
    server, _ = traffic_server
    http = httpclient.InferenceServerClient(server.http_url)
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    seen = {}
    for user in range(200):
        key = f"user-{user}"
        got = {version_of(http.infer("ab", ab_inputs(httpclient), parameters={"user": key}))
               for _ in range(3)}
        got.add(version_of(grpc.infer("ab", ab_inputs(grpcclient), parameters={"user": key})))
        assert len(got) == 1, key
        seen[key] = got.pop()
    assert set(seen.values()) == {1, 2}
    # The nereid-routing-key header carries a key too.
    by_header = {version_of(http.infer("ab", ab_inputs(httpclient),
                                       headers={"nereid-routing-key": "user-3"}))
                 for _ in range(5)}
    assert len(by_header) == 1


def perf_analyzer(port: int, model: str, csv_path: Path, seconds_window: int = 2000):
    args = ["timeout", "300", str(PERF_ANALYZER), "-m", model, "-i", "grpc",
            "-u", f"127.0.0.1:{port}", "--concurrency-range", "4",
            "--measurement-interval", str(seconds_window), "-s", "50", "-r", "6",
            "--shape", "INPUT0:4", "--shape", "INPUT1:4", "-f", str(csv_path)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_label_flips_and_rollbacks_under_load_lose_no_request(traffic_server, tmp_path):
    server, _ = traffic_server
    before = requests.get(f"{server.base}/v2/models/flip/stats").json()["model_stats"]
    failed_before = sum(s["inference_stats"]["fail"]["count"] for s in before)
    load = perf_analyzer(server.grpc_port, "flip", tmp_path / "flip.csv")
    flips = 0
    time.sleep(1)
    while load.poll() is None:
        moved = requests.post(f"{server.base}/v2/models/flip/traffic",
                              json={"labels": {"stable": 2 if flips % 2 == 0 else 1}})
        assert moved.status_code == 200, moved.text
        flips += 1
        time.sleep(0.1)
        back = requests.post(f"{server.base}/v2/models/flip/traffic/rollback", json={"label": "stable"})
        assert back.status_code == 200, back.text
        flips += 1
        time.sleep(0.1)
    output = load.stdout.read()
    assert load.returncode == 0, output
    assert flips >= 10
    assert "error" not in output.lower(), output
    after = requests.get(f"{server.base}/v2/models/flip/stats").json()["model_stats"]
    assert sum(s["inference_stats"]["fail"]["count"] for s in after) == failed_before
    served = {s["version"]: s["inference_stats"]["success"]["count"] for s in after}
    assert served.get("1", 0) > 0 and served.get("2", 0) > 0, served


def py_input(module, value: int):
    i = module.InferInput("IN", [1], "INT32")
    i.set_data_from_numpy(np.array([value], dtype=np.int32))
    return [i]


def shadow_counts(server, model: str) -> dict[str, float]:
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    counts = {}
    for line in text.splitlines():
        if line.startswith("nereid_shadow_requests_total") and f'model="{model}"' in line:
            outcome = line.split('outcome="')[1].split('"')[0]
            counts[outcome] = float(line.rsplit(" ", 1)[1])
    return counts


def test_a_slow_shadow_never_slows_the_answers(traffic_server):
    server, log = traffic_server
    http = httpclient.InferenceServerClient(server.http_url)
    # The shadow copies are held until the gate opens, which it does only
    # after the answers: an answer that waited for its shadow would never
    # come (the client gives up, and the test fails).
    try:
        for i in range(10):
            answer = http.infer("shadowed", py_input(httpclient, i))
            assert answer.as_numpy("OUT")[0] == i + 1
            assert answer.get_response()["model_version"] == "1"
        # One copy runs, two wait, the rest are dropped.
        wait_until(lambda: shadow_counts(server, "shadowed").get("dropped", 0) >= 7,
                   "7 shadow copies dropped")
    finally:
        shadow_gate(log.parent).touch()


def test_a_failing_shadow_never_reaches_the_client(traffic_server):
    server, log = traffic_server
    http = httpclient.InferenceServerClient(server.http_url)
    for i in range(5):
        assert http.infer("failing_shadow", py_input(httpclient, i),
                          request_id=f"fs-{i}").as_numpy("OUT")[0] == i + 1
    wait_until(lambda: shadow_counts(server, "failing_shadow").get("failed", 0) >= 5,
               "5 failed shadow copies", interval_s=0.2)
    assert shadow_counts(server, "failing_shadow")["failed"] == 5
    lines = [json.loads(l) for l in log.read_text().splitlines() if '"kind":"shadow"' in l]
    failed = [l for l in lines if l["model"] == "failing_shadow"]
    assert failed and all(l["outcome"] == "shadow_failed" and "shadow broke" in l["detail"]
                          for l in failed)


def test_traffic_settings_through_the_endpoint_and_a_load(traffic_server):
    server, _ = traffic_server
    base = server.base
    view = requests.get(f"{base}/v2/models/ab/traffic").json()
    assert view["settings"]["labels"] == {"canary": 2, "stable": 1}
    assert view["shares"] == {"1": 0.9, "2": 0.1}
    refused = requests.post(f"{base}/v2/models/ab/traffic", json={"labels": {"stable": 9}})
    assert refused.status_code == 400
    assert "not loaded" in refused.json()["error"]
    # A load that carries only traffic settings moves a label, reloading nothing.
    http = httpclient.InferenceServerClient(server.http_url)
    moved = requests.post(f"{base}/v2/repository/models/ab/load",
                          json={"parameters": {"traffic": json.dumps({"labels": {"canary": 1}})}})
    assert moved.status_code == 200, moved.text
    assert http.get_model_metadata("ab")["labels"]["canary"] == "1"
    back = requests.post(f"{base}/v2/models/ab/traffic/rollback", json={"label": "canary"})
    assert back.json()["settings"]["labels"]["canary"] == 2
    # A fallback model the repository does not have is taken, with a warning.
    assert "fallback model is not in the model repository" not in server.log()
    missing = requests.post(f"{base}/v2/models/flip/traffic",
                            json={"fallback": {"model": "nowhere", "queue_ms": 50}})
    assert missing.status_code == 200, missing.text
    wait_until(lambda: "fallback model is not in the model repository" in server.log(),
               "the warning about a missing fallback model")
    requests.post(f"{base}/v2/models/flip/traffic", json={"fallback": None})
