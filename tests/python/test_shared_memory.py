"""System shared memory (Triton's extension) through tritonclient's own
`tritonclient.utils.shared_memory`, over HTTP and gRPC, against
model_repository/simple (OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1).
Error messages are real Triton 2.51's (scripts/run-triton.sh), and so are the
statuses, except that Nereid answers 400 where Triton answers 500 for the
client's mistakes (docs/compatibility.md, "Errors that differ on purpose")."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

MODEL = "simple"
BYTES = 16 * 4  # one INT32 [1, 16] tensor
IN0 = np.arange(16, dtype=np.int32).reshape(1, 16)
IN1 = np.full((1, 16), 3, dtype=np.int32)


@pytest.fixture
def regions(server):
    """Makes shared memory objects on demand; unregisters and destroys them after."""
    made = []

    def make(size: int):
        key = f"/nereid_test_{uuid.uuid4().hex[:12]}"
        handle = shm.create_shared_memory_region(key[1:], key, size)
        made.append(handle)
        return key, handle

    yield make
    requests.post(f"{server.base}/v2/systemsharedmemory/unregister")
    for handle in made:
        shm.destroy_shared_memory_region(handle)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def post(server, path: str, body=None, raw: bytes | None = None) -> requests.Response:
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    return requests.post(f"{server.base}{path}", data=data)


def register_http(server, name: str, key: str, byte_size: int, offset: int = 0) -> requests.Response:
    body = {"key": key, "offset": offset, "byte_size": byte_size}
    return post(server, f"/v2/systemsharedmemory/region/{name}/register", body)


def client(server, protocol: str):
    if protocol == "http":
        return httpclient, httpclient.InferenceServerClient(server.http_url)
    return grpcclient, grpcclient.InferenceServerClient(server.grpc_url)


def test_the_extension_is_listed(server):
    extensions = requests.get(f"{server.base}/v2").json()["extensions"]
    assert "system_shared_memory" in extensions
    assert "cuda_shared_memory" not in extensions
    meta = grpcclient.InferenceServerClient(server.grpc_url).get_server_metadata()
    assert "system_shared_memory" in meta.extensions


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_inputs_and_outputs_in_shared_memory(server, regions, protocol):
    in_key, in_handle = regions(2 * BYTES)
    out_key, out_handle = regions(2 * BYTES)
    shm.set_shared_memory_region(in_handle, [IN0, IN1])
    lib, c = client(server, protocol)
    inputs_name, outputs_name = unique("in"), unique("out")
    c.register_system_shared_memory(inputs_name, in_key, 2 * BYTES)
    c.register_system_shared_memory(outputs_name, out_key, 2 * BYTES)
    inputs = [lib.InferInput("INPUT0", [1, 16], "INT32"), lib.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory(inputs_name, BYTES)
    inputs[1].set_shared_memory(inputs_name, BYTES, offset=BYTES)
    outputs = [lib.InferRequestedOutput("OUTPUT0"), lib.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory(outputs_name, BYTES)
    outputs[1].set_shared_memory(outputs_name, BYTES, offset=BYTES)
    result = c.infer(MODEL, inputs, outputs=outputs)
    sums = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16])
    diffs = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16], offset=BYTES)
    np.testing.assert_array_equal(sums, IN0 + IN1)
    np.testing.assert_array_equal(diffs, IN0 - IN1)
    response = result.get_response()
    if protocol == "http":
        # As Triton: neither data nor parameters for outputs in shared memory.
        assert response["outputs"] == [
            {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]},
            {"name": "OUTPUT1", "datatype": "INT32", "shape": [1, 16]},
        ]
    else:
        assert [o.name for o in response.outputs] == ["OUTPUT0", "OUTPUT1"]
        assert all(not o.parameters for o in response.outputs)
        assert list(response.raw_output_contents) == [b"", b""]


@pytest.mark.parametrize("protocol", ["http-json", "http-binary", "grpc"])
def test_one_input_and_one_output_in_shared_memory(server, regions, protocol):
    in_key, in_handle = regions(BYTES)
    out_key, out_handle = regions(BYTES)
    shm.set_shared_memory_region(in_handle, [IN0])
    lib, c = client(server, protocol.split("-")[0])
    in_name, out_name = unique("in"), unique("out")
    c.register_system_shared_memory(in_name, in_key, BYTES)
    c.register_system_shared_memory(out_name, out_key, BYTES)
    in0 = lib.InferInput("INPUT0", [1, 16], "INT32")
    in0.set_shared_memory(in_name, BYTES)
    in1 = lib.InferInput("INPUT1", [1, 16], "INT32")
    kwargs = {"binary_data": protocol == "http-binary"} if protocol != "grpc" else {}
    in1.set_data_from_numpy(IN1, **kwargs)
    out0 = lib.InferRequestedOutput("OUTPUT0")
    out0.set_shared_memory(out_name, BYTES)
    out1 = lib.InferRequestedOutput("OUTPUT1", **kwargs)
    result = c.infer(MODEL, [in0, in1], outputs=[out1, out0])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), IN0 - IN1)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.int32, [1, 16]), IN0 + IN1)
    if protocol == "grpc":
        raw = result.get_response().raw_output_contents
        assert [len(r) for r in raw] == [BYTES, 0]


def test_a_batch_in_shared_memory(server, regions):
    key, handle = regions(4 * 2 * BYTES)
    batch0 = np.arange(32, dtype=np.int32).reshape(2, 16)
    batch1 = np.ones((2, 16), dtype=np.int32)
    shm.set_shared_memory_region(handle, [batch0, batch1])
    c = httpclient.InferenceServerClient(server.http_url)
    name = unique("batch")
    c.register_system_shared_memory(name, key, 4 * 2 * BYTES)
    inputs = [httpclient.InferInput(n, [2, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_shared_memory(name, 2 * BYTES)
    inputs[1].set_shared_memory(name, 2 * BYTES, offset=2 * BYTES)
    out = httpclient.InferRequestedOutput("OUTPUT0")
    out.set_shared_memory(name, 2 * BYTES, offset=4 * BYTES)
    c.infer(MODEL, inputs, outputs=[out])
    result = shm.get_contents_as_numpy(handle, np.int32, [2, 16], offset=4 * BYTES)
    np.testing.assert_array_equal(result, batch0 + batch1)


def test_one_registry_for_both_protocols(server, regions):
    key, _ = regions(BYTES)
    name = unique("both")
    assert register_http(server, name, key[1:], BYTES).status_code == 200
    g = grpcclient.InferenceServerClient(server.grpc_url)
    status = g.get_system_shared_memory_status(name)
    assert status.regions[name].key == key[1:]
    assert status.regions[name].byte_size == BYTES
    r = requests.get(f"{server.base}/v2/systemsharedmemory/region/{name}/status")
    assert r.json() == [{"name": name, "key": key[1:], "offset": 0, "byte_size": BYTES}]
    g.unregister_system_shared_memory(name)
    r = requests.get(f"{server.base}/v2/systemsharedmemory/region/{name}/status")
    assert (r.status_code, r.json()) == (404, {"error": f"Unable to find system shared memory region: '{name}'"})
    all_regions = requests.get(f"{server.base}/v2/systemsharedmemory/status").json()
    assert name not in [row["name"] for row in all_regions]


def test_registration_errors_are_tritons(server, regions):
    key, _ = regions(BYTES)
    name = unique("r")
    assert register_http(server, name, key, BYTES).status_code == 200
    cases = [
        (register_http(server, name, key, BYTES), 400, f"shared memory region '{name}' already in manager"),
        (register_http(server, "x1", "/nereid_no_such_object", 16), 400,
         "Unable to open shared memory region: '/nereid_no_such_object'"),
        (register_http(server, "x2", key, BYTES, offset=8), 400,
         "failed to register shared memory region 'x2': invalid args"),
        (post(server, "/v2/systemsharedmemory/region/x3/register", {"offset": 0, "byte_size": 8}), 400,
         "Shared memory register request has no 'key' field"),
        (post(server, "/v2/systemsharedmemory/region/x3/register", {"key": key}), 400,
         "Shared memory register request has no 'byte_size' field"),
        (post(server, "/v2/systemsharedmemory/region/x3/register", {"key": 5, "byte_size": 8}), 400,
         "attempt to access JSON non-string as string"),
        (post(server, "/v2/systemsharedmemory/region/x3/register", {"key": key, "offset": "0", "byte_size": 8}),
         400, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        (post(server, "/v2/systemsharedmemory/region/x3/register", {"key": key, "byte_size": -1}),
         400, "attempt to access JSON non-unsigned-integer as unsigned-integer"),
    ]
    for response, status, message in cases:
        assert (response.status_code, response.json()) == (status, {"error": message})
    bad_json = post(server, "/v2/systemsharedmemory/region/x3/register", raw=b"{")
    assert bad_json.status_code == 400
    assert bad_json.json()["error"].startswith("failed to parse the request JSON buffer")
    # Only the first registration is there.
    names = [row["name"] for row in requests.get(f"{server.base}/v2/systemsharedmemory/status").json()]
    assert names == [name]


def test_grpc_registration_errors_are_tritons(server, regions):
    key, _ = regions(BYTES)
    g = grpcclient.InferenceServerClient(server.grpc_url)
    name = unique("g")
    g.register_system_shared_memory(name, key, BYTES)
    cases = [
        (lambda: g.register_system_shared_memory(name, key, BYTES), "StatusCode.ALREADY_EXISTS",
         f"shared memory region '{name}' already in manager"),
        (lambda: g.register_system_shared_memory("y", "/nereid_no_such_object", 8), "StatusCode.INVALID_ARGUMENT",
         "Unable to open shared memory region: '/nereid_no_such_object'"),
        (lambda: g.register_system_shared_memory("y", key, BYTES, offset=4), "StatusCode.INVALID_ARGUMENT",
         "failed to register shared memory region 'y': invalid args"),
        (lambda: g.get_system_shared_memory_status("nope"), "StatusCode.NOT_FOUND",
         "Unable to find system shared memory region: 'nope'"),
    ]
    for call, status, message in cases:
        with pytest.raises(InferenceServerException) as e:
            call()
        assert (e.value.status(), e.value.message()) == (status, message)


def test_unregistering_an_unknown_name_succeeds(server):
    assert post(server, "/v2/systemsharedmemory/region/never_registered/unregister").status_code == 200
    grpcclient.InferenceServerClient(server.grpc_url).unregister_system_shared_memory("never_registered")


def infer_json(server, inputs, outputs=None) -> requests.Response:
    body = {"inputs": inputs}
    if outputs is not None:
        body["outputs"] = outputs
    return post(server, f"/v2/models/{MODEL}/infer", body)


def shm_input(name, region, size, offset=None):
    params = {"shared_memory_region": region, "shared_memory_byte_size": size}
    if offset is not None:
        params["shared_memory_offset"] = offset
    return {"name": name, "shape": [1, 16], "datatype": "INT32", "parameters": params}


def shm_output(name, region, size, offset=None, **extra):
    params = {"shared_memory_region": region, "shared_memory_byte_size": size, **extra}
    if offset is not None:
        params["shared_memory_offset"] = offset
    return {"name": name, "parameters": params}


JSON_IN1 = {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [1] * 16}
ONE_OF = ("Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', "
          "'shared_memory_region' in 'parameters'. But set ")


def test_inference_errors_are_tritons(server, regions):
    key, handle = regions(4 * BYTES)
    shm.set_shared_memory_region(handle, [IN0])
    r = unique("r")
    assert register_http(server, r, key, 4 * BYTES).status_code == 200
    cases = [
        ([shm_input("INPUT0", "nope", BYTES), JSON_IN1], None, 404, "Unable to find shared memory region: 'nope'"),
        ([shm_input("INPUT0", r, BYTES, 3 * BYTES + 4), JSON_IN1], None, 400,
         f"Invalid offset + byte size for shared memory region: '{r}'"),
        ([shm_input("INPUT0", r, BYTES, 4 * BYTES), JSON_IN1], None, 400,
         f"Invalid offset for shared memory region: '{r}'"),
        ([{**shm_input("INPUT0", r, BYTES), "data": [1] * 16}, JSON_IN1], None, 400,
         ONE_OF + "'data' 'shared_memory_region'"),
        ([shm_input("INPUT0", 5, BYTES), JSON_IN1], None, 400,
         "Unable to parse 'shared_memory_region': attempt to access JSON non-string as string"),
        ([shm_input("INPUT0", r, "64"), JSON_IN1], None, 400,
         "Unable to parse 'shared_memory_byte_size': attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ([shm_input("INPUT0", r, BYTES), JSON_IN1], [shm_output("OUTPUT0", r, BYTES // 2)], 400,
         "shared memory size specified with the request for output 'OUTPUT0' (32 bytes) should be at least "
         "64 bytes to hold the results"),
        ([shm_input("INPUT0", r, BYTES), JSON_IN1], [shm_output("OUTPUT0", r, BYTES, 3 * BYTES + 4)], 400,
         f"Invalid offset + byte size for shared memory region: '{r}'"),
        ([shm_input("INPUT0", r, BYTES), JSON_IN1], [shm_output("OUTPUT0", "nope", BYTES)], 404,
         "Unable to find shared memory region: 'nope'"),
        ([shm_input("INPUT0", r, BYTES), JSON_IN1], [shm_output("OUTPUT0", r, BYTES, binary_data=True)], 400,
         "Output can't set both 'shared_memory_region' and 'binary_data'"),
    ]
    for inputs, outputs, status, message in cases:
        response = infer_json(server, inputs, outputs)
        assert (response.status_code, response.json()) == (status, {"error": message}), (inputs, outputs)


@pytest.mark.parametrize("size", [BYTES - 4, 2 * BYTES])
def test_a_byte_size_that_does_not_fit_the_shape_is_refused(server, regions, size):
    key, _ = regions(4 * BYTES)
    r = unique("r")
    assert register_http(server, r, key, 4 * BYTES).status_code == 200
    response = infer_json(server, [shm_input("INPUT0", r, size), JSON_IN1])
    assert response.status_code == 400
    assert response.json()["error"].endswith(
        f"input byte size mismatch for input 'INPUT0' for model '{MODEL}'. Expected {BYTES}, got {size}")
    g = grpcclient.InferenceServerClient(server.grpc_url)
    in0 = grpcclient.InferInput("INPUT0", [1, 16], "INT32")
    in0.set_shared_memory(r, size)
    in1 = grpcclient.InferInput("INPUT1", [1, 16], "INT32")
    in1.set_data_from_numpy(IN1)
    with pytest.raises(InferenceServerException) as e:
        g.infer(MODEL, [in0, in1])
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "input byte size mismatch" in e.value.message()


def test_grpc_inference_errors_are_tritons(server, regions):
    key, _ = regions(BYTES)
    g = grpcclient.InferenceServerClient(server.grpc_url)
    r = unique("r")
    g.register_system_shared_memory(r, key, BYTES)
    in1 = grpcclient.InferInput("INPUT1", [1, 16], "INT32")
    in1.set_data_from_numpy(IN1)
    for region, offset, status, message in [
        ("nope", 0, "StatusCode.NOT_FOUND", "Unable to find shared memory region: 'nope'"),
        (r, 4, "StatusCode.INVALID_ARGUMENT", f"Invalid offset + byte size for shared memory region: '{r}'"),
    ]:
        in0 = grpcclient.InferInput("INPUT0", [1, 16], "INT32")
        in0.set_shared_memory(region, BYTES, offset=offset)
        with pytest.raises(InferenceServerException) as e:
            g.infer(MODEL, [in0, in1])
        assert (e.value.status(), e.value.message()) == (status, message)
    in0 = grpcclient.InferInput("INPUT0", [1, 16], "INT32")
    in0.set_data_from_numpy(IN0)
    out = grpcclient.InferRequestedOutput("OUTPUT0")
    out.set_shared_memory(r, BYTES // 2)
    with pytest.raises(InferenceServerException) as e:
        g.infer(MODEL, [in0, in1], outputs=[out])
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "should be at least 64 bytes to hold the results" in e.value.message()


def test_cuda_shared_memory_needs_a_gpu_build(server):
    assert requests.get(f"{server.base}/v2/cudasharedmemory/status").json() == []
    assert post(server, "/v2/cudasharedmemory/unregister").status_code == 200
    assert post(server, "/v2/cudasharedmemory/region/c/unregister").status_code == 200
    r = post(server, "/v2/cudasharedmemory/region/c/register", {"raw_handle": {"b64": "AAAA"}, "device_id": 0,
                                                                 "byte_size": 8})
    assert r.status_code == 501
    assert "CUDA shared memory is not supported" in r.json()["error"]
    r = requests.get(f"{server.base}/v2/cudasharedmemory/region/c/status")
    assert (r.status_code, r.json()) == (404, {"error": "Unable to find cuda shared memory region: 'c'"})
    g = grpcclient.InferenceServerClient(server.grpc_url)
    g.unregister_cuda_shared_memory()
    assert not g.get_cuda_shared_memory_status().regions
    with pytest.raises(InferenceServerException) as e:
        g.register_cuda_shared_memory("c", b"\0" * 64, 0, 8)
    assert e.value.status() == "StatusCode.UNIMPLEMENTED"
    assert "CUDA shared memory is not supported" in e.value.message()


def test_grpc_stream_with_shared_memory(server, regions):
    import queue

    in_key, in_handle = regions(BYTES)
    out_key, out_handle = regions(BYTES)
    shm.set_shared_memory_region(in_handle, [IN0])
    g = grpcclient.InferenceServerClient(server.grpc_url)
    in_name, out_name = unique("in"), unique("out")
    g.register_system_shared_memory(in_name, in_key, BYTES)
    g.register_system_shared_memory(out_name, out_key, BYTES)
    in0 = grpcclient.InferInput("INPUT0", [1, 16], "INT32")
    in0.set_shared_memory(in_name, BYTES)
    in1 = grpcclient.InferInput("INPUT1", [1, 16], "INT32")
    in1.set_data_from_numpy(IN1)
    out0 = grpcclient.InferRequestedOutput("OUTPUT0")
    out0.set_shared_memory(out_name, BYTES)
    answers = queue.Queue()
    g.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        g.async_stream_infer(MODEL, [in0, in1], outputs=[out0])
        result, error = answers.get(timeout=30)
    finally:
        g.stop_stream()
    assert error is None
    assert list(result.get_response().raw_output_contents) == [b""]
    np.testing.assert_array_equal(shm.get_contents_as_numpy(out_handle, np.int32, [1, 16]), IN0 + IN1)
