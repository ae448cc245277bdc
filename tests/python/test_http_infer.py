"""Inference over HTTP with the real tritonclient: every example model,
every datatype, JSON and binary tensors, raw bodies, compression; where
Triton answers in its own way (half floats in JSON, encodings), its exact
answers, as real Triton 2.51 gave them."""

from __future__ import annotations

import gzip
import json
import zlib

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from models import IDENTITY_MODELS, mlp_reference, sample


@pytest.fixture(scope="module")
def client(server):
    with httpclient.InferenceServerClient(server.http_url) as c:
        yield c


def infer(client, model, inputs, binary, outputs=None, **kwargs):
    tensors = []
    for name, array, datatype in inputs:
        t = httpclient.InferInput(name, list(array.shape), datatype)
        t.set_data_from_numpy(array, binary_data=binary)
        tensors.append(t)
    requested = [httpclient.InferRequestedOutput(o, binary_data=binary) for o in outputs or []]
    return client.infer(model, tensors, outputs=requested or None, **kwargs)


@pytest.mark.parametrize("binary", [True, False])
def test_simple(client, binary):
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.int32) * 3
    result = infer(client, "simple", [("INPUT0", a, "INT32"), ("INPUT1", b, "INT32")], binary,
                   outputs=["OUTPUT0", "OUTPUT1"])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.get_response()["model_name"] == "simple"
    assert result.get_response()["model_version"] == "1"


@pytest.mark.parametrize("binary", [True, False])
def test_mlp_matches_onnxruntime(client, binary):
    x = sample(np.float32, (5, 256), seed=3)
    result = infer(client, "mlp", [("INPUT", x, "FP32")], binary, outputs=["OUTPUT"])
    np.testing.assert_allclose(result.as_numpy("OUTPUT"), mlp_reference(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("binary", [True, False])
def test_string_identity(client, binary):
    data = np.array([[b"hello", b"", b"w\xc3\xb6rld"]], dtype=np.object_)
    result = infer(client, "string_identity", [("INPUT0", data, "BYTES")], binary)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_bytes_with_nul_and_0xff_are_byte_exact(client):
    data = np.array([[b"\x00", b"a\x00b", b"\xff\xfe\x00\xff", bytes(range(256))]], dtype=np.object_)
    result = infer(client, "string_identity", [("INPUT0", data, "BYTES")], True, outputs=["OUTPUT0"])
    assert list(result.as_numpy("OUTPUT0").flatten()) == list(data.flatten())


@pytest.mark.parametrize("version,expected", [("1", [3, 4, 5, 6]), ("2", [2, 4, 6, 8])])
def test_two_versions(client, version, expected):
    a = np.array([1, 2, 3, 4], dtype=np.float32)
    b = np.array([2, 2, 2, 2], dtype=np.float32)
    result = infer(client, "add_sub_versions", [("INPUT0", a, "FP32"), ("INPUT1", b, "FP32")], True,
                   model_version=version)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.array(expected, dtype=np.float32))
    assert result.get_response()["model_version"] == version


def test_unversioned_request_goes_to_the_highest_version(client):
    a = np.array([1, 2, 3, 4], dtype=np.float32)
    result = infer(client, "add_sub_versions", [("INPUT0", a, "FP32"), ("INPUT1", a, "FP32")], True)
    assert result.get_response()["model_version"] == "2"


@pytest.mark.parametrize("model,datatype,dtype", IDENTITY_MODELS)
@pytest.mark.parametrize("binary", [True, False])
def test_every_datatype(client, model, datatype, dtype, binary):
    if not binary and datatype == "FP16":
        pytest.skip("Triton takes FP16 as binary data only: test_half_floats_travel_in_binary_only")
    if not binary and datatype == "BYTES":
        data = np.array([[b"abc", b"", "é".encode()]], dtype=np.object_)
    else:
        data = sample(dtype, (2, 3), seed=7)
    result = infer(client, model, [("INPUT0", data, datatype)], binary)
    out = result.as_numpy("OUTPUT0")
    if dtype is np.object_:
        assert list(out.flatten()) == list(data.flatten())
    else:
        np.testing.assert_array_equal(out, data)
        assert out.dtype == data.dtype


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_request_and_response(client, algorithm):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    tensors = []
    for name in ("INPUT0", "INPUT1"):
        t = httpclient.InferInput(name, [1, 16], "INT32")
        t.set_data_from_numpy(a)
        tensors.append(t)
    result = client.infer("simple", tensors, request_compression_algorithm=algorithm,
                          response_compression_algorithm=algorithm)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)


def test_request_id_is_echoed(client):
    a = np.zeros((1, 16), dtype=np.int32)
    result = infer(client, "simple", [("INPUT0", a, "INT32"), ("INPUT1", a, "INT32")], True, request_id="req-7")
    assert result.get_response()["id"] == "req-7"


