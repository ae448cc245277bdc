"""DLPack interchange for pb_utils.Tensor, on top of numpy's DLPack support.

numpy produces and consumes CPU DLPack capsules, which covers every Triton
type but two:

- BF16: numpy has no bfloat16. A BF16 tensor is stored as raw uint16 words;
  exporting relabels the capsule's dtype from (uint, 16) to (bfloat, 16) and
  importing a (bfloat, 16) capsule relabels it to (uint, 16) before numpy
  reads it. The relabelling writes one byte of the DLTensor struct in place
  (ctypes; the DLPack ABI fixes the struct's layout).
- read-only arrays (such as np.broadcast_to results): the legacy DLPack
  capsule cannot say "read-only", so numpy refuses to export them; those
  export a copy.

GPU (kDLCUDA) tensors never become numpy arrays here: gpu.py holds them and
reads what it needs (device, dtype, shape) with `describe`.
"""

import ctypes

import numpy as np

from .dtypes import (
    TRITONSERVER_TYPE_BF16,
    TRITONSERVER_TYPE_BOOL,
    TRITONSERVER_TYPE_FP16,
    TRITONSERVER_TYPE_FP32,
    TRITONSERVER_TYPE_FP64,
    TRITONSERVER_TYPE_INT8,
    TRITONSERVER_TYPE_INT16,
    TRITONSERVER_TYPE_INT32,
    TRITONSERVER_TYPE_INT64,
    TRITONSERVER_TYPE_UINT8,
    TRITONSERVER_TYPE_UINT16,
    TRITONSERVER_TYPE_UINT32,
    TRITONSERVER_TYPE_UINT64,
)
from .errors import TritonModelException

_api = ctypes.pythonapi
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

_LEGACY_NAME = b"dltensor"
_VERSIONED_NAME = b"dltensor_versioned"
# DLManagedTensorVersioned starts with version (8), manager_ctx (8),
# deleter (8) and flags (8) before its DLTensor.
_VERSIONED_TENSOR_OFFSET = 32

KDL_CPU = 1
KDL_CUDA = 2
_KDL_CUDA_HOST = 3

_KDL_INT = 0
_KDL_UINT = 1
_KDL_FLOAT = 2
_KDL_BFLOAT = 4
_KDL_BOOL = 6

# Triton's dlpack_to_triton_type: (type code, bits) -> Triton type, lanes 1.
_TRITON_TYPES = {
    (_KDL_FLOAT, 16): TRITONSERVER_TYPE_FP16,
    (_KDL_FLOAT, 32): TRITONSERVER_TYPE_FP32,
    (_KDL_FLOAT, 64): TRITONSERVER_TYPE_FP64,
    (_KDL_INT, 8): TRITONSERVER_TYPE_INT8,
    (_KDL_INT, 16): TRITONSERVER_TYPE_INT16,
    (_KDL_INT, 32): TRITONSERVER_TYPE_INT32,
    (_KDL_INT, 64): TRITONSERVER_TYPE_INT64,
    (_KDL_UINT, 8): TRITONSERVER_TYPE_UINT8,
    (_KDL_UINT, 16): TRITONSERVER_TYPE_UINT16,
    (_KDL_UINT, 32): TRITONSERVER_TYPE_UINT32,
    (_KDL_UINT, 64): TRITONSERVER_TYPE_UINT64,
    (_KDL_BOOL, 8): TRITONSERVER_TYPE_BOOL,
    (_KDL_BFLOAT, 16): TRITONSERVER_TYPE_BF16,
}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


def is_capsule(source):
    return type(source).__name__ == "PyCapsule"


def _tensor_address(capsule):
    """Address of the DLTensor inside an unconsumed DLPack capsule."""
    if _api.PyCapsule_IsValid(capsule, _LEGACY_NAME):
        return _api.PyCapsule_GetPointer(capsule, _LEGACY_NAME)
    if _api.PyCapsule_IsValid(capsule, _VERSIONED_NAME):
        return _api.PyCapsule_GetPointer(capsule, _VERSIONED_NAME) + _VERSIONED_TENSOR_OFFSET
    raise TritonModelException("The DLPack capsule is not valid or was already consumed.")


