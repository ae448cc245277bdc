"""The gRPC frontend with the real tritonclient: health, metadata, config,
inference (raw and typed contents), streaming, statistics, errors, and the
standard grpc.health.v1 service."""

from __future__ import annotations

import queue
import subprocess
import sys
from functools import partial

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from conftest import REPO_ROOT
from models import IDENTITY_MODELS, mlp_reference, sample


@pytest.fixture(scope="module")
def client(server):
    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


@pytest.fixture(scope="module")
def stub(server):
    channel = grpc.insecure_channel(server.grpc_url)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def infer_input(name, array, datatype):
    t = grpcclient.InferInput(name, list(array.shape), datatype)
    t.set_data_from_numpy(array)
    return t


def test_health_and_metadata(client):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("simple")
    assert not client.is_model_ready("nope")
    meta = client.get_server_metadata(as_json=True)
    # Triton's name: its own client examples check it.
    assert meta["name"] == "triton" and "binary_tensor_data" in meta["extensions"]
    model = client.get_model_metadata("simple", as_json=True)
    assert model["platform"] == "onnxruntime_onnx"
    assert model["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": ["-1", "16"]}
    config = client.get_model_config("simple", as_json=True)["config"]
    assert config["max_batch_size"] == 8 and config["input"][0]["data_type"] == "TYPE_INT32"


def test_simple(client):
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 5, dtype=np.int32)
    result = client.infer("simple", [infer_input("INPUT0", a, "INT32"), infer_input("INPUT1", b, "INT32")],
                          request_id="g1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.get_response().id == "g1"


def test_mlp(client):
    x = sample(np.float32, (3, 256), seed=11)
    result = client.infer("mlp", [infer_input("INPUT", x, "FP32")])
    np.testing.assert_allclose(result.as_numpy("OUTPUT"), mlp_reference(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model,datatype,dtype", IDENTITY_MODELS)
def test_every_datatype(client, model, datatype, dtype):
    data = sample(dtype, (2, 3), seed=5)
    result = client.infer(model, [infer_input("INPUT0", data, datatype)])
    out = result.as_numpy("OUTPUT0")
    if dtype is np.object_:
        assert list(out.flatten()) == list(data.flatten())
    else:
        np.testing.assert_array_equal(out, data)


def test_typed_contents(stub):
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        t = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        t.contents.int_contents.extend(range(16))
    response = stub.ModelInfer(request)
    out = np.frombuffer(response.raw_output_contents[0], dtype=np.int32)
    np.testing.assert_array_equal(out, np.arange(16) * 2)


def test_typed_bytes_contents_are_byte_exact(stub):
    request = service_pb2.ModelInferRequest(model_name="string_identity")
    t = request.inputs.add(name="INPUT0", datatype="BYTES", shape=[1, 3])
    t.contents.bytes_contents.extend([b"\x00", b"\xff\x00\xfe", b"ok"])
    response = stub.ModelInfer(request)
    raw = response.raw_output_contents[0]
    assert raw == b"".join(len(e).to_bytes(4, "little") + e for e in [b"\x00", b"\xff\x00\xfe", b"ok"])


def test_two_versions(client):
    a = np.array([1, 2, 3, 4], dtype=np.float32)
    b = np.array([2, 2, 2, 2], dtype=np.float32)
    inputs = [infer_input("INPUT0", a, "FP32"), infer_input("INPUT1", b, "FP32")]
    v1 = client.infer("add_sub_versions", inputs, model_version="1").as_numpy("OUTPUT0")
    v2 = client.infer("add_sub_versions", inputs, model_version="2").as_numpy("OUTPUT0")
    np.testing.assert_array_equal(v1, [3, 4, 5, 6])
    np.testing.assert_array_equal(v2, [2, 4, 6, 8])


def test_streaming_one_response_per_request(client):
    responses: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        for i in range(5):
            a = np.full((1, 16), i, dtype=np.int32)
            client.async_stream_infer("simple", [infer_input("INPUT0", a, "INT32"), infer_input("INPUT1", a, "INT32")],
                                      request_id=str(i))
        bad = np.zeros((1, 15), dtype=np.int32)
        client.async_stream_infer("simple", [infer_input("INPUT0", bad, "INT32"), infer_input("INPUT1", bad, "INT32")],
                                  request_id="bad")
        got = [responses.get(timeout=60) for _ in range(6)]
    finally:
        client.stop_stream()
    results = {r.get_response().id: r for r, e in got if e is None}
    errors = [e for _, e in got if e is not None]
    assert sorted(results) == ["0", "1", "2", "3", "4"]
    for i in range(5):
        np.testing.assert_array_equal(results[str(i)].as_numpy("OUTPUT0"), np.full((1, 16), 2 * i))
    assert len(errors) == 1 and "unexpected shape" in str(errors[0])


def test_statistics(client):
    stats = client.get_inference_statistics("simple", as_json=True)["model_stats"][0]
    assert int(stats["inference_count"]) > 0
    assert int(stats["execution_count"]) > 0
    with pytest.raises(InferenceServerException, match="requested model 'nope' is not available"):
        client.get_inference_statistics("nope")


@pytest.mark.parametrize("case,model,version,shape,datatype,code,fragment", [
    ("unknown model", "nope", "", [1, 16], "INT32", grpc.StatusCode.NOT_FOUND, "Request for unknown model: 'nope' is not found"),
    ("unknown version", "simple", "9", [1, 16], "INT32", grpc.StatusCode.NOT_FOUND, "version 9 is not found"),
    ("bad version string", "simple", "abc", [1, 16], "INT32", grpc.StatusCode.INVALID_ARGUMENT, "version should be an integral value > 0"),
    ("wrong shape", "simple", "", [1, 15], "INT32", grpc.StatusCode.INVALID_ARGUMENT, "unexpected shape for input 'INPUT0'"),
    ("wrong datatype", "simple", "", [1, 16], "FP32", grpc.StatusCode.INVALID_ARGUMENT, "data-type is 'FP32'"),
    ("batch too large", "simple", "", [9, 16], "INT32", grpc.StatusCode.INVALID_ARGUMENT, "batch-size must be <= 8"),
])
def test_errors(stub, case, model, version, shape, datatype, code, fragment):
    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    n = int(np.prod(shape))
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype=datatype, shape=shape)
        request.raw_input_contents.append(b"\x01\x00\x00\x00" * n)
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(request)
    assert err.value.code() == code
    assert fragment in err.value.details()
    # Still serving.
    ok = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        ok.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        ok.raw_input_contents.append(b"\x01\x00\x00\x00" * 16)
    assert len(stub.ModelInfer(ok).raw_output_contents) == 2


def test_model_metadata_lists_the_version_asked_for(stub):
    def versions(version):
        request = service_pb2.ModelMetadataRequest(name="add_sub_versions", version=version)
        return list(stub.ModelMetadata(request).versions)

    assert versions("") == ["1", "2"]
    assert versions("1") == ["1"]
    assert versions("2") == ["2"]


def fp32_request(**parameters):
    """An identity_fp32 request with request-level parameters given as
    (kind, value), or None for a parameter without a value."""
    request = service_pb2.ModelInferRequest(model_name="identity_fp32")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 3])
    request.raw_input_contents.append(np.ones(3, np.float32).tobytes())
    for key, value in parameters.items():
        param = request.parameters[key]
        if value is not None:
            setattr(param, *value)
    return request


