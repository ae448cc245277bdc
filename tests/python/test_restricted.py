"""Restricted APIs: tritonserver's `--http-restricted-api` and
`--grpc-restricted-protocol` (`<groups>:<header>=<value>`). A request to a
restricted group without the header and its value touches nothing: HTTP
answers 403 and gRPC UNAVAILABLE, in Triton's words (checked against
Triton 2.51; docs/triton-reference.md). gRPC clients send the header as
`triton-grpc-protocol-<header>`, as Triton asks."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import REPO_ROOT, START_S, start_server, stop_server

GROUPS = ["health", "metadata", "inference", "shared-memory", "model-config",
          "model-repository", "statistics", "trace", "logging"]

# Every HTTP route Nereid serves, with the group Triton puts it in.
HTTP_ROUTES = [
    ("GET", "/v2/health/live", "health"),
    ("GET", "/v2/health/ready", "health"),
    ("GET", "/v2/models/simple/ready", "health"),
    ("GET", "/v2/models/simple/versions/1/ready", "health"),
    ("GET", "/v2", "metadata"),
    ("GET", "/v2/models/simple", "metadata"),
    ("GET", "/v2/models/simple/versions/1", "metadata"),
    ("GET", "/v2/models/nosuch", "metadata"),
    ("GET", "/v2/models/simple/config", "model-config"),
    ("POST", "/v2/models/simple/infer", "inference"),
    ("POST", "/v2/models/simple/versions/1/infer", "inference"),
    ("GET", "/v2/models/stats", "statistics"),
    ("GET", "/v2/models/simple/stats", "statistics"),
    ("POST", "/v2/repository/index", "model-repository"),
    ("POST", "/v2/repository/models/simple/load", "model-repository"),
    ("POST", "/v2/repository/models/nosuch/unload", "model-repository"),
    ("GET", "/v2/systemsharedmemory/status", "shared-memory"),
    ("POST", "/v2/systemsharedmemory/unregister", "shared-memory"),
    ("GET", "/v2/cudasharedmemory/status", "shared-memory"),
    ("GET", "/v2/trace/setting", "trace"),
    ("GET", "/v2/models/simple/trace/setting", "trace"),
    ("GET", "/v2/logging", "logging"),
]


def simple_repo(tmp):
    repo = tmp / "repo"
    shutil.copytree(REPO_ROOT / "model_repository" / "simple", repo / "simple")
    return repo


def health_with_key(server) -> bool:
    return requests.get(f"{server.base}/v2/health/ready", headers={"h-health": "1"},
                        timeout=30).status_code == 200


@pytest.fixture(scope="module")
def every_group(tmp_path_factory):
    """Each group behind its own header, h-<group>=1, on both endpoints."""
    tmp = tmp_path_factory.mktemp("restricted_all")
    flags = []
    for group in GROUPS:
        flags += [f"--http-restricted-api={group}:h-{group}=1",
                  f"--grpc-restricted-protocol={group}:h-{group}=1"]
    s = start_server(tmp, [simple_repo(tmp)], flags + ["--model-control-mode=explicit",
                                                        "--load-model=simple"],
                     ready=health_with_key)
    yield s
    assert stop_server(s) == 0, s.log()


@pytest.fixture(scope="module")
def admin(tmp_path_factory):
    """Triton's documented example: the admin groups behind one key."""
    tmp = tmp_path_factory.mktemp("restricted_admin")
    s = start_server(tmp, [simple_repo(tmp)], [
        "--model-control-mode=explicit", "--load-model=simple",
        "--http-restricted-api=model-repository,shared-memory:admin-key=secret",
        "--http-restricted-api=inference:infer-key=k",
        "--grpc-restricted-protocol=model-repository,shared-memory:admin-key=secret",
        "--grpc-restricted-protocol=inference,health:infer-key=k",
    ])
    yield s
    assert stop_server(s) == 0, s.log()


@pytest.mark.parametrize("method, path, group", HTTP_ROUTES)
def test_every_http_route_is_in_tritons_group(every_group, method, path, group):
    url = every_group.base + path
    refused = requests.request(method, url, timeout=30)
    assert refused.status_code == 403, refused.text
    assert refused.json() == {"error": f"This API is restricted, expecting header 'h-{group}'"}
    # Another group's key does not open it; its own does.
    other = next(g for g in GROUPS if g != group)
    assert requests.request(method, url, headers={f"h-{other}": "1"}, timeout=30).status_code == 403
    allowed = requests.request(method, url, headers={f"h-{group}": "1"}, timeout=30)
    assert allowed.status_code != 403, allowed.text


def test_unknown_routes_stay_404(every_group):
    assert requests.get(every_group.base + "/v2/nothing", timeout=30).status_code == 404


def grpc_calls(client: grpcclient.InferenceServerClient):
    return {
        "health": lambda h: client.is_server_live(headers=h),
        "metadata": lambda h: client.get_server_metadata(headers=h),
        "model-config": lambda h: client.get_model_config("simple", headers=h),
        "statistics": lambda h: client.get_inference_statistics(headers=h),
        "model-repository": lambda h: client.get_model_repository_index(headers=h),
        "shared-memory": lambda h: client.get_system_shared_memory_status(headers=h),
        "trace": lambda h: client.get_trace_settings(headers=h),
        "logging": lambda h: client.get_log_settings(headers=h),
        "inference": lambda h: client.infer("simple", simple_inputs(grpcclient), headers=h),
    }


