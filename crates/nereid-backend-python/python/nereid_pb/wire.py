"""JSON messages, and tensors in shared memory.

The side channel carries frames: a 4-byte little-endian length and that
many bytes of UTF-8 JSON holding one object (FrameWriter). The channel's
JSON records (channel.py) hold the same objects (`decode_json`). Tensors
travel as regions of shared-memory files (see shm.py and README.md):
`region_tensor` reads one, `place_tensors` writes them to the arena.
"""

import json
import os
import struct
import threading

import numpy as np

from .dtypes import (
    STORAGE_DTYPES,
    TRITONSERVER_TYPE_BYTES,
    WIRE_NAMES,
    decode_bytes,
    encode_bytes,
    object_array,
)
from .tensor import Tensor

_HEADER = struct.Struct("<I")
# Messages are trees of JSON values the worker builds, never circular.
_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, check_circular=False, separators=(",", ":")
)
_DECODER = json.JSONDecoder()

# Fixed-size tensors at least this large are handed to models as views of a
# private mapping; smaller ones are copied, which is cheaper than refreshing
# the mapping's pages (see shm.InputFiles).
VIEW_MIN_BYTES = 64 << 10


class ProtocolError(Exception):
    """A frame the worker cannot make sense of."""


class ChannelClosed(ConnectionError):
    """The server end of the channel is gone."""


def decode_json(payload):
    """The object a JSON record or frame holds; ProtocolError when it is not
    one."""
    try:
        text = payload.decode("utf-8")
        try:
            message, value_end = _DECODER.raw_decode(text)
        except ValueError:
            value_end = -1
        if value_end != len(text):
            # Whitespace around the value, more than one value, or not JSON
            # at all: the full decoder tells which.
            message = json.loads(text)
    except ValueError as error:
        raise ProtocolError(f"frame is not valid JSON: {error}") from None
    if type(message) is not dict:
        raise ProtocolError(f"frame holds a JSON {type(message).__name__}, not an object")
    return message


def to_json(value):
    """`value` as compact JSON text."""
    return _ENCODER.encode(value)


class FrameWriter:
    """Frames out to a file descriptor (the side channel). Thread-safe:
    any thread may log or call."""

    def __init__(self, fd):
        self._fd = fd
        self._lock = threading.Lock()

    def send(self, message):
        """Send a message (a dict)."""
        data = self._frame(_ENCODER.encode(message))
        with self._lock:
            self._write(data)

    def try_send(self, message):
        """Send a message unless another send holds the channel (maybe the
        calling thread itself, from a __del__); whether it was sent."""
        data = self._frame(_ENCODER.encode(message))
        if not self._lock.acquire(blocking=False):
            return False
        try:
            self._write(data)
        finally:
            self._lock.release()
        return True

    @staticmethod
    def _frame(text):
        payload = text.encode("utf-8")
        return _HEADER.pack(len(payload)) + payload

    def _write(self, data):
        try:
            written = os.write(self._fd, data)
            while written < len(data):
                written += os.write(self._fd, memoryview(data)[written:])
        except OSError as error:
            raise ChannelClosed(f"cannot write to the Nereid server: {error}") from error


def region_tensor(name, triton_type, shape, path, offset, size, files, copy=False):
    """The Tensor whose bytes lie at `offset` in the server's file `path`
    (`triton_type` is a TRITONSERVER_TYPE number). Its array is writable and
    never writes to the server's file. With `copy` (BLS outputs, whose
    memory the server reuses after `bls_release`) the data is always
    copied; otherwise a fixed-size tensor of VIEW_MIN_BYTES or more is a
    zero-copy view of a private mapping (see shm.InputFiles). BYTES are
    always decoded into a new object array of bytes."""
    count = 1
    for dim in shape:
        if dim < 0:
            raise ProtocolError(f"tensor '{name}': shape {list(shape)} has a negative dimension")
        count *= dim
    if triton_type == TRITONSERVER_TYPE_BYTES:
        region = memoryview(files.shared(path, offset + size))[offset : offset + size] if size else b""
        try:
            items = decode_bytes(region)
        except ValueError as error:
            raise ProtocolError(f"tensor '{name}': {error}") from None
        if len(items) != count:
            raise ProtocolError(
                f"tensor '{name}': holds {len(items)} BYTES elements, shape {list(shape)} needs {count}"
            )
        return Tensor._wrap(name, object_array(items, shape), triton_type)
    dtype = STORAGE_DTYPES.get(triton_type)
    if dtype is None:
        raise ProtocolError(f"tensor '{name}': unknown type number {triton_type}")
    if size != count * dtype.itemsize:
        raise ProtocolError(
            f"tensor '{name}': {size} bytes do not fit shape {list(shape)} of "
            f"{WIRE_NAMES[triton_type]} ({count * dtype.itemsize} bytes)"
        )
    if size == 0:
        array = np.empty(shape, dtype)
    elif copy or size < VIEW_MIN_BYTES:
        array = np.ndarray(shape, dtype, files.shared(path, offset + size), offset).copy()
    else:
        array = np.ndarray(shape, dtype, files.private(path, offset, size), offset)
    return Tensor._wrap(name, array, triton_type)


def place_tensors(tensors, arena):
    """Copy Tensors into one new arena Block; returns them (GPU tensors
    replaced by their host copies: the server reads shared host memory
    only), their sizes and offsets, and the Block. On failure frees the
    Block and re-raises."""
    tensors = [tensor if tensor._array is not None else tensor.to_host() for tensor in tensors]
    payloads, sizes = [], []
    for tensor in tensors:
        if tensor._triton_type == TRITONSERVER_TYPE_BYTES:
            payload = encode_bytes(tensor._array)
            sizes.append(len(payload))
        else:
            payload = tensor._array
            sizes.append(payload.nbytes)
        payloads.append(payload)
    block, offsets = arena.allocate(sizes)
    try:
        for payload, size, offset in zip(payloads, sizes, offsets):
            if size:
                if type(payload) is bytes:
                    block.write_bytes(offset, payload)
                else:
                    block.write_array(offset, payload)
    except BaseException:
        arena.free(block)
        raise
    return tensors, sizes, offsets, block
