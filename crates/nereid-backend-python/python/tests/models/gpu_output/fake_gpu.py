"""Stand-ins for CUDA tensors, so GPU paths run on machines without one.

FakeGpuArray plays a DLPack 1.0 producer (cupy, recent torch): it says it
lives on CUDA device `device_id`, exports capsules labelled kDLCUDA (over
host memory that nothing reads as device memory), and copies itself to the
CPU when asked with `dl_device=(1, 0), copy=True`. LegacyGpuArray refuses
those keywords, as producers before DLPack 1.0 do; FakeTorch stands in for
the torch module to check the `.cpu()` fallback.
"""

import ctypes

import numpy as np

KDL_CPU, KDL_CUDA = 1, 2


def cuda_capsule(array, device_id=0, **protocol_options):
    """A capsule over `array` whose DLTensor says it is on CUDA `device_id`."""
    capsule = array.__dlpack__(**protocol_options)
    name = b"dltensor_versioned" if protocol_options.get("max_version") else b"dltensor"
    ctypes.pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
    ctypes.pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    address = ctypes.pythonapi.PyCapsule_GetPointer(capsule, name)
    if name == b"dltensor_versioned":
        address += 32
    device = (ctypes.c_int32 * 2).from_address(address + 8)
    device[0], device[1] = KDL_CUDA, device_id
    return capsule


class FakeGpuArray:
    def __init__(self, array, device_id=0):
        self.array = np.ascontiguousarray(array)
        self.device_id = device_id
        self.calls = []

    def __dlpack_device__(self):
        return (KDL_CUDA, self.device_id)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        self.calls.append({"stream": stream, "dl_device": dl_device, "copy": copy})
        options = {} if max_version is None else {"max_version": max_version}
        if dl_device is None or tuple(dl_device) == self.__dlpack_device__():
            if copy:
                raise BufferError("a copy on the device is not supported")
            return cuda_capsule(self.array, self.device_id, **options)
        if tuple(dl_device) == (KDL_CPU, 0):
            return np.array(self.array).__dlpack__(**options)
        raise BufferError(f"cannot export to device {dl_device}")


class LegacyGpuArray(FakeGpuArray):
    def __dlpack__(self, stream=None):
        self.calls.append({"stream": stream})
        return cuda_capsule(self.array, self.device_id)


class FakeTorch:
    """Enough of the torch module for the worker's `.cpu()` fallback."""

    class Tensor(LegacyGpuArray):
        def detach(self):
            return self

        def cpu(self):
            return np.array(self.array)
