"""Inference over HTTP with the real tritonclient: every example model,
every datatype, JSON and binary tensors, compression; where Triton answers
in its own way (half floats in JSON), its exact answers, as real Triton
2.51 gave them."""

from __future__ import annotations

import json

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
