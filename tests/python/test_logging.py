"""Triton's logging extension: `GET`/`POST /v2/logging` and gRPC `LogSettings`
through tritonclient, what the settings do to the log, `--log-file`, and the
answers to bad settings (the server keeps serving after each).

Real tritonserver 2.51 for comparison: the same settings, JSON types and
answers; a wrong type there is a 500 ("attempt to access JSON non-boolean as
boolean") where Nereid answers 400 naming the setting and the value; a
`log_file` change is refused with 501/UNIMPLEMENTED by both."""

from __future__ import annotations

import os
import re
import subprocess
import time

import grpc
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from conftest import REPO_ROOT, START_S, WAIT_S, start_server, stop_server

DEFAULTS = {
    "log_file": "",
    "log_info": True,
    "log_warning": True,
    "log_error": True,
    "log_verbose_level": 0,
    "log_format": "default",
}

# tritonserver's default layout: `I1203 18:17:07.927805 24728 file.rs:42] "..."`.
DEFAULT_LINE = re.compile(r'^[IWE]\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ [^ ]+:\d+\] ".*"$')
ISO_LINE = re.compile(r'^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ [IWE] \d+ [^ ]+:\d+\] ".*"$')


def simple_repository(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "simple").symlink_to(REPO_ROOT / "model_repository" / "simple")
    return repo


@pytest.fixture()
def logged(tmp_path):
    """A server of its own (the settings are process-wide), in explicit mode
    so that loading and unloading `simple` writes lines on demand."""
    s = start_server(tmp_path, [simple_repository(tmp_path)],
                     ["--model-control-mode=explicit", "--load-model=simple"])
    yield s
    assert stop_server(s) == 0, s.log()


def http_settings(server) -> dict:
    return httpclient.InferenceServerClient(server.http_url).get_log_settings()


def grpc_settings(server) -> dict:
    answer = grpcclient.InferenceServerClient(server.grpc_url).get_log_settings(as_json=True)
    return {k: next(iter(v.values())) for k, v in answer["settings"].items()}


def reload_simple(server) -> None:
    """Unloads and loads `simple`: INFO lines, and DEBUG ones when verbose."""
    client = httpclient.InferenceServerClient(server.http_url)
    client.unload_model("simple")
    client.load_model("simple")
    assert client.is_model_ready("simple")


def new_lines(server, before: int, wait_for: str | None = None) -> list[str]:
    """Log lines written after the first `before`; waits (bounded) for one
    containing `wait_for` when given, since the log is written asynchronously
    to the answer."""
    deadline = time.monotonic() + WAIT_S
    while True:
        lines = server.log().splitlines()[before:]
        if wait_for is None or any(wait_for in l for l in lines) or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def log_length(server) -> int:
    return len(server.log().splitlines())


def test_get_answers_tritons_settings_over_http_and_grpc(logged):
    body = requests.get(f"{logged.base}/v2/logging").json()
    assert body == DEFAULTS
    assert http_settings(logged) == DEFAULTS
    assert grpc_settings(logged) == DEFAULTS
    assert "logging" in requests.get(f"{logged.base}/v2").json()["extensions"]


def test_post_updates_the_given_settings_and_answers_all(logged):
    http = httpclient.InferenceServerClient(logged.http_url)
    answer = http.update_log_settings({"log_verbose_level": 2, "log_warning": False})
    assert answer == {**DEFAULTS, "log_verbose_level": 2, "log_warning": False}
    assert grpc_settings(logged) == answer
    grpc_client = grpcclient.InferenceServerClient(logged.grpc_url)
    answer = grpc_client.update_log_settings({"log_format": "ISO8601", "log_warning": True},
                                            as_json=True)
    got = {k: next(iter(v.values())) for k, v in answer["settings"].items()}
    assert got == {**DEFAULTS, "log_verbose_level": 2, "log_format": "ISO8601"}
    assert http_settings(logged) == got
    # An empty update only reads; unknown names are ignored, as in Triton.
    assert requests.post(f"{logged.base}/v2/logging", json={}).json() == got
    assert requests.post(f"{logged.base}/v2/logging", json={"no_such": 1}).json() == got


def test_log_info_switches_info_lines_off_and_on(logged):
    requests.post(f"{logged.base}/v2/logging", json={"log_info": False}).raise_for_status()
    before = log_length(logged)
    reload_simple(logged)
    time.sleep(0.3)
    assert not [l for l in new_lines(logged, before) if l.startswith("I")], logged.log()

    requests.post(f"{logged.base}/v2/logging", json={"log_info": True}).raise_for_status()
    before = log_length(logged)
    reload_simple(logged)
    lines = new_lines(logged, before, wait_for="model ready")
    assert any(l.startswith("I") and "model ready" in l for l in lines), lines


def test_verbose_level_adds_debug_lines(logged):
    before = log_length(logged)
    reload_simple(logged)
    quiet = new_lines(logged, before, wait_for="model ready")
    assert not any("instance ready" in l for l in quiet), quiet

    grpcclient.InferenceServerClient(logged.grpc_url).update_log_settings({"log_verbose_level": 1})
    before = log_length(logged)
    reload_simple(logged)
    assert any("instance ready" in l for l in new_lines(logged, before, wait_for="instance ready"))


