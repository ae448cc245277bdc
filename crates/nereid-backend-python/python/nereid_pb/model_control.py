"""pb_utils.load_model, unload_model and is_model_ready: the model
repository API as a model calls it (Triton's model loading API).

Each is a call to the server on the side channel (README.md), answered
once done. As in Triton, loads and unloads work in explicit model control
only (`--model-control-mode=explicit`); otherwise they fail with Triton's
"explicit model load / unload is not allowed if polling is enabled".
`is_model_ready` works in any mode. The files of a load travel through the
worker's arena, not in the frame.
"""

import re

from .calls import CAST_ERROR, call, incompatible, server
from .errors import TritonModelException

_LOAD = "(model_name: str, config: str = '', files: object = None) -> None"
_UNLOAD = "(model_name: str, unload_dependents: bool = False) -> None"
_READY = "(model_name: str, model_version: str = '') -> bool"

# What C++'s std::stol reads: leading whitespace, a sign, digits (the rest
# of the string is ignored).
_STOL = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")
_LONG_RANGE = range(-(2**63), 2**63)


def load_model(*args, **kwargs):
    """`load_model(model_name, config="", files=None)`: loads (or reloads)
    a model, from its folder or from `config` (a model config as JSON) and
    `files` (a dict of "file:<version>/<path>" to bytes); returns once it
    is ready, raises TritonModelException when the load fails."""
    try:
        model_name, config, files = _load_arguments(*args, **kwargs)
    except TypeError:
        raise incompatible("load_model", _LOAD, args, kwargs) from None
    contents = []
    if files is not None:
        if not isinstance(files, dict):
            raise TritonModelException(
                f"failed to load model '{model_name}', files should be a dictionary of "
                "file paths and file contents"
            )
        for key, value in files.items():
            if not isinstance(key, str):
                raise RuntimeError(CAST_ERROR)
            if not isinstance(value, bytes):
                raise TypeError(f"Object of type '{type(value).__name__}' is not an instance of 'bytes'")
            contents.append((key, value))
    current = server("pb_utils.load_model")
    block, descriptors = None, []
    if contents:
        block, offsets = current.arena.allocate([len(value) for _, value in contents])
        path = block.path
        for (key, value), offset in zip(contents, offsets):
            if value:
                block.write_bytes(offset, value)
            descriptors.append(
                {"path": key, "shm": {"path": path, "offset": offset, "size": len(value)}}
            )
    try:
        call("pb_utils.load_model", "Failed to load model", "load_model",
             model_name=model_name, config=config, files=descriptors)
    finally:
        if block is not None:
            current.arena.free(block)


def _load_arguments(model_name, config="", files=None):
    if not isinstance(model_name, str) or not isinstance(config, str):
        raise TypeError
    return model_name, config, files


def unload_model(*args, **kwargs):
    """`unload_model(model_name, unload_dependents=False)`: unloads a model
    (requests in flight finish first, after this returns)."""
    try:
        model_name, unload_dependents = _unload_arguments(*args, **kwargs)
    except TypeError:
        raise incompatible("unload_model", _UNLOAD, args, kwargs) from None
    call("pb_utils.unload_model", "Failed to unload model", "unload_model",
         model_name=model_name, unload_dependents=unload_dependents)


def _unload_arguments(model_name, unload_dependents=False):
    # pybind11 takes anything with a truth value but None for a bool here.
    if not isinstance(model_name, str) or unload_dependents is None:
        raise TypeError
    if not isinstance(unload_dependents, (bool, int)) and not hasattr(
        type(unload_dependents), "__bool__"
    ):
        raise TypeError
    return model_name, bool(unload_dependents)


def is_model_ready(*args, **kwargs):
    """`is_model_ready(model_name, model_version="")`: whether the model
    (that version; "": any) is ready."""
    try:
        model_name, model_version = _ready_arguments(*args, **kwargs)
    except TypeError:
        raise incompatible("is_model_ready", _READY, args, kwargs) from None
    prefix = "Failed to check model readiness"
    current = server("pb_utils.is_model_ready")
    try:
        version = _version(model_version)
    except ValueError as error:
        raise TritonModelException(f"{prefix}: {current.failure(str(error))}") from None
    reply = call("pb_utils.is_model_ready", prefix, "model_ready",
                 model_name=model_name, model_version=version)
    return bool(reply.get("ready"))


def _ready_arguments(model_name, model_version=""):
    if not isinstance(model_name, str) or not isinstance(model_version, str):
        raise TypeError
    return model_name, model_version


def _version(text):
    """A version string as Triton reads it (with std::stol): "" is -1 (any
    version); a leading number is taken, the rest ignored."""
    if text == "":
        return -1
    found = _STOL.match(text)
    if found is None or int(found.group(1)) not in _LONG_RANGE:
        raise ValueError(
            f"failed to get model version from specified version string '{text}' "
            "(details: stol), version should be an integral value > 0"
        )
    version = int(found.group(1))
    if version < 0:
        raise ValueError(
            f"failed to get model version from specified version string '{text}', "
            "version should be an integral value > 0"
        )
    return version
