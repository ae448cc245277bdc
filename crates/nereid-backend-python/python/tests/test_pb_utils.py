"""In-process checks of triton_python_backend_utils against Triton's
behaviour: type tables, BYTES helpers, Tensor and DLPack, ModelConfig
validation, request/response argument checks, unsupported calls."""

import ctypes
import json
import re
import sys

import numpy as np
import pytest

from harness import PYTHON_DIR

sys.path.insert(0, str(PYTHON_DIR))
import triton_python_backend_utils as pb_utils  # noqa: E402
from nereid_pb import dlpack  # noqa: E402


def test_type_tables_match_tritons():
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_BOOL") is bool
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert [pb_utils.numpy_to_triton_type(t) for t in (np.bool_, np.uint8, np.float16, np.float64)] == [1, 2, 10, 12]
    assert pb_utils.numpy_to_triton_type(np.dtype(np.int32)) == pb_utils.TRITONSERVER_TYPE_INT32
    assert pb_utils.numpy_to_triton_type(np.object_) == pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.complex64) is None
    assert pb_utils.triton_to_numpy_type(11) is np.float32
    assert pb_utils.triton_to_numpy_type(pb_utils.TRITONSERVER_TYPE_BF16) is None
    assert (pb_utils.TRITONSERVER_TYPE_INVALID, pb_utils.TRITONSERVER_TYPE_BYTES,
            pb_utils.TRITONSERVER_TYPE_BF16) == (0, 13, 14)
    assert (pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START, pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
            pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL, pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL,
            pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE) == (1, 2, 1, 1, 2)


def test_byte_tensor_helpers_round_trip_exactly():
    items = np.array([b"", b"\x00\xff", "h\u00e9", 7], dtype=np.object_)
    encoded = pb_utils.serialize_byte_tensor(items)
    assert encoded == b"\x00\x00\x00\x00" + b"\x02\x00\x00\x00\x00\xff" + b"\x03\x00\x00\x00h\xc3\xa9" + b"\x01\x00\x00\x007"
    decoded = pb_utils.deserialize_bytes_tensor(encoded)
    assert decoded.dtype == np.object_ and list(decoded) == [b"", b"\x00\xff", "h\u00e9".encode(), b"7"]
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)) == ()
    assert pb_utils.serialize_byte_tensor(np.zeros(2, np.float32)) is None


def test_triton_error_codes_and_default():
    assert pb_utils.TritonError("x").code() == pb_utils.TritonError.INTERNAL
    error = pb_utils.TritonError("gone", pb_utils.TritonError.NOT_FOUND)
    assert (error.message(), error.code(), error.code().name) == ("gone", 2, "NOT_FOUND")
    assert [pb_utils.TritonError.UNKNOWN, pb_utils.TritonError.CANCELLED] == [0, 7]
    with pytest.raises(TypeError):
        pb_utils.TritonError(None)
    assert str(pb_utils.TritonModelException("why")) == "why"


def test_tensor_api():
    tensor = pb_utils.Tensor("x", np.arange(6, dtype=np.int16).reshape(2, 3))
    assert (tensor.name(), tensor.shape(), tensor.triton_dtype(), tensor.is_cpu()) == ("x", [2, 3], 7, True)
    assert pb_utils.Tensor("s", np.array(["a", "b"])).triton_dtype() == pb_utils.TRITONSERVER_TYPE_BYTES
    with pytest.raises(pb_utils.TritonModelException, match="^Tensor name cannot be an empty string.$"):
        pb_utils.Tensor("", np.zeros(1))
    with pytest.raises(pb_utils.TritonModelException, match="^NumPy dtype is not supported.$"):
        pb_utils.Tensor("c", np.zeros(1, np.complex64))
    with pytest.raises(pb_utils.TritonModelException, match="DLPack does not have support for string tensors."):
        pb_utils.Tensor("b", np.array([b"a"], dtype=np.object_)).to_dlpack()