def _dl_tensor(capsule):
    """The DLTensor of an unconsumed capsule, as a view (writes land in it)."""
    return _DLTensor.from_address(_tensor_address(capsule))


def _check_device(device_type):
    if device_type not in (KDL_CPU, _KDL_CUDA_HOST):
        raise TritonModelException(
            f"DLDevice type {device_type} is not support by Python backend."
        )


def _check_protocol(source):
    if not (hasattr(source, "__dlpack__") and hasattr(source, "__dlpack_device__")):
        raise TritonModelException(
            "Provided tensor is not supported. Tensor must be a DLPack capsule "
            "or have `__dlpack__` and `__dlpack_device__` attributes"
        )


def device_type(source):
    """The DLPack device type of a capsule or of a DLPack producer."""
    if is_capsule(source):
        return _dl_tensor(source).device.device_type
    _check_protocol(source)
    return int(source.__dlpack_device__()[0])


def _contiguous(tensor):
    """Triton's check: no strides, or C-order strides (dims of size 1 and
    the outermost dim are not checked)."""
    if not tensor.strides:
        return True
    expected = 1
    for axis in range(tensor.ndim - 1, 0, -1):
        if tensor.shape[axis] != 1:
            if tensor.strides[axis] != expected:
                return False
            expected *= tensor.shape[axis]
    return True


def describe(capsule):
    """(device id, Triton type, shape) of an unconsumed capsule, which stays
    unconsumed; raises as Triton does for layouts and types it refuses."""
    tensor = _dl_tensor(capsule)
    if not _contiguous(tensor):
        raise TritonModelException(
            "DLPack tensor is not contiguous. Only contiguous DLPack tensors "
            "that are stored in C-Order are supported."
        )
    dtype = tensor.dtype
    triton_type = _TRITON_TYPES.get((dtype.code, dtype.bits)) if dtype.lanes == 1 else None
    if triton_type is None:
        raise TritonModelException(
            f"DLPack data type (code {dtype.code}, bits {dtype.bits}, lanes {dtype.lanes}) "
            "is not supported by Python backend."
        )
    shape = tuple(int(tensor.shape[axis]) for axis in range(tensor.ndim))
    return int(tensor.device.device_id), triton_type, shape


class _CapsuleCarrier:
    """Hands numpy's from_dlpack (which wants an object, not a capsule) a
    capsule we already hold."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, **_protocol_options):
        return self._capsule

    def __dlpack_device__(self):
        return (KDL_CPU, 0)


def export_capsule(array, bf16, **protocol_options):
    """A DLPack capsule over `array` (a copy when `array` is read-only);
    labelled bfloat16 when `bf16` (then always the legacy capsule kind)."""
    if bf16:
        protocol_options = {}
    try:
        capsule = array.__dlpack__(**protocol_options)
    except BufferError:
        capsule = np.array(array).__dlpack__(**protocol_options)
    if bf16:
        _dl_tensor(capsule).dtype.code = _KDL_BFLOAT
    return capsule


def import_array(source):
    """(array, is_bf16) from a CPU DLPack capsule or a CPU object with
    `__dlpack__` and `__dlpack_device__`; the array shares the producer's
    memory."""
    if isinstance(source, np.ndarray):
        return source, False
    if is_capsule(source):
        capsule = source
    else:
        _check_device(device_type(source))
        capsule = source.__dlpack__(stream=None)
    tensor = _dl_tensor(capsule)
    _check_device(tensor.device.device_type)
    dtype = tensor.dtype
    bf16 = dtype.code == _KDL_BFLOAT and dtype.bits == 16 and dtype.lanes == 1
    if bf16:
        dtype.code = _KDL_UINT
    array = np.from_dlpack(_CapsuleCarrier(capsule))
    if not array.flags.c_contiguous:
        raise TritonModelException(
            "DLPack tensor is not contiguous. Only contiguous DLPack tensors "
            "that are stored in C-Order are supported."
        )
    return array, bf16
