"""DLPack interchange for pb_utils.Tensor, on top of numpy's DLPack support.

numpy produces and consumes CPU DLPack capsules, which covers every Triton
type but two:

- BF16: numpy has no bfloat16. A BF16 tensor is stored as raw uint16 words;
  exporting relabels the capsule's dtype from (uint, 16) to (bfloat, 16) and
  importing a (bfloat, 16) capsule relabels it to (uint, 16) before numpy
  reads it. The relabelling writes one byte of the DLTensor struct in place
  (ctypes), which the DLPack ABI fixes at offset 20.
- read-only arrays (such as np.broadcast_to results): the legacy DLPack
  capsule cannot say "read-only", so numpy refuses to export them; those
  export a copy.

GPU tensors are not supported by Nereid yet: importing one raises.
"""

import ctypes

import numpy as np

from .errors import TritonModelException, not_supported

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
# DLTensor: data (8), device {type i32, id i32} (8), ndim (4), dtype {code u8,
# bits u8, lanes u16} (4), ...
_DEVICE_OFFSET = 8
_DTYPE_OFFSET = 20

KDL_CPU = 1
_KDL_CUDA = 2
_KDL_CUDA_HOST = 3
_KDL_UINT = 1
_KDL_BFLOAT = 4


def _tensor_address(capsule):
    """Address of the DLTensor inside an unconsumed DLPack capsule."""
    if _api.PyCapsule_IsValid(capsule, _LEGACY_NAME):
        return _api.PyCapsule_GetPointer(capsule, _LEGACY_NAME)
    if _api.PyCapsule_IsValid(capsule, _VERSIONED_NAME):
        return _api.PyCapsule_GetPointer(capsule, _VERSIONED_NAME) + _VERSIONED_TENSOR_OFFSET
    raise TritonModelException("The DLPack capsule is not valid or was already consumed.")


def _check_device(device_type):
    if device_type == _KDL_CUDA:
        raise not_supported("Tensor.from_dlpack", "GPU tensors")
    if device_type not in (KDL_CPU, _KDL_CUDA_HOST):
        raise TritonModelException(
            f"DLDevice type {device_type} is not support by Python backend."
        )


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
        ctypes.c_uint8.from_address(_tensor_address(capsule) + _DTYPE_OFFSET).value = _KDL_BFLOAT
    return capsule


def import_array(source):
    """(array, is_bf16) from a DLPack capsule or an object with `__dlpack__`
    and `__dlpack_device__`; the array shares the producer's memory."""
    if isinstance(source, np.ndarray):
        return source, False
    if type(source).__name__ == "PyCapsule":
        capsule = source
    elif hasattr(source, "__dlpack__") and hasattr(source, "__dlpack_device__"):
        _check_device(int(source.__dlpack_device__()[0]))
        capsule = source.__dlpack__(stream=None)
    else:
        raise TritonModelException(
            "Provided tensor is not supported. Tensor must be a DLPack capsule "
            "or have `__dlpack__` and `__dlpack_device__` attributes"
        )
    address = _tensor_address(capsule)
    _check_device(ctypes.c_int32.from_address(address + _DEVICE_OFFSET).value)
    code = ctypes.c_uint8.from_address(address + _DTYPE_OFFSET)
    bits = ctypes.c_uint8.from_address(address + _DTYPE_OFFSET + 1).value
    lanes = ctypes.c_uint16.from_address(address + _DTYPE_OFFSET + 2).value
    bf16 = code.value == _KDL_BFLOAT and bits == 16 and lanes == 1
    if bf16:
        code.value = _KDL_UINT
    array = np.from_dlpack(_CapsuleCarrier(capsule))
    if not array.flags.c_contiguous:
        raise TritonModelException(
            "DLPack tensor is not contiguous. Only contiguous DLPack tensors "
            "that are stored in C-Order are supported."
        )
    return array, bf16