def simple_inputs(module):
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
        inputs.append(tensor)
    return inputs


def test_every_grpc_group_needs_its_prefixed_header(every_group):
    client = grpcclient.InferenceServerClient(every_group.grpc_url)
    for group, call in grpc_calls(client).items():
        with pytest.raises(InferenceServerException) as refused:
            call({f"h-{group}": "1"})  # without Triton's prefix
        assert refused.value.status() == "StatusCode.UNAVAILABLE", group
        assert refused.value.message() == (
            f"This protocol is restricted, expecting header 'triton-grpc-protocol-h-{group}'")
        call({f"triton-grpc-protocol-h-{group}": "1"})


def test_the_admin_key_guards_repository_and_shared_memory_over_http(admin):
    client = httpclient.InferenceServerClient(admin.http_url)
    with pytest.raises(InferenceServerException, match="expecting header 'admin-key'"):
        client.get_model_repository_index()
    with pytest.raises(InferenceServerException, match="expecting header 'admin-key'"):
        client.unload_model("simple", headers={"admin-key": "wrong"})
    with pytest.raises(InferenceServerException, match="expecting header 'admin-key'"):
        client.get_system_shared_memory_status()
    assert client.is_model_ready("simple"), "nothing was unloaded"
    # Header names are case-insensitive on HTTP; values are not.
    index = client.get_model_repository_index(headers={"Admin-Key": "secret"})
    assert [m["name"] for m in index] == ["simple"]
    assert client.get_system_shared_memory_status(headers={"admin-key": "secret"}) == []
    # Unrestricted groups need nothing.
    assert client.get_model_metadata("simple")["name"] == "simple"
    assert client.is_server_ready()


def test_inference_needs_its_own_key_over_http(admin):
    client = httpclient.InferenceServerClient(admin.http_url)
    with pytest.raises(InferenceServerException, match="expecting header 'infer-key'"):
        client.infer("simple", simple_inputs(httpclient), headers={"admin-key": "secret"})
    result = client.infer("simple", simple_inputs(httpclient), headers={"infer-key": "k"})
    assert result.as_numpy("OUTPUT0").tolist() == [list(range(0, 32, 2))]


def test_grpc_restrictions_with_tritonclient(admin):
    client = grpcclient.InferenceServerClient(admin.grpc_url)
    with pytest.raises(InferenceServerException, match="triton-grpc-protocol-infer-key"):
        client.is_server_live()
    assert client.is_server_live(headers={"triton-grpc-protocol-infer-key": "k"})
    with pytest.raises(InferenceServerException, match="triton-grpc-protocol-admin-key"):
        client.get_model_repository_index(headers={"triton-grpc-protocol-infer-key": "k"})
    index = client.get_model_repository_index(headers={"triton-grpc-protocol-admin-key": "secret"})
    assert [m.name for m in index.models] == ["simple"]
    assert client.get_model_metadata("simple").name == "simple"
    result = client.infer("simple", simple_inputs(grpcclient),
                          headers={"triton-grpc-protocol-infer-key": "k"})
    assert result.as_numpy("OUTPUT1").tolist() == [[0] * 16]


def test_a_stream_without_the_key_is_refused_and_with_it_serves(admin):
    import queue
    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(admin.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer("simple", simple_inputs(grpcclient))
    except InferenceServerException:
        pass  # the call already failed; the callback has the reason
    _, error = answers.get(timeout=30)
    assert error is not None and "triton-grpc-protocol-infer-key" in str(error)
    client.stop_stream()
    client.start_stream(callback=lambda result, error: answers.put((result, error)),
                        headers={"triton-grpc-protocol-infer-key": "k"})
    client.async_stream_infer("simple", simple_inputs(grpcclient))
    result, error = answers.get(timeout=30)
    client.stop_stream()
    assert error is None, error
    assert result.as_numpy("OUTPUT0").tolist() == [list(range(0, 32, 2))]


@pytest.mark.parametrize("flag, message", [
    ("--http-restricted-api=bogus:k=v", "unknown restricted api 'bogus'"),
    ("--http-restricted-api=health", "--http-restricted-api option format is "
     "'<config name>:<setting>=<value>'. Got health"),
    ("--grpc-restricted-protocol=health:k=", "--grpc-restricted-protocol option format is "
     "'<config name>:<setting>=<value>'. Got health:k="),
    ("--grpc-restricted-protocol=health,health:k=v",
     "restricted api 'health' can not be specified in multiple config groups"),
])
def test_a_bad_restriction_stops_the_server_with_tritons_reason(flag, message):
    binary = os.environ.get("NEREID_BIN", str(REPO_ROOT / "target/debug/nereid"))
    run = subprocess.run([binary, "--model-repository", str(REPO_ROOT / "model_repository"), flag],
                         capture_output=True, text=True, timeout=START_S)
    assert run.returncode != 0 and message in run.stderr, run.stderr