# --- FP16 and BF16 in JSON: refused both ways, as Triton ------------------

def post_infer(server, model, body: bytes, headers=None, version=None):
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    return requests.post(f"{server.base}{path}", data=body, headers=headers or {})


def binary_body(inputs, outputs=None):
    """A JSON header naming each input's binary size, then the bytes."""
    head = {"inputs": [{"name": n, "shape": list(a.shape), "datatype": d,
                        "parameters": {"binary_data_size": a.nbytes}} for n, a, d in inputs]}
    if outputs is not None:
        head["outputs"] = outputs
    head = json.dumps(head).encode()
    return head + b"".join(a.tobytes() for _, a, _ in inputs), {
        "Inference-Header-Content-Length": str(len(head))}


def test_half_floats_travel_in_binary_only(client, server):
    x = np.array([[1.0, 2.5, -3.0]], dtype=np.float16)
    t = httpclient.InferInput("INPUT0", [1, 3], "FP16")
    t.set_data_from_numpy(x, binary_data=False)
    with pytest.raises(InferenceServerException) as e:
        client.infer("identity_fp16", [t])
    assert e.value.message() == ("receiving FP16 data via JSON is not supported. "
                                 "Please use the binary data format for input INPUT0")
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "BF16", "data": [1.0]}]}
    r = post_infer(server, "identity_bf16", json.dumps(body).encode())
    assert r.status_code == 400
    assert r.json() == {"error": "receiving BF16 data via JSON is not supported. "
                                 "Please use the binary data format for input INPUT0"}
    # Binary in, asked for as JSON out (by default, or by name).
    for outputs in (None, [{"name": "OUTPUT0"}]):
        data, headers = binary_body([("INPUT0", x, "FP16")], outputs)
        r = post_infer(server, "identity_fp16", data, headers)
        assert r.status_code == 400
        assert r.json() == {"error": "sending FP16 data via JSON is not supported. "
                                     "Please use the binary data format for output"}
    # An empty tensor carries no data to refuse.
    empty = {"inputs": [{"name": "INPUT0", "shape": [1, 0], "datatype": "FP16", "data": []}],
             "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}
    r = post_infer(server, "identity_fp16", json.dumps(empty).encode())
    assert r.status_code == 200 and r.json()["outputs"][0]["shape"] == [1, 0]
    # Binary both ways works.
    t.set_data_from_numpy(x, binary_data=True)
    out = client.infer("identity_fp16", [t], outputs=[httpclient.InferRequestedOutput("OUTPUT0")])
    np.testing.assert_array_equal(out.as_numpy("OUTPUT0"), x)


# --- a raw body: Inference-Header-Content-Length 0 -------------------------

RAW = {"Inference-Header-Content-Length": "0"}


def split_binary(r):
    length = int(r.headers["Inference-Header-Content-Length"])
    return json.loads(r.content[:length]), r.content[length:]


@pytest.mark.parametrize("version", [None, "1"])
def test_a_raw_body_is_the_data_of_the_models_one_input(server, version):
    x = np.array([1.5, 2.5, 3.5], dtype=np.float32)
    r = post_infer(server, "identity_fp32", x.tobytes(), RAW, version)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/octet-stream"
    header, data = split_binary(r)
    # A batching model gets a batch of 1; the variable dimension is what
    # the body makes it; every output comes back binary.
    assert header == {"model_name": "identity_fp32", "model_version": "1", "outputs": [
        {"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 3],
         "parameters": {"binary_data_size": 12}}]}
    assert data == x.tobytes()


def test_raw_bodies_as_triton_reads_them(server):
    x = np.array([1.5, 2.5, 3.5], dtype=np.float32)
    r = post_infer(server, "identity_fp32", gzip.compress(x.tobytes()),
                   {**RAW, "Content-Encoding": "gzip"})
    assert r.status_code == 200 and split_binary(r)[1] == x.tobytes()
    # A header length that is not a number reads as 0 (C's atoi).
    r = post_infer(server, "identity_fp32", x.tobytes(), {"Inference-Header-Content-Length": "abc"})
    assert r.status_code == 200 and split_binary(r)[1] == x.tobytes()
    # An empty body, with or without the header: an empty input, and the
    # empty binary output leaves a plain JSON answer.
    for headers in (RAW, {}):
        r = post_infer(server, "identity_fp32", b"", headers)
        assert r.status_code == 200, r.text
        assert "Inference-Header-Content-Length" not in r.headers
        assert r.headers["Content-Type"] == "application/json"
        assert r.json()["outputs"] == [{"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 0],
                                        "parameters": {"binary_data_size": 0}}]
    mlp = post_infer(server, "mlp", np.zeros(256, np.float32).tobytes(), RAW)
    assert mlp.status_code == 200
    assert split_binary(mlp)[0]["outputs"][0]["shape"] == [1, 16]


@pytest.mark.parametrize("model,body,message", [
    ("simple", bytes(64), "[request id: <id_unknown>] Raw request must only have 1 input (found 1) "
                          "to be deduced but got 2 inputs in 'simple' model configuration"),
    ("add_sub_versions", bytes(16), "[request id: <id_unknown>] Raw request must only have 1 input "
                                    "(found 1) to be deduced but got 2 inputs in 'add_sub_versions' "
                                    "model configuration"),
    ("string_identity", b"hello", "[request id: <id_unknown>] For BYTE datatype raw input 'INPUT0', "
                                  "the model must have input shape [1]"),
])
def test_raw_bodies_triton_refuses(server, model, body, message):
    r = post_infer(server, model, body, RAW)
    assert r.status_code == 400
    assert r.json() == {"error": message}


def test_raw_body_of_the_wrong_size_and_header_lengths_out_of_range(server):
    r = post_infer(server, "identity_fp32", bytes(11), RAW)
    assert r.status_code == 400
    # Triton names the input 'raw_input' here; Nereid names it.
    assert r.json()["error"] == ("[request id: <id_unknown>] input byte size mismatch for input "
                                 "'INPUT0' for model 'identity_fp32'. Expected 8, got 11")
    for value in ("-1", "99999"):
        r = post_infer(server, "identity_fp32", bytes(94), {"Inference-Header-Content-Length": value})
        assert r.status_code == 400
        assert r.json() == {"error": f"inference header size should be in range (0, 94), got: {value}"}


# --- content encodings: only the infer route, as Triton -------------------

FP32_BODY = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 3], "datatype": "FP32",
                                    "data": [1.0, 2.0, 3.0]}]}).encode()


