"""The worker's side of the control pipe and of tensor descriptors.

A frame is a 4-byte little-endian length and that many bytes of UTF-8 JSON
holding one object. A tensor travels as a descriptor
`{"name", "datatype", "shape", "shm": {"path", "offset", "size"}}` whose
bytes lie in a shared-memory file (see shm.py and README.md).
"""

import json
import math
import struct
import threading

import numpy as np

from .dtypes import (
    FROM_WIRE,
    STORAGE_DTYPES,
    TRITONSERVER_TYPE_BYTES,
    WIRE_NAMES,
    decode_bytes,
    encode_bytes,
    object_array,
)
from .tensor import Tensor

_HEADER = struct.Struct("<I")


class ProtocolError(Exception):
    """A frame the worker cannot make sense of."""


class ChannelClosed(ConnectionError):
    """The server end of the pipe is gone."""


class FrameChannel:
    """Frames in from `reader`, out to `writer` (binary streams). `send` is
    thread-safe: the main thread, BLS callers and loggers all write."""

    def __init__(self, reader, writer):
        self._reader = reader
        self._writer = writer
        self._lock = threading.Lock()

    def send(self, message):
        payload = json.dumps(
            message, ensure_ascii=False, allow_nan=False, separators=(",", ":")
        ).encode("utf-8")
        try:
            with self._lock:
                self._writer.write(_HEADER.pack(len(payload)) + payload)
                self._writer.flush()
        except (OSError, ValueError) as error:
            raise ChannelClosed(f"cannot write to the Nereid server: {error}") from error

    def receive(self):
        """The next message, or None at end of input. A frame whose payload
        is not a JSON object raises ProtocolError (the stream stays usable)."""
        header = self._reader.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return None
        (length,) = _HEADER.unpack(header)
        payload = self._reader.read(length)
        if len(payload) < length:
            return None
        try:
            message = json.loads(payload)
        except ValueError as error:
            raise ProtocolError(f"frame is not valid JSON: {error}") from None
        if not isinstance(message, dict):
            raise ProtocolError(f"frame holds a JSON {type(message).__name__}, not an object")
        return message


def _field(mapping, key, kind, what):
    value = mapping.get(key) if isinstance(mapping, dict) else None
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ProtocolError(f"{what}: '{key}' is missing or not a {kind.__name__}")
    return value


def read_tensor(descriptor, files, copy):
    """The Tensor a descriptor points at. With `copy`, the data is copied out
    of the file (BLS outputs, whose memory the server reuses after
    `bls_release`); otherwise fixed-size data is a read-only view of the
    file. BYTES are always decoded into a new object array of bytes."""
    name = _field(descriptor, "name", str, "tensor descriptor")
    what = f"tensor '{name}'"
    datatype = _field(descriptor, "datatype", str, what)
    shape = _field(descriptor, "shape", list, what)
    if not all(isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0 for dim in shape):
        raise ProtocolError(f"{what}: shape {shape} is not a list of non-negative ints")
    triton_type = FROM_WIRE.get(datatype)
    if triton_type is None:
        raise ProtocolError(f"{what}: unknown datatype '{datatype}'")
    shm = _field(descriptor, "shm", dict, what)
    size = _field(shm, "size", int, what)
    region = files.region(_field(shm, "path", str, what), _field(shm, "offset", int, what), size)
    count = math.prod(shape)
    if triton_type == TRITONSERVER_TYPE_BYTES:
        try:
            items = decode_bytes(region)
        except ValueError as error:
            raise ProtocolError(f"{what}: {error}") from None
        if len(items) != count:
            raise ProtocolError(f"{what}: holds {len(items)} BYTES elements, shape {shape} needs {count}")
        return Tensor._wrap(name, object_array(items, shape), triton_type)
    dtype = STORAGE_DTYPES[triton_type]
    if size != count * dtype.itemsize:
        raise ProtocolError(
            f"{what}: {size} bytes do not fit shape {shape} of {datatype} "
            f"({count * dtype.itemsize} bytes)"
        )
    array = np.frombuffer(region, dtype=dtype, count=count).reshape(shape)
    if copy:
        array = array.copy()
    return Tensor._wrap(name, array, triton_type)


def write_tensor(tensor, arena):
    """Copy a Tensor into a new arena Block; returns (descriptor, block)."""
    array = tensor._array
    if tensor._triton_type == TRITONSERVER_TYPE_BYTES:
        payload = encode_bytes(array)
        block = arena.allocate(len(payload))
        writer = arena.write_bytes
    else:
        payload = array
        block = arena.allocate(array.nbytes)
        writer = arena.write_array
    try:
        if block.size:
            writer(block, payload)
    except BaseException:
        arena.free(block)
        raise
    descriptor = {
        "name": tensor._name,
        "datatype": WIRE_NAMES[tensor._triton_type],
        "shape": [int(dim) for dim in array.shape],
        "shm": {"path": block.path, "offset": block.offset, "size": block.size},
    }
    return descriptor, block


def write_tensors(tensors, arena):
    """Descriptors and Blocks for several tensors; on failure frees the
    Blocks already written and re-raises."""
    descriptors, blocks = [], []
    try:
        for tensor in tensors:
            descriptor, block = write_tensor(tensor, arena)
            descriptors.append(descriptor)
            blocks.append(block)
    except BaseException:
        for block in blocks:
            arena.free(block)
        raise
    return descriptors, blocks