def test_dlpack_round_trips_and_labels_bf16():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    shared = pb_utils.Tensor.from_dlpack("y", pb_utils.Tensor("x", array).to_dlpack())
    assert np.shares_memory(shared.as_numpy(), array)
    versioned = pb_utils.Tensor.from_dlpack("v", array.__dlpack__(max_version=(1, 0)))
    np.testing.assert_array_equal(versioned.as_numpy(), array)
    readonly = np.arange(3, dtype=np.int64)
    readonly.flags.writeable = False
    np.testing.assert_array_equal(pb_utils.Tensor.from_dlpack("r", pb_utils.Tensor("r", readonly)).as_numpy(), readonly)

    words = np.array([0x3FC0, 0x4000], dtype=np.uint16)  # bfloat16 1.5 and 2.0
    bf16 = pb_utils.Tensor._wrap("b", words, pb_utils.TRITONSERVER_TYPE_BF16)
    with pytest.raises(pb_utils.TritonModelException, match="Tensor dtype is BF16 and cannot be converted to NumPy"):
        bf16.as_numpy()
    capsule = bf16.to_dlpack()
    address = dlpack._tensor_address(capsule)
    assert (ctypes.c_uint8.from_address(address + 20).value, ctypes.c_uint8.from_address(address + 21).value) == (4, 16)
    back = pb_utils.Tensor.from_dlpack("b2", capsule)
    assert back.triton_dtype() == pb_utils.TRITONSERVER_TYPE_BF16
    np.testing.assert_array_equal(back._array, words)


def test_model_config_validation_matches_triton():
    config = pb_utils.ModelConfig(json.dumps({"name": "m", "max_batch_size": 8, "input": [], "output": [],
                                              "sequence_batching": {}}))
    with pytest.raises(ValueError, match="contains property other than 'name', 'data_type', 'dims' and 'optional'."):
        config.add_input({"name": "I", "data_type": "TYPE_FP32", "dims": [1], "shape": [1]})
    with pytest.raises(ValueError, match="^output 'O' in auto-complete-config function for model 'm' is missing 'dims' property.$"):
        config.add_output({"name": "O", "data_type": "TYPE_FP32"})
    config.add_input({"name": "I", "data_type": "TYPE_FP32", "dims": [2]})
    with pytest.raises(ValueError, match=r"the model expects dims \[3\] but the model configuration specifies dims \[2\]"):
        config.add_input({"name": "I", "data_type": "TYPE_FP32", "dims": [3]})
    with pytest.raises(ValueError, match="^configuration specified max_batch_size 8, but in auto-complete-config "
                                         "function for model 'm' specified max_batch_size 4$"):
        config.set_max_batch_size(4)
    with pytest.raises(ValueError, match="scheduling_choice as 'sequence_batching'"):
        config.set_dynamic_batching()
    config.set_model_transaction_policy({"decoupled": False})
    assert config.as_dict()["model_transaction_policy"] == {"decoupled": False}
    with pytest.raises(ValueError, match="^trying to change decoupled property in auto-complete-config for "
                                         "model 'm', which is already set to 'False'.$"):
        config.set_model_transaction_policy({"decoupled": True})
    decoupled = pb_utils.ModelConfig('{"name": "d"}')
    decoupled.set_model_transaction_policy({"decoupled": True})
    assert pb_utils.using_decoupled_model_transaction_policy(decoupled.as_dict()) is True
    assert pb_utils.get_input_config_by_name(config.as_dict(), "I")["dims"] == [2]
    assert pb_utils.get_output_config_by_name(config.as_dict(), "I") is None
    assert pb_utils.using_decoupled_model_transaction_policy(config.as_dict()) is False


def test_request_and_response_arguments_are_checked_as_triton_does():
    tensor = pb_utils.Tensor("x", np.zeros(1))
    request = pb_utils.InferenceRequest(model_name="m", inputs=[tensor], requested_output_names=["o"],
                                        parameters={"a": 1, "b": "s"}, correlation_id="c")
    assert (request.request_id(), request.correlation_id(), request.flags(), request.timeout()) == ("", "c", 0, 0)
    assert json.loads(request.parameters()) == {"a": 1, "b": "s"}
    assert request.requested_output_names() == {"o"}
    with pytest.raises(TypeError, match="missing required argument 'model_name'"):
        pb_utils.InferenceRequest(inputs=[], requested_output_names=[])
    with pytest.raises(pb_utils.TritonModelException, match="^Correlation ID must be integer or string$"):
        pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[], correlation_id=1.5)
    with pytest.raises(pb_utils.TritonModelException, match="^Expect parameters values to have type bool/int/str, found type <class 'float'>$"):
        pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[], parameters={"f": 0.5})
    with pytest.raises(pb_utils.TritonModelException, match="^Requested output name for request with id '' and model name 'm' should not be empty.$"):
        pb_utils.InferenceRequest(model_name="m", inputs=[], requested_output_names=[""])
    with pytest.raises(pb_utils.TritonModelException, match="^BLS is only supported during the 'execute' function.$"):
        request.exec()
    with pytest.raises(pb_utils.TritonModelException, match="^BLS is only supported during the 'execute' function.$"):
        request.exec(decoupled=True)
    request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
    request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL)
    with pytest.raises(TypeError, match="^set_release_flags\\(\\): incompatible function arguments"):
        request.set_release_flags(None)

    response = pb_utils.InferenceResponse(output_tensors=[tensor], parameters={"k": True})
    assert (response.has_error(), response.error(), json.loads(response.parameters())) == (False, None, {"k": True})
    assert pb_utils.get_output_tensor_by_name(response, "x") is tensor
    assert pb_utils.InferenceResponse().output_tensors() == []
    with pytest.raises(pb_utils.TritonModelException, match="^Output tensor for inference response should not be empty.$"):
        pb_utils.InferenceResponse([None])


