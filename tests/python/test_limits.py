"""Limits on what one client may take, each with its flag and a clear
answer, the server serving on after each: the HTTP body cap
(`--http-max-input-size`, tritonserver's flag) also for the size after gzip
decompression, a stalled request body (`--http-read-timeout-secs`), the
connection cap (`--http-max-connections`: one past it waits for a free
slot), and gRPC's message (`--grpc-max-message-size`) and metadata
(`--grpc-max-header-list-size`) caps. Triton has no limits but the first."""

from __future__ import annotations

import gzip
import shutil
import socket
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from conftest import REPO_ROOT, start_server, stop_server

MIB = 1024 * 1024


def identity_repository(tmp):
    repo = tmp / "repo"
    shutil.copytree(REPO_ROOT / "tests" / "models" / "identity_fp32", repo / "identity_fp32")
    return repo


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("limits")
    s = start_server(tmp, [identity_repository(tmp)], [
        f"--http-max-input-size={MIB}",
        f"--grpc-max-message-size={MIB}",
        "--grpc-max-header-list-size=16384",
    ])
    yield s
    assert stop_server(s) == 0, s.log()


# The read timeout of `impatient`, and how long its tests give the server
# to act on it: generous on a busy machine, and still well short of the
# default (60 s), so that the flag is seen to work.
READ_TIMEOUT_S = 1
CLOSED_WITHIN_S = 30


@pytest.fixture(scope="module")
def impatient(tmp_path_factory):
    """A one-second read timeout, on its own server: on `srv` a client
    that stalls on a busy machine would meet it in the tests of other
    limits."""
    tmp = tmp_path_factory.mktemp("impatient")
    s = start_server(tmp, [identity_repository(tmp)], [f"--http-read-timeout-secs={READ_TIMEOUT_S}"])
    yield s
    assert stop_server(s) == 0, s.log()


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    """Three HTTP connections at most, and the default read timeout (60 s),
    so that idle connections hold their slots for the test's length."""
    tmp = tmp_path_factory.mktemp("capped")
    repo = tmp / "repo"
    shutil.copytree(REPO_ROOT / "tests" / "models" / "identity_fp32", repo / "identity_fp32")
    s = start_server(tmp, [repo], ["--http-max-connections=3"])
    yield s
    assert stop_server(s) == 0, s.log()


def infer_body(elements: int) -> bytes:
    return (b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,%d],"data":[' % elements
            + b",".join([b"0"] * elements) + b"]}]}")


def serves(srv) -> bool:
    r = requests.post(f"{srv.base}/v2/models/identity_fp32/infer", data=infer_body(4), timeout=30)
    return r.status_code == 200


def test_a_body_over_the_cap_is_413(srv):
    r = requests.post(f"{srv.base}/v2/models/identity_fp32/infer", data=b" " * (MIB + 1))
    assert r.status_code == 413, r.text
    assert serves(srv)


def test_a_declared_length_over_the_cap_is_413_before_the_body(srv):
    with raw_connection(srv) as sock:
        sock.sendall(b"POST /v2/models/identity_fp32/infer HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: %d\r\n\r\n{\"inputs\"" % (100 * MIB))
        sock.settimeout(10)
        answer = b""
        while b"}" not in answer:
            chunk = sock.recv(4096)
            assert chunk, answer
            answer += chunk
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head.split(b" ")[1] == b"413", head
    assert body.decode() == (
        '{"error":"request size of %d bytes exceeds the maximum allowed input size of %d bytes. '
        'Use --http-max-input-size to increase the limit."}' % (100 * MIB, MIB))
    assert serves(srv)


def test_the_cap_holds_after_decompression(srv):
    # 64 KiB of gzip that would expand to 64 MiB.
    bomb = gzip.compress(infer_body(4)[:-3] + b" " * (64 * MIB) + b"]}]}", compresslevel=9)
    assert len(bomb) < MIB // 4
    started = time.monotonic()
    r = requests.post(f"{srv.base}/v2/models/identity_fp32/infer", data=bomb,
                      headers={"Content-Encoding": "gzip"}, timeout=30)
    assert r.status_code == 413, r.text[:200]
    assert time.monotonic() - started < 10
    small = gzip.compress(infer_body(4))
    r = requests.post(f"{srv.base}/v2/models/identity_fp32/infer", data=small,
                      headers={"Content-Encoding": "gzip"})
    assert r.status_code == 200, r.text


def raw_connection(srv) -> socket.socket:
    return socket.create_connection(("127.0.0.1", srv.http_port), timeout=30)


def test_a_stalled_body_fails_and_frees_its_connection(impatient):
    with raw_connection(impatient) as sock:
        sock.sendall(b"POST /v2/models/identity_fp32/infer HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"inputs\"")
        sock.settimeout(CLOSED_WITHIN_S)
        answer = sock.recv(4096)
        assert answer == b"" or answer.split(b" ")[1] in (b"400", b"408", b"413"), answer[:100]
    assert serves(impatient)


def test_a_half_sent_request_head_or_an_idle_connection_is_closed(impatient):
    # Neither can hold a connection (and its slot) past the read timeout.
    with raw_connection(impatient) as idle, raw_connection(impatient) as half:
        half.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        for sock in (idle, half):
            sock.settimeout(CLOSED_WITHIN_S)
            answer = sock.recv(4096)
            assert answer == b"" or answer.split(b" ")[1] == b"408", answer[:100]
        assert time.monotonic() - started < CLOSED_WITHIN_S
    assert serves(impatient)


def test_a_connection_past_the_cap_waits_for_a_free_slot(capped):
    srv = capped
    held = [raw_connection(srv) for _ in range(3)]
    try:
        # Every slot is taken by an idle connection: a new request waits.
        with pytest.raises(requests.exceptions.ReadTimeout):
            requests.get(f"{srv.base}/v2/health/live", timeout=1)
        held.pop().close()
        # The freed slot goes to the next connection: a request now is
        # answered (it waits, if it must, for the server to see the close).
        assert requests.get(f"{srv.base}/v2/health/live", timeout=30).status_code == 200
    finally:
        for sock in held:
            sock.close()
    assert serves(srv)


def grpc_infer(srv, elements: int, headers=None):
    client = grpcclient.InferenceServerClient(srv.grpc_url)
    x = grpcclient.InferInput("INPUT0", [1, elements], "FP32")
    x.set_data_from_numpy(np.zeros((1, elements), np.float32))
    return client.infer("identity_fp32", [x], headers=headers)


def test_grpc_messages_over_the_cap_are_refused(srv):
    with pytest.raises(InferenceServerException) as err:
        grpc_infer(srv, MIB // 4 + 1024)
    assert str(err.value.status()) == "StatusCode.OUT_OF_RANGE", err.value
    assert "too large" in err.value.message(), err.value.message()
    assert grpc_infer(srv, 16).as_numpy("OUTPUT0").shape == (1, 16)


def test_grpc_metadata_over_the_cap_is_refused(srv):
    with pytest.raises(InferenceServerException):
        grpc_infer(srv, 4, headers={"big": "x" * 65536})
    assert grpc_infer(srv, 4).as_numpy("OUTPUT0").shape == (1, 4)
