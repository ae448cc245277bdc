"""pb_utils.Tensor: a named array that is an input or output of a request.

As in Triton, a Tensor wraps a numpy array. The inputs of a request wrap
writable arrays that never write to the server's memory: a fixed-size input
of 64 KiB or more (wire.VIEW_MIN_BYTES) is a zero-copy view of a private
copy-on-write mapping of the server's file (MAP_PRIVATE: the model's writes
land in pages of the worker's own, see shm.InputFiles), valid while
`execute` runs; smaller inputs and BYTES are copies. Tensors a model builds
wrap the model's array, which the worker copies into shared memory when the
response is sent.

A GPU tensor (from `Tensor.from_dlpack` of CUDA memory) is a GpuTensor: it
holds the producer (see gpu.py) instead of an array; `to_host` copies it
when it leaves for the server, which takes host memory only.
"""

import numpy as np

from . import dlpack, gpu
from .dtypes import TRITONSERVER_TYPE_BF16, TRITONSERVER_TYPE_BYTES, array_triton_type
from .errors import TritonModelException


def _check_name(name):
    if not isinstance(name, str):
        raise TypeError(f"Tensor name must be a str, found type '{type(name)}'")
    if name == "":
        raise TritonModelException("Tensor name cannot be an empty string.")


class Tensor:
    """`Tensor(name, numpy_array)`; `name()`, `as_numpy()`, `shape()`,
    `triton_dtype()`, `is_cpu()`, `to_dlpack()`, `Tensor.from_dlpack()`."""

    __slots__ = ("_name", "_array", "_triton_type")

    def __init__(self, name, numpy_array):
        if type(name) is not str or not name:
            _check_name(name)
        array = numpy_array if isinstance(numpy_array, np.ndarray) else np.asarray(numpy_array)
        triton_type = array_triton_type(array.dtype)
        if triton_type == TRITONSERVER_TYPE_BF16:
            array = array.view(np.uint16)
        self._name = name
        self._array = array
        self._triton_type = triton_type

    @classmethod
    def _wrap(cls, name, array, triton_type):
        """A Tensor over `array` already in storage form (object array for
        BYTES, raw uint16 for BF16), skipping the checks of `__init__`."""
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._array = array
        tensor._triton_type = triton_type
        return tensor

    def name(self):
        """The tensor's name."""
        return self._name

    def as_numpy(self):
        """The tensor's data as a numpy array (object array of bytes for
        BYTES). Raises for BF16, which numpy cannot represent."""
        if self._triton_type == TRITONSERVER_TYPE_BF16:
            raise TritonModelException(
                "Tensor dtype is BF16 and cannot be converted to NumPy. Use "
                "to_dlpack() and from_dlpack() instead."
            )
        return self._array

    def triton_dtype(self):
        """The TRITONSERVER_DataType number (pb_utils.TRITONSERVER_TYPE_*)."""
        return self._triton_type

    def shape(self):
        """The dimensions, as a list of ints."""
        return [int(dim) for dim in self._array.shape]

    def is_cpu(self):
        """True: the tensor is in CPU memory (inputs always are)."""
        return True

    def to_dlpack(self):
        """A DLPack capsule of the tensor (zero-copy unless its array is
        read-only, which exports a copy)."""
        return self.__dlpack__()

    def __dlpack__(self, stream=None, **protocol_options):
        if self._triton_type == TRITONSERVER_TYPE_BYTES:
            raise TritonModelException("DLPack does not have support for string tensors.")
        return dlpack.export_capsule(
            self._array, self._triton_type == TRITONSERVER_TYPE_BF16, **protocol_options
        )

    def __dlpack_device__(self):
        return (dlpack.KDL_CPU, 0)

    @staticmethod
    def from_dlpack(name, tensor):
        """A Tensor named `name` sharing the memory of `tensor`, a DLPack
        capsule or an object with `__dlpack__`/`__dlpack_device__`."""
        _check_name(name)
        if isinstance(tensor, GpuTensor):
            return GpuTensor(name, tensor._data)
        if not isinstance(tensor, np.ndarray) and dlpack.device_type(tensor) == dlpack.KDL_CUDA:
            return GpuTensor(name, gpu.hold(tensor))
        array, bf16 = dlpack.import_array(tensor)
        if bf16:
            return Tensor._wrap(name, array, TRITONSERVER_TYPE_BF16)
        return Tensor(name, array)

    def to_host(self):
        """The tensor in host memory (itself, for a CPU tensor)."""
        return self

    def __repr__(self):
        return f"Tensor({self._name!r}, dtype={self._triton_type}, shape={self.shape()})"


class GpuTensor(Tensor):
    """A Tensor over GPU memory: no array; DLPack hands out the GPU memory
    itself, as Triton's does."""

    __slots__ = ("_data",)

    def __init__(self, name, data):
        self._name = name
        self._array = None
        self._triton_type = data.triton_type
        self._data = data

    def as_numpy(self):
        raise TritonModelException("Tensor is stored in GPU and cannot be converted to NumPy.")

    def shape(self):
        return list(self._data.shape)

    def is_cpu(self):
        return False

    def __dlpack__(self, stream=None, **protocol_options):
        return self._data.export(stream, **protocol_options)

    def __dlpack_device__(self):
        return (dlpack.KDL_CUDA, self._data.device_id)

    def to_host(self):
        """A CPU Tensor with a host copy of the data (the producer copies)."""
        array, bf16 = gpu.host_array(self._data, self._name)
        if bf16:
            return Tensor._wrap(self._name, array, TRITONSERVER_TYPE_BF16)
        return Tensor(self._name, array)

    def __repr__(self):
        return (f"Tensor({self._name!r}, dtype={self._triton_type}, shape={self.shape()}, "
                f"device=cuda:{self._data.device_id})")
