"""Every bad request gets a clear error with Triton's status code, and the
server keeps serving afterwards. Where Triton answers 500 for a client's
mistake (JSON parse and schema errors) Nereid answers 400: see
docs/compatibility.md."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
import requests

ONES = [1] * 16


def tensor(name="INPUT0", shape=(1, 16), datatype="INT32", data=None):
    return {"name": name, "shape": list(shape), "datatype": datatype, "data": ONES if data is None else data}


def body(*inputs, **extra):
    return json.dumps({"inputs": list(inputs), **extra}).encode()


GOOD = body(tensor("INPUT0"), tensor("INPUT1"))

# (case, path, body, headers, expected status, expected message fragment)
CASES = [
    ("malformed JSON", "simple", b'{"inputs": [', {}, 400, "failed to parse the request JSON"),
    ("inputs not an array", "simple", b'{"inputs": 3}', {}, 400, "failed to parse the request JSON"),
    ("missing datatype", "simple", b'{"inputs": [{"name": "INPUT0", "shape": [1, 16], "data": []}]}', {}, 400, "datatype"),
    ("shape not ints", "simple", body(tensor(shape=("a", 16)), tensor("INPUT1")), {}, 400, "failed to parse"),
    ("negative dim", "simple", body(tensor(shape=(-1, 16)), tensor("INPUT1")), {}, 400, "negative dimension"),
    ("unknown datatype", "simple", body(tensor(datatype="INT33"), tensor("INPUT1")), {}, 400, "invalid datatype"),
    ("unknown model", "nope", GOOD, {}, 404, "Request for unknown model: 'nope' is not found"),
    ("unknown version", "simple/versions/7", GOOD, {}, 404, "'simple' version 7 is not found"),
    ("missing input", "simple", body(tensor("INPUT0")), {}, 400, "missing required input(s) ['INPUT1']"),
    ("duplicated input", "simple", body(tensor("INPUT0"), tensor("INPUT0"), tensor("INPUT1")), {}, 400, "input 'INPUT0' already exists in request"),
    ("unknown input", "simple", body(tensor("INPUT0"), tensor("INPUT1"), tensor("INPUT9")), {}, 400, "INPUT9"),
    ("wrong datatype", "simple", body(tensor(datatype="FP32", data=[1.0] * 16), tensor("INPUT1")), {}, 400, "data-type is 'FP32', but model 'simple' expects 'INT32'"),
    ("wrong shape", "simple", body(tensor(shape=(1, 15), data=[1] * 15), tensor("INPUT1")), {}, 400, "unexpected shape for input 'INPUT0'"),
    ("wrong rank", "simple", body(tensor(shape=(1, 16, 1)), tensor("INPUT1")), {}, 400, "unexpected shape for input 'INPUT0'"),
    ("batch too large", "simple", body(tensor(shape=(9, 16), data=[1] * 144), tensor("INPUT1", shape=(9, 16), data=[1] * 144)), {}, 400, "batch-size must be <= 8"),
    ("data shorter than shape", "simple", body(tensor(data=[1] * 15), tensor("INPUT1")), {}, 400, "'data'"),
    ("data out of range", "simple", body(tensor(data=[2**40] * 16), tensor("INPUT1")), {}, 400, "not a valid INT32"),
    ("unknown output", "simple", body(tensor("INPUT0"), tensor("INPUT1"), outputs=[{"name": "OUTPUT9"}]), {}, 400, "unexpected inference output 'OUTPUT9'"),
]


def binary_request(inputs, trailer=b"", header_length_delta=0):
    """inputs: (name, shape, datatype, raw bytes, declared size or None)."""
    header = {"inputs": [
        {"name": n, "shape": list(s), "datatype": d, "parameters": {"binary_data_size": len(raw) if size is None else size}}
        for n, s, d, raw, size in inputs
    ]}
    head = json.dumps(header).encode()
    payload = head + b"".join(raw for *_, raw, _ in inputs) + trailer
    return payload, {"Inference-Header-Content-Length": str(len(head) + header_length_delta)}


I32 = np.ones((1, 16), dtype=np.int32).tobytes()


def framed(*elements):
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


BINARY_CASES = [
    ("binary size exceeds body", "simple", *binary_request([("INPUT0", (1, 16), "INT32", I32, None), ("INPUT1", (1, 16), "INT32", I32[:32], 64)]), 400, "unexpected size for input 'INPUT1'"),
    ("huge declared size", "simple", *binary_request([("INPUT0", (1, 16), "INT32", I32, 2**40), ("INPUT1", (1, 16), "INT32", I32, None)]), 400, "unexpected size for input 'INPUT0'"),
    ("sizes do not add up", "simple", *binary_request([("INPUT0", (1, 16), "INT32", I32, 60), ("INPUT1", (1, 16), "INT32", I32, 68)]), 400, "byte size mismatch"),
    ("extra bytes after the inputs", "simple", *binary_request([("INPUT0", (1, 16), "INT32", I32, None), ("INPUT1", (1, 16), "INT32", I32, None)], trailer=b"xx"), 400, "unexpected additional input data"),
    ("header length beyond the body", "simple", *binary_request([("INPUT0", (1, 16), "INT32", I32, None), ("INPUT1", (1, 16), "INT32", I32, None)], header_length_delta=10_000), 400, "inference header size"),
    ("BYTES length past the end", "string_identity", *binary_request([("INPUT0", (1, 1), "BYTES", struct.pack("<I", 100) + b"abc", None)]), 400, "BYTES"),
    ("BYTES truncated length prefix", "string_identity", *binary_request([("INPUT0", (1, 2), "BYTES", framed(b"a") + b"\x01\x00", None)]), 400, "BYTES"),
    ("BYTES element count differs from shape", "string_identity", *binary_request([("INPUT0", (1, 3), "BYTES", framed(b"a", b"b"), None)]), 400, "expected 3 string elements"),
]


def assert_still_serving(server):
    r = requests.post(f"{server.base}/v2/models/simple/infer", data=GOOD)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"][0]["data"] == [2] * 16


@pytest.mark.parametrize("case,model,payload,headers,status,message", CASES, ids=[c[0] for c in CASES])
def test_json_bad_input(server, case, model, payload, headers, status, message):
    r = requests.post(f"{server.base}/v2/models/{model}/infer", data=payload, headers=headers)
    assert r.status_code == status, r.text
    assert message in r.json()["error"], r.json()
    assert_still_serving(server)


@pytest.mark.parametrize("case,model,payload,headers,status,message", BINARY_CASES, ids=[c[0] for c in BINARY_CASES])
def test_binary_bad_input(server, case, model, payload, headers, status, message):
    r = requests.post(f"{server.base}/v2/models/{model}/infer", data=payload, headers=headers)
    assert r.status_code == status, r.text
    assert message in r.json()["error"], r.json()
    assert_still_serving(server)


def test_model_ready_for_unknown_model(server):
    r = requests.get(f"{server.base}/v2/models/nope/ready")
    assert r.status_code == 400
    assert r.json() == {"error": "Model version not ready"}


def test_unknown_paths_and_methods(server):
    assert requests.get(f"{server.base}/v2/nothing").status_code == 404
    assert requests.get(f"{server.base}/v2/models/simple/versions/abc").status_code == 404
    r = requests.get(f"{server.base}/v2/models/simple/infer")
    assert r.status_code == 405 and r.json() == {"error": "Method Not Allowed"}


def test_stats_of_unknown_model(server):
    r = requests.get(f"{server.base}/v2/models/nope/stats")
    assert r.status_code == 400
    assert r.json()["error"] == "requested model 'nope' is not available"