def test_log_format_switches_the_layout(logged):
    before = log_length(logged)
    reload_simple(logged)
    lines = [l for l in new_lines(logged, before, wait_for="model ready") if "model ready" in l]
    assert lines and all(DEFAULT_LINE.match(l) for l in lines), lines

    requests.post(f"{logged.base}/v2/logging", json={"log_format": "ISO8601"}).raise_for_status()
    before = log_length(logged)
    reload_simple(logged)
    lines = [l for l in new_lines(logged, before, wait_for="model ready") if "model ready" in l]
    assert lines and all(ISO_LINE.match(l) for l in lines), lines


def test_log_file_takes_the_output(tmp_path):
    path = tmp_path / "server.log"
    s = start_server(tmp_path, [simple_repository(tmp_path)], [f"--log-file={path}"])
    try:
        assert http_settings(s)["log_file"] == str(path)
        assert grpc_settings(s)["log_file"] == str(path)
        assert "started HTTP endpoint" in path.read_text()
        assert "started HTTP endpoint" not in s.log()
        # As in Triton, the network may not move the log.
        r = requests.post(f"{s.base}/v2/logging", json={"log_file": str(tmp_path / "other")})
        assert r.status_code == 501
        assert "can not be updated" in r.json()["error"]
        with pytest.raises(InferenceServerException) as e:
            grpcclient.InferenceServerClient(s.grpc_url).update_log_settings({"log_file": "x"})
        assert e.value.status() == "StatusCode.UNIMPLEMENTED"
        assert not (tmp_path / "other").exists()
    finally:
        assert stop_server(s) == 0


def test_an_unwritable_log_file_stops_startup_naming_it(tmp_path):
    bad = tmp_path / "no" / "such" / "folder" / "x.log"
    with pytest.raises(RuntimeError) as e:
        start_server(tmp_path, [simple_repository(tmp_path)], [f"--log-file={bad}"])
    assert str(bad) in str(e.value)


BAD_BODIES = [
    ({"log_info": "false"}, "'log_info'"),
    ({"log_warning": 1}, "'log_warning'"),
    ({"log_error": [True]}, "'log_error'"),
    ({"log_verbose_level": -1}, "'log_verbose_level'"),
    ({"log_verbose_level": 1.5}, "'log_verbose_level'"),
    ({"log_verbose_level": "1"}, "'log_verbose_level'"),
    ({"log_verbose_level": True}, "'log_verbose_level'"),
    ({"log_verbose_level": 2**32}, "'log_verbose_level'"),
    ({"log_format": "xml"}, "log_format, got: xml"),
    ({"log_format": "iso8601"}, "log_format, got: iso8601"),
    ({"log_format": 1}, "'log_format'"),
    ({"log_info": False, "log_format": True}, "'log_format'"),
]


@pytest.mark.parametrize("body,named", BAD_BODIES, ids=[repr(b) for b, _ in BAD_BODIES])
def test_bad_http_settings_are_400_and_change_nothing(logged, body, named):
    r = requests.post(f"{logged.base}/v2/logging", json=body)
    assert r.status_code == 400, r.text
    assert named in r.json()["error"], r.json()
    assert http_settings(logged) == DEFAULTS
    assert requests.get(f"{logged.base}/v2/health/ready").status_code == 200


@pytest.mark.parametrize("raw", [b"not json", b"", b"[1]", b'"log_info"'])
def test_bodies_that_are_no_settings_object_are_400(logged, raw):
    r = requests.post(f"{logged.base}/v2/logging", data=raw)
    assert r.status_code == 400, r.text
    assert r.json()["error"]
    assert http_settings(logged) == DEFAULTS


BAD_GRPC = [
    ("log_info", "string_param", "false"),
    ("log_warning", "uint32_param", 0),
    ("log_error", None, None),
    ("log_verbose_level", "bool_param", True),
    ("log_verbose_level", "string_param", "1"),
    ("log_format", "bool_param", True),
    ("log_format", "string_param", "xml"),
]


@pytest.mark.parametrize("name,kind,value", BAD_GRPC, ids=[f"{n}-{k}" for n, k, _ in BAD_GRPC])
def test_bad_grpc_settings_are_invalid_argument(logged, name, kind, value):
    request = service_pb2.LogSettingsRequest()
    if kind is None:
        request.settings[name].CopyFrom(service_pb2.LogSettingsRequest.SettingValue())
    else:
        setattr(request.settings[name], kind, value)
    with grpc.insecure_channel(logged.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as e:
            stub.LogSettings(request, timeout=30)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert name in e.value.details()
    assert grpc_settings(logged) == DEFAULTS
    assert grpcclient.InferenceServerClient(logged.grpc_url).is_server_ready()


def test_flags_set_the_starting_settings(tmp_path):
    s = start_server(tmp_path, [simple_repository(tmp_path)],
                     ["--log-info=false", "--log-verbose=1", "--log-format=ISO8601",
                      "--log-warning", "false"])
    try:
        expected = {**DEFAULTS, "log_info": False, "log_warning": False,
                    "log_verbose_level": 1, "log_format": "ISO8601"}
        assert http_settings(s) == expected
        assert grpc_settings(s) == expected
    finally:
        assert stop_server(s) == 0
    # Verbose lines are written as I lines, as Triton's are; INFO ones are off.
    log = s.log()
    assert "started HTTP endpoint" not in log and "model ready" not in log, log
    assert "instance ready" in log, log


def test_a_bad_log_format_flag_is_refused():
    binary = os.environ.get("NEREID_BIN", str(REPO_ROOT / "target/debug/nereid"))
    done = subprocess.run([binary, "--model-repository=/tmp", "--log-format=xml"],
                          capture_output=True, text=True, timeout=START_S)
    assert done.returncode != 0
    assert "--log-format" in done.stderr
