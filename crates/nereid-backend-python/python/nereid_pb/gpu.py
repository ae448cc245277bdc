"""GPU tensors a model hands pb_utils.Tensor.from_dlpack (kDLCUDA).

The worker itself never touches CUDA: it holds the producer (a torch or cupy
tensor, or anything with `__dlpack__`), hands its memory on when the model
asks for DLPack (zero copy), and has the producer copy it to host memory
when the tensor leaves for the server (a response output or a BLS input),
since the server takes tensors in shared host memory. torch and cupy are
imported only when a bare capsule has to be adopted; a producer's own
module is already loaded.
"""

import importlib
import sys

from . import dlpack
from .errors import TritonModelException

# Frameworks that can adopt a bare CUDA capsule, in the order they are tried.
_ADOPTERS = ("torch", "cupy")


class DeviceData:
    """GPU memory held for a Tensor: `source` is the DLPack producer, or a
    bare capsule no framework could adopt (exported once, never copied)."""

    __slots__ = ("source", "device_id", "triton_type", "shape")

    def __init__(self, source, device_id, triton_type, shape):
        self.source = source
        self.device_id = device_id
        self.triton_type = triton_type
        self.shape = shape

    def export(self, stream=None, **protocol_options):
        """A DLPack capsule of the GPU memory, zero copy; `stream` is the
        consumer's, as the DLPack protocol passes it on."""
        if dlpack.is_capsule(self.source):
            dlpack.describe(self.source)  # raises once a consumer took it
            return self.source
        return self.source.__dlpack__(stream=stream, **protocol_options)


def hold(source):
    """DeviceData for a CUDA DLPack producer or capsule."""
    if dlpack.is_capsule(source):
        # Triton consumes the capsule and owns the memory from then on; a
        # framework's tensor over it does the same here.
        described = dlpack.describe(source)
        adopted = _adopt(source)
        return DeviceData(source if adopted is None else adopted, *described)
    # The producer stays the owner; its metadata comes from a capsule that
    # is dropped unconsumed (which releases it).
    described = dlpack.describe(source.__dlpack__(stream=None))
    return DeviceData(source, *described)


def _adopt(capsule):
    """A torch or cupy tensor over a CUDA capsule (consuming it), else None."""
    for name in _ADOPTERS:
        try:
            module = importlib.import_module(name)
            return module.from_dlpack(capsule)
        except Exception:  # not installed, or built without CUDA: try the next
            continue
    return None


def host_array(data, name):
    """(array, is_bf16): a host copy of `data`, made by its producer."""
    if dlpack.is_capsule(data.source):
        raise TritonModelException(
            f"GPU tensor '{name}' was made from a bare DLPack capsule that neither torch "
            "nor cupy could take, so it cannot be copied to host memory for the Nereid "
            "server; pass the framework's tensor to Tensor.from_dlpack instead."
        )
    try:
        # DLPack 1.0: the producer copies to the CPU device itself.
        capsule = data.source.__dlpack__(
            max_version=(1, 0), dl_device=(dlpack.KDL_CPU, 0), copy=True
        )
        return dlpack.import_array(capsule)
    except Exception as error:  # older producers refuse the keywords (TypeError) or the copy
        host = _framework_copy(data.source)
        if host is None:
            raise TritonModelException(
                f"GPU tensor '{name}' cannot be copied to host memory for the Nereid server: "
                f"its producer ({type(data.source).__name__}) does not support "
                f"__dlpack__(dl_device=(1, 0), copy=True) ({error}) and is neither a "
                "torch nor a cupy tensor."
            ) from error
        return dlpack.import_array(host)


def _framework_copy(source):
    """A host copy through the producer's own API (torch, cupy), else None.
    Their modules are in sys.modules whenever `source` is one of theirs."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(source, torch.Tensor):
        return source.detach().cpu()
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(source, cupy.ndarray):
        return source.get()
    return None
