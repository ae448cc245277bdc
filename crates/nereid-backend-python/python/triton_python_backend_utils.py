"""Nereid's `triton_python_backend_utils`, imported by Triton Python-backend
models as `import triton_python_backend_utils as pb_utils`.

Same public names, signatures, return types and messages as Triton's module
(where Triton defines them in C++, as in Python). The implementation lives in
the `nereid_pb` package; this module gathers it and adds Triton's small
helper functions. Calls Nereid cannot support yet raise TritonModelException
naming the call.
"""

from nereid_pb import runtime as _runtime
from nereid_pb.dtypes import (  # noqa: F401  (re-exported)
    TRITON_STRING_TO_NUMPY,
    TRITONSERVER_TYPE_BF16,
    TRITONSERVER_TYPE_BOOL,
    TRITONSERVER_TYPE_BYTES,
    TRITONSERVER_TYPE_FP16,
    TRITONSERVER_TYPE_FP32,
    TRITONSERVER_TYPE_FP64,
    TRITONSERVER_TYPE_INT8,
    TRITONSERVER_TYPE_INT16,
    TRITONSERVER_TYPE_INT32,
    TRITONSERVER_TYPE_INT64,
    TRITONSERVER_TYPE_INVALID,
    TRITONSERVER_TYPE_UINT8,
    TRITONSERVER_TYPE_UINT16,
    TRITONSERVER_TYPE_UINT32,
    TRITONSERVER_TYPE_UINT64,
    deserialize_bytes_tensor,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
)
from nereid_pb.errors import TritonError, TritonModelException
from nereid_pb.inference import (  # noqa: F401  (re-exported)
    TRITONSERVER_MEMORY_CPU,
    TRITONSERVER_MEMORY_GPU,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceRequest,
    InferenceResponse,
    InferenceTrace,
    MemoryType,
    PreferredMemory,
)
from nereid_pb.logger import Logger
from nereid_pb.metrics import Metric as _Metric
from nereid_pb.metrics import MetricFamily
from nereid_pb.metrics import MetricKind as _MetricKind
from nereid_pb.model_config import ModelConfig
from nereid_pb.model_control import is_model_ready, load_model, unload_model  # noqa: F401
from nereid_pb.tensor import Tensor

# Present the classes as this module's own (in reprs and tracebacks), as
# models see them.
for _public in (
    TritonError, TritonModelException, InferenceRequest, InferenceResponse,
    InferenceTrace, PreferredMemory, MemoryType, Logger, ModelConfig, Tensor,
    MetricFamily, _Metric, _MetricKind,
):
    _public.__module__ = __name__


def get_input_tensor_by_name(inference_request, name):
    """The input Tensor called `name` of a request, or None."""
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response, name):
    """The output Tensor called `name` of a response, or None."""
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config, name):
    """The `input` entry called `name` of a model-configuration dict, or None."""
    for entry in model_config.get("input", []):
        if entry["name"] == name:
            return entry
    return None


def get_output_config_by_name(model_config, name):
    """The `output` entry called `name` of a model-configuration dict, or None."""
    for entry in model_config.get("output", []):
        if entry["name"] == name:
            return entry
    return None


def using_decoupled_model_transaction_policy(model_config):
    """Whether a model-configuration dict asks for the decoupled policy."""
    if "model_transaction_policy" in model_config:
        return model_config["model_transaction_policy"]["decoupled"]
    return False


def get_model_dir():
    """The directory of the model's `model.py` (its version directory)."""
    current = _runtime.current()
    if current is None or current.model_dir is None:
        raise TritonModelException("get_model_dir() is only available inside a Nereid worker.")
    return current.model_dir


del _public