ANY = "expected int64_param, bool_param, or string_param."


@pytest.mark.parametrize("parameters,message", [
    ({"custom": ("uint64_param", 7)}, f"invalid value type for 'custom' parameter, {ANY}"),
    ({"custom": None}, f"invalid value type for 'custom' parameter, {ANY}"),
    ({"binary_data_output": ("uint64_param", 1)}, f"invalid value type for 'binary_data_output' parameter, {ANY}"),
    ({"priority": ("int64_param", -1)}, "invalid value for 'priority', expected value >= 0."),
    ({"priority": ("string_param", "x")},
     "invalid value type for 'priority' parameter, expected int64_param or uint64_param."),
    ({"timeout": ("uint64_param", 1000)}, "invalid value type for 'timeout' parameter, expected int64_param."),
    ({"sequence_id": ("uint64_param", 5)},
     "invalid value type for 'sequence_id' parameter, expected int64_param or string_param."),
    ({"sequence_start": ("uint64_param", 1)},
     "invalid value type for 'sequence_start' parameter, expected bool_param."),
    ({"triton_foo": ("bool_param", True)},
     "parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys "
     "starting with 'triton_' are allowed: triton_enable_empty_final_response"),
    ({"triton_enable_empty_final_response": ("int64_param", 1)},
     "invalid value type for 'triton_enable_empty_final_response' parameter, expected bool_param."),
])
def test_request_parameters_of_a_kind_triton_refuses(stub, parameters, message):
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(fp32_request(**parameters))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == message


@pytest.mark.parametrize("parameters", [
    {"custom": ("double_param", 0.5)},
    {"priority": ("uint64_param", 1)},
    {"timeout": ("int64_param", 100_000_000)},
    {"triton_enable_empty_final_response": ("bool_param", True)},
])
def test_request_parameters_of_a_kind_triton_takes(stub, parameters):
    assert len(stub.ModelInfer(fp32_request(**parameters)).raw_output_contents) == 1


def test_an_input_parameter_may_be_uint64(stub):
    request = fp32_request()
    request.inputs[0].parameters["custom"].uint64_param = 3
    assert len(stub.ModelInfer(request).raw_output_contents) == 1


def test_raw_size_mismatch(stub):
    request = service_pb2.ModelInferRequest(model_name="simple")
    request.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
    request.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16])
    request.raw_input_contents.append(b"\x00" * 64)
    request.raw_input_contents.append(b"\x00" * 60)
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(request)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "byte size mismatch" in err.value.details()


def test_load_outside_explicit_mode_answers_as_triton(stub):
    with pytest.raises(grpc.RpcError) as err:
        stub.RepositoryModelLoad(service_pb2.RepositoryModelLoadRequest(model_name="simple"))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert err.value.details() == "explicit model load / unload is not allowed if polling is enabled"


def test_repository_index(stub):
    index = stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True))
    names = {(m.name, m.version, m.state) for m in index.models}
    assert ("simple", "1", "READY") in names


def test_grpc_health_service(server):
    from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: PLC0415
    channel = grpc.insecure_channel(server.grpc_url)
    health = health_pb2_grpc.HealthStub(channel)
    assert health.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING
    channel.close()


def test_compressed_infer(client):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    for algorithm in ("gzip", "deflate"):
        result = client.infer("simple", [infer_input("INPUT0", a, "INT32"), infer_input("INPUT1", a, "INT32")],
                              compression_algorithm=algorithm)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)


@pytest.mark.parametrize("requests", [1, 4])
def test_a_streaming_client_exits_after_stop_stream(server, requests):
    # Triton's image_client.py --streaming once printed PASS against nereid
    # and then never exited; the process must end on its own.
    script = REPO_ROOT / "tests/python/clients/stream_then_exit.py"
    done = subprocess.run(
        [sys.executable, str(script), server.grpc_url, "identity_fp32", str(requests)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "PASS" and len(lines) == requests + 1, done.stdout
