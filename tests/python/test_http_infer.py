"""Inference over HTTP with the real tritonclient: every example model,
every datatype, JSON and binary tensors, compression."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient

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
