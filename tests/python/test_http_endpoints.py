"""Health, metadata, config, statistics and the repository index over
HTTP, checked with tritonclient (also its asyncio client) and with raw
requests."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient


def test_health(server):
    assert requests.get(f"{server.base}/v2/health/live").status_code == 200
    ready = requests.get(f"{server.base}/v2/health/ready")
    assert ready.status_code == 200 and ready.content == b""
    with httpclient.InferenceServerClient(server.http_url) as c:
        assert c.is_server_live() and c.is_server_ready()
        assert c.is_model_ready("simple")
        assert c.is_model_ready("add_sub_versions", "1")
        assert not c.is_model_ready("nope")


def test_server_metadata_lists_real_extensions(server):
    body = requests.get(f"{server.base}/v2").json()
    # Triton's name (its client examples check it), keys in Triton's order;
    # Nereid says who it is in its startup log line.
    assert body["name"] == "triton"
    assert list(body) == ["name", "version", "extensions"]
    assert "Nereid " in server.log()
    assert "binary_tensor_data" in body["extensions"]
    assert "statistics" in body["extensions"]
    assert "system_shared_memory" in body["extensions"]
    assert "cuda_shared_memory" not in body["extensions"]


def test_model_metadata(server):
    with httpclient.InferenceServerClient(server.http_url) as c:
        meta = c.get_model_metadata("simple")
    assert meta == {
        "name": "simple",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]},
            {"name": "INPUT1", "datatype": "INT32", "shape": [-1, 16]},
        ],
        "outputs": [
            {"name": "OUTPUT0", "datatype": "INT32", "shape": [-1, 16]},
            {"name": "OUTPUT1", "datatype": "INT32", "shape": [-1, 16]},
        ],
    }
    versions = requests.get(f"{server.base}/v2/models/add_sub_versions").json()["versions"]
    assert versions == ["1", "2"]
    # Asked for one version, Triton lists that one alone.
    for version in ("1", "2"):
        meta = requests.get(f"{server.base}/v2/models/add_sub_versions/versions/{version}").json()
        assert meta["versions"] == [version]
        assert list(meta) == ["name", "versions", "platform", "inputs", "outputs"]
    r = requests.get(f"{server.base}/v2/models/add_sub_versions/versions/3")
    assert r.status_code == 404
    assert r.json() == {"error": "Request for unknown model: 'add_sub_versions' version 3 is not found"}
    string = requests.get(f"{server.base}/v2/models/string_identity").json()
    assert string["inputs"][0]["datatype"] == "BYTES"


def test_model_config_renders_like_triton(server):
    with httpclient.InferenceServerClient(server.http_url) as c:
        config = c.get_model_config("simple")
    assert config["name"] == "simple"
    assert config["platform"] == "onnxruntime_onnx"
    assert config["backend"] == "onnxruntime"
    assert config["max_batch_size"] == 8
    assert config["input"][0]["data_type"] == "TYPE_INT32"
    assert config["input"][0]["dims"] == [16]
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    # Triton gives ONNX Runtime models two CPU instances by default.
    assert config["instance_group"][0]["count"] == 2
    assert config["version_policy"] == {"latest": {"num_versions": 1}}


def test_autofilled_config(server):
    config = requests.get(f"{server.base}/v2/models/autofill_simple/config").json()
    assert config["backend"] == "onnxruntime"
    assert {i["name"] for i in config["input"]} == {"INPUT0", "INPUT1"}
    assert config["max_batch_size"] > 0


def test_statistics_count_inferences(server):
    with httpclient.InferenceServerClient(server.http_url) as c:
        before = c.get_inference_statistics("identity_int32")["model_stats"][0]
        data = np.arange(6, dtype=np.int32).reshape(2, 3)
        t = httpclient.InferInput("INPUT0", [2, 3], "INT32")
        t.set_data_from_numpy(data)
        c.infer("identity_int32", [t])
        after = c.get_inference_statistics("identity_int32")["model_stats"][0]
    assert after["inference_count"] == before["inference_count"] + 2
    assert after["execution_count"] == before["execution_count"] + 1
    stats = after["inference_stats"]
    assert stats["success"]["count"] == before["inference_stats"]["success"]["count"] + 1
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert stats[key]["ns"] > 0, key
    assert after["last_inference"] > 0
    assert any(b["batch_size"] == 2 for b in after["batch_stats"])
    everything = requests.get(f"{server.base}/v2/models/stats").json()["model_stats"]
    assert {"simple", "mlp"} <= {m["name"] for m in everything}


def test_repository_index(server):
    rows = requests.post(f"{server.base}/v2/repository/index", json={}).json()
    by_name = {(r["name"], r.get("version")): r for r in rows}
    assert by_name[("simple", "1")]["state"] == "READY"
    assert by_name[("add_sub_versions", "2")]["state"] == "READY"
    ready = requests.post(f"{server.base}/v2/repository/index", json={"ready": True}).json()
    assert all(r["state"] == "READY" for r in ready)


def test_metrics(server):
    text = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics").text
    assert 'nv_inference_request_success{model="simple",version="1"}' in text
    assert "nv_inference_exec_count" in text


def test_load_outside_explicit_mode_answers_as_triton(server):
    r = requests.post(f"{server.base}/v2/repository/models/simple/load")
    assert r.status_code == 503
    assert r.json()["error"] == "explicit model load / unload is not allowed if polling is enabled"


def test_trace_settings_have_no_per_version_path(server):
    # Triton routes trace settings per model only.
    r = requests.get(f"{server.base}/v2/models/simple/versions/1/trace/setting")
    assert r.status_code == 404
    assert requests.get(f"{server.base}/v2/models/simple/trace/setting").status_code == 200



def test_the_asyncio_client_reads_every_answer(server):
    """aiohttp asks for gzip but tritonclient.http.aio inflates only infer
    responses: everything else must come plain, as from Triton."""

    async def calls():
        async with aioclient.InferenceServerClient(server.http_url) as c:
            assert (await c.get_server_metadata())["name"] == "triton"
            stats = await c.get_inference_statistics("simple")
            assert stats["model_stats"][0]["name"] == "simple"
            assert (await c.get_model_metadata("simple"))["versions"] == ["1"]
            assert (await c.get_model_config("simple"))["max_batch_size"] == 8
            index = await c.get_model_repository_index()
            assert {"name": "simple", "version": "1", "state": "READY"} in index
            a = np.arange(16, dtype=np.int32).reshape(1, 16)
            inputs = []
            for name in ("INPUT0", "INPUT1"):
                t = aioclient.InferInput(name, [1, 16], "INT32")
                t.set_data_from_numpy(a)
                inputs.append(t)
            for algorithm in (None, "gzip", "deflate"):
                result = await c.infer("simple", inputs, request_compression_algorithm=algorithm,
                                       response_compression_algorithm=algorithm)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)

    asyncio.run(calls())