@pytest.mark.parametrize("encoding", ["br", "GZIP", "gzip, deflate", "zstd"])
def test_an_unknown_request_encoding_is_501(server, encoding):
    r = post_infer(server, "identity_fp32", FP32_BODY, {"Content-Encoding": encoding})
    assert r.status_code == 501
    assert r.content == b'{"error":"Unsupported compression type"}'
    assert r.headers["Accept-Encoding"] == "gzip, deflate"
    # The model is looked up first.
    r = post_infer(server, "nope", FP32_BODY, {"Content-Encoding": encoding})
    assert r.status_code == 404
    assert r.json() == {"error": "Request for unknown model: 'nope' is not found"}


def test_identity_and_deflate_request_bodies_are_taken(server):
    r = post_infer(server, "identity_fp32", FP32_BODY, {"Content-Encoding": "identity"})
    assert r.status_code == 200
    r = post_infer(server, "identity_fp32", zlib.compress(FP32_BODY), {"Content-Encoding": "deflate"})
    assert r.status_code == 200 and r.json()["outputs"][0]["data"] == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("accept,expected", [
    ("gzip", "gzip"), ("deflate", "deflate"), ("gzip, deflate", "gzip"), ("deflate, gzip", "deflate"),
    ("gzip;q=0.5, deflate", "deflate"), ("identity, gzip;q=2", "gzip"), ("gzip;q=0", None),
    ("br", None), ("*", None), ("GZIP", None), ("", None),
])
def test_an_infer_response_is_compressed_as_triton_picks(server, accept, expected):
    r = requests.post(f"{server.base}/v2/models/identity_fp32/infer", data=FP32_BODY,
                      headers={"Accept-Encoding": accept}, stream=True)
    raw = r.raw.read(decode_content=False)
    assert r.status_code == 200
    assert r.headers.get("Content-Encoding") == expected
    plain = {"gzip": gzip.decompress, "deflate": zlib.decompress, None: bytes}[expected](raw)
    assert json.loads(plain)["outputs"][0]["data"] == [1.0, 2.0, 3.0]


def test_nothing_but_a_successful_infer_response_is_compressed(server):
    calls = [("get", "/v2", None), ("get", "/v2/models/simple", None),
             ("get", "/v2/models/simple/config", None), ("get", "/v2/models/simple/stats", None),
             ("get", "/v2/models/stats", None), ("post", "/v2/repository/index", b"{}"),
             ("get", "/v2/models/nope", None),
             ("post", "/v2/models/identity_fp32/infer", FP32_BODY.replace(b"FP32", b"INT32"))]
    for method, path, data in calls:
        r = requests.request(method, f"{server.base}{path}", data=data,
                             headers={"Accept-Encoding": "gzip, deflate"}, stream=True)
        raw = r.raw.read(decode_content=False)
        assert "Content-Encoding" not in r.headers, path
        json.loads(raw)
