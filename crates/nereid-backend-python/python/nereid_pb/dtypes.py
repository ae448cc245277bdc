"""Triton data types and the BYTES element framing.

One table serves both the public pb_utils functions (which speak Triton's
TRITONSERVER_DataType numbers, as Triton's own functions do) and the worker's
shared-memory codec (which speaks the KServe wire names, "FP32", "BYTES").

BF16: numpy has no bfloat16, and Triton's Python backend does not map it
either (`triton_to_numpy_type` knows types 1..13; `Tensor.as_numpy()` on a
BF16 tensor raises and points at DLPack). Nereid does the same: a BF16 tensor
keeps its raw 16-bit words in a uint16 array and is reached through DLPack.
"""

import struct

import numpy as np

from .errors import TritonModelException

TRITONSERVER_TYPE_INVALID = 0
TRITONSERVER_TYPE_BOOL = 1
TRITONSERVER_TYPE_UINT8 = 2
TRITONSERVER_TYPE_UINT16 = 3
TRITONSERVER_TYPE_UINT32 = 4
TRITONSERVER_TYPE_UINT64 = 5
TRITONSERVER_TYPE_INT8 = 6
TRITONSERVER_TYPE_INT16 = 7
TRITONSERVER_TYPE_INT32 = 8
TRITONSERVER_TYPE_INT64 = 9
TRITONSERVER_TYPE_FP16 = 10
TRITONSERVER_TYPE_FP32 = 11
TRITONSERVER_TYPE_FP64 = 12
TRITONSERVER_TYPE_BYTES = 13
TRITONSERVER_TYPE_BF16 = 14

# Triton's table for model-configuration type names (note TYPE_BOOL -> bool).
TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# Triton type number -> numpy type, in the order Triton's functions test them.
_NUMPY_TYPES = (
    (TRITONSERVER_TYPE_BOOL, np.bool_),
    (TRITONSERVER_TYPE_UINT8, np.uint8),
    (TRITONSERVER_TYPE_UINT16, np.uint16),
    (TRITONSERVER_TYPE_UINT32, np.uint32),
    (TRITONSERVER_TYPE_UINT64, np.uint64),
    (TRITONSERVER_TYPE_INT8, np.int8),
    (TRITONSERVER_TYPE_INT16, np.int16),
    (TRITONSERVER_TYPE_INT32, np.int32),
    (TRITONSERVER_TYPE_INT64, np.int64),
    (TRITONSERVER_TYPE_FP16, np.float16),
    (TRITONSERVER_TYPE_FP32, np.float32),
    (TRITONSERVER_TYPE_FP64, np.float64),
    (TRITONSERVER_TYPE_BYTES, np.object_),
)
_TO_NUMPY = dict(_NUMPY_TYPES)

WIRE_NAMES = {
    TRITONSERVER_TYPE_BOOL: "BOOL",
    TRITONSERVER_TYPE_UINT8: "UINT8",
    TRITONSERVER_TYPE_UINT16: "UINT16",
    TRITONSERVER_TYPE_UINT32: "UINT32",
    TRITONSERVER_TYPE_UINT64: "UINT64",
    TRITONSERVER_TYPE_INT8: "INT8",
    TRITONSERVER_TYPE_INT16: "INT16",
    TRITONSERVER_TYPE_INT32: "INT32",
    TRITONSERVER_TYPE_INT64: "INT64",
    TRITONSERVER_TYPE_FP16: "FP16",
    TRITONSERVER_TYPE_FP32: "FP32",
    TRITONSERVER_TYPE_FP64: "FP64",
    TRITONSERVER_TYPE_BYTES: "BYTES",
    TRITONSERVER_TYPE_BF16: "BF16",
}
FROM_WIRE = {name: number for number, name in WIRE_NAMES.items()}