def test_unsupported_calls_say_so():
    with pytest.raises(pb_utils.TritonModelException, match="Nereid's Python backend does not support"):
        pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_GPU, 0)
    pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU)


def test_server_calls_outside_a_worker_say_so():
    for call in (lambda: pb_utils.load_model("m"), lambda: pb_utils.unload_model("m"),
                 lambda: pb_utils.is_model_ready("m"),
                 lambda: pb_utils.MetricFamily("n", "d", pb_utils.MetricFamily.COUNTER)):
        with pytest.raises(pb_utils.TritonModelException, match="only available inside a Nereid worker"):
            call()


def test_server_calls_check_their_arguments_as_pybind11_does():
    kinds = pb_utils.MetricFamily
    assert (int(kinds.COUNTER), int(kinds.GAUGE), int(kinds.HISTOGRAM)) == (0, 1, 2)
    assert repr(kinds.GAUGE) == "<MetricKind.GAUGE: 1>"
    with pytest.raises(TypeError) as raised:
        pb_utils.MetricFamily("probe_kind", "d", 5)
    assert str(raised.value) == (
        "__init__(): incompatible constructor arguments. The following argument types are supported:\n"
        "    1. triton_python_backend_utils.MetricFamily(name: str, description: str, "
        "kind: triton_python_backend_utils.MetricKind)\n\nInvoked with: 'probe_kind', 'd', 5")
    with pytest.raises(TypeError, match=r"Invoked with: kwargs: name=None, description='d', "
                                        r"kind=<MetricKind.GAUGE: 1>$"):
        pb_utils.MetricFamily(name=None, description="d", kind=kinds.GAUGE)
    with pytest.raises(TypeError, match=r"(?s)^load_model\(\): incompatible function arguments.*"
                                        r"Invoked with: 'target', None$") as raised:
        pb_utils.load_model("target", None)
    assert "1. (model_name: str, config: str = '', files: object = None) -> None" in str(raised.value)
    with pytest.raises(TypeError, match=r"Invoked with: 'target'; kwargs: unload_dependents=None$"):
        pb_utils.unload_model("target", unload_dependents=None)
    with pytest.raises(TypeError, match=r"(?s)^is_model_ready\(\): .*Invoked with: 'target', 1$"):
        pb_utils.is_model_ready("target", 1)
    # What is checked before asking the server (Triton checks it in the stub).
    with pytest.raises(pb_utils.TritonModelException, match="^failed to load model 'target', files should be "
                                                             "a dictionary of file paths and file contents$"):
        pb_utils.load_model("target", files=[1])
    with pytest.raises(TypeError, match="^Object of type 'str' is not an instance of 'bytes'$"):
        pb_utils.load_model("target", files={"file:1/model.py": "x"})
    with pytest.raises(RuntimeError, match="^Unable to cast Python instance to C\\+\\+ type"):
        pb_utils.load_model("target", files={1: b"x"})


def test_logger_outside_a_worker_writes_stderr(capsys):
    pb_utils.Logger.log("hello", pb_utils.Logger.WARNING)
    pb_utils.Logger.log_error("bad")
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"W\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ test_pb_utils\.py:\d+\] hello", lines[0])
    assert lines[1].startswith("E") and lines[1].endswith("] bad")