# How fixed-size elements sit in shared memory: little-endian, BF16 as raw u16.
STORAGE_DTYPES = {
    number: np.dtype(numpy_type).newbyteorder("<")
    for number, numpy_type in _NUMPY_TYPES
    if number != TRITONSERVER_TYPE_BYTES
}
STORAGE_DTYPES[TRITONSERVER_TYPE_BF16] = np.dtype("<u2")

_LENGTH = struct.Struct("<I")


def triton_to_numpy_type(data_type):
    """numpy type for a Triton type number (1..13), else None, as Triton."""
    return _TO_NUMPY.get(data_type)


def numpy_to_triton_type(data_type):
    """Triton type number for a numpy type or dtype, else None, as Triton
    (np.bytes_ also maps to BYTES)."""
    for number, numpy_type in _NUMPY_TYPES:
        if data_type == numpy_type:
            return number
    if data_type == np.bytes_:
        return TRITONSERVER_TYPE_BYTES
    return None


def triton_string_to_numpy(triton_type_string):
    """numpy type for a model-configuration type name such as "TYPE_FP32"."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


# dtype -> Triton type number, filled by array_triton_type as dtypes show up.
_ARRAY_TYPES = {}


def array_triton_type(dtype):
    """The Triton type a Tensor built from an array of `dtype` carries.

    As Triton: object and bytes_ arrays are BYTES, the twelve numeric types
    map one to one, anything else raises "NumPy dtype is not supported.".
    Beyond Triton: numpy str_ arrays are BYTES too (UTF-8), non-native byte
    orders are accepted (written little-endian), and an ml_dtypes bfloat16
    array is BF16.
    """
    number = _ARRAY_TYPES.get(dtype)
    if number is None:
        if dtype.kind in "OSU":
            number = TRITONSERVER_TYPE_BYTES
        elif dtype.name == "bfloat16" and dtype.itemsize == 2:
            number = TRITONSERVER_TYPE_BF16
        else:
            number = numpy_to_triton_type(dtype.newbyteorder("="))
            if number is None:
                raise TritonModelException("NumPy dtype is not supported.")
        _ARRAY_TYPES[dtype] = number
    return number


def _element_bytes(item):
    """One BYTES element: bytes as they are, anything else as UTF-8 text."""
    if isinstance(item, bytes):
        return bytes(item)
    return str(item).encode("utf-8")


def encode_bytes(array):
    """Triton's BYTES framing of `array` in C order: for each element a u32
    little-endian length, then the bytes."""
    parts = []
    for item in array.ravel(order="C"):
        data = _element_bytes(item)
        parts.append(_LENGTH.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def decode_bytes(buffer):
    """Split Triton's BYTES framing into a list of bytes objects (exact
    copies: NULs, 0xFF and empty elements survive). Raises ValueError on a
    truncated buffer."""
    view = memoryview(buffer).cast("B")
    total = len(view)
    items = []
    offset = 0
    while offset < total:
        if offset + 4 > total:
            raise ValueError(f"BYTES data ends inside an element length at byte {offset}")
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += 4
        end = offset + length
        if end > total:
            raise ValueError(
                f"BYTES element at byte {offset - 4} claims {length} bytes, "
                f"only {total - offset} remain"
            )
        items.append(bytes(view[offset:end]))
        offset = end
    return items


def object_array(items, shape):
    """An object array of `items` with `shape` (np.array could nest them)."""
    array = np.empty(len(items), dtype=np.object_)
    array[:] = items
    return array.reshape(shape)


def serialize_byte_tensor(input_tensor):
    """Triton's helper: the BYTES framing of an object or bytes_ array as
    `bytes`; `()` for an empty array and None for other dtypes, as Triton."""
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype == np.object_ or input_tensor.dtype.type == np.bytes_:
        return encode_bytes(input_tensor)
    return None


def deserialize_bytes_tensor(encoded_tensor):
    """Triton's helper: a 1-D object array of the bytes elements framed in
    `encoded_tensor`."""
    items = decode_bytes(encoded_tensor)
    return object_array(items, (len(items),))
