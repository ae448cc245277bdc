"""The binary messages of the request path (README.md, "Messages on the
request path"; the server's side is src/message.rs): `execute` in,
`responses` and `response` out, `release` and `cancel` in; and a BLS
call's `bls` out, `bls_response` in and `bls_release` out. Little-endian
integers; a string is a u32 length and UTF-8; a list a u32 count and its
items; a tensor its name, Triton type number, shape and region (an index
into the message's file table, offset, size).
"""

import struct

from .wire import ProtocolError, place_tensors

_U8 = struct.Struct("<B")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
# A request's flags and timeout, after its correlation ID.
_FLAGS_TIMEOUT = struct.Struct("<IQ")
# A tensor's type and rank, after its name.
_TYPE_RANK = struct.Struct("<BI")
_REGION = struct.Struct("<IQQ")

# TritonError codes by number on the wire, and back.
CODES = ("UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE",
         "UNSUPPORTED", "ALREADY_EXISTS", "CANCELLED")
_CODE_NUMBERS = {name: number for number, name in enumerate(CODES)}


class _Cursor:
    """Reads a payload; running past its end is a ProtocolError."""

    __slots__ = ("data", "at")

    def __init__(self, data):
        self.data = data
        self.at = 0

    def unpack(self, layout):
        at = self.at
        try:
            values = layout.unpack_from(self.data, at)
        except struct.error:
            raise ProtocolError(f"the message ends at byte {len(self.data)}, inside a field at {at}") from None
        self.at = at + layout.size
        return values

    def str(self):
        (length,) = self.unpack(_U32)
        at = self.at
        end = at + length
        if end > len(self.data):
            raise ProtocolError(f"a string of {length} bytes at {at} runs past the message's end")
        self.at = end
        try:
            return self.data[at:end].decode("utf-8")
        except UnicodeDecodeError as error:
            raise ProtocolError(f"a string at {at} is not UTF-8: {error}") from None

    def count(self, least):
        (n,) = self.unpack(_U32)
        if n * least > len(self.data) - self.at:
            raise ProtocolError(f"a count of {n} is more than the message holds")
        return n

    def parameters(self):
        parameters = {}
        for _ in range(self.count(6)):
            key = self.str()
            (tag,) = self.unpack(_U8)
            if tag == 0:
                parameters[key] = bool(self.unpack(_U8)[0])
            elif tag == 1:
                parameters[key] = self.unpack(_I64)[0]
            elif tag == 2:
                parameters[key] = self.unpack(_U64)[0]
            elif tag == 3:
                parameters[key] = self.unpack(_F64)[0]
            elif tag == 4:
                parameters[key] = self.str()
            else:
                raise ProtocolError(f"parameter '{key}' has type tag {tag}")
        return parameters

    def files(self):
        return [self.str() for _ in range(self.count(4))]

    def tensor(self, files):
        """(name, Triton type number, shape, path, offset, size)."""
        name = self.str()
        triton_type, rank = self.unpack(_TYPE_RANK)
        if rank * 8 > len(self.data) - self.at:
            raise ProtocolError(f"tensor '{name}': a rank of {rank} is more than the message holds")
        shape = struct.unpack_from(f"<{rank}q", self.data, self.at) if rank else ()
        self.at += 8 * rank
        file, offset, size = self.unpack(_REGION)
        if file >= len(files):
            raise ProtocolError(f"tensor '{name}' names file {file} of {len(files)}")
        return name, triton_type, shape, files[file], offset, size


class Request:
    """One request of an `execute` message, as decoded."""

    __slots__ = ("key", "request_id", "correlation_id", "flags", "timeout", "parameters",
                 "outputs", "inputs")


def decode_execute(payload):
    """(read, [Request, ...]) of an `execute` message."""
    r = _Cursor(payload)
    (read,) = r.unpack(_U64)
    files = r.files()
    requests = []
    for _ in range(r.count(30)):
        request = Request()
        (request.key,) = r.unpack(_U64)
        request.request_id = r.str()
        (tag,) = r.unpack(_U8)
        request.correlation_id = r.str() if tag == 1 else r.unpack(_U64)[0]
        request.flags, request.timeout = r.unpack(_FLAGS_TIMEOUT)
        request.parameters = r.parameters()
        request.outputs = [r.str() for _ in range(r.count(4))]
        request.inputs = [r.tensor(files) for _ in range(r.count(25))]
        requests.append(request)
    if r.at != len(payload):
        raise ProtocolError("the execute message has bytes past its end")
    return read, requests


def decode_bls_response(payload):
    """(tag, [(outputs, error, parameters), ...]) of a `bls_response`
    message: each output as `_Cursor.tensor` gives it, each error as
    (message, code name) or None."""
    r = _Cursor(payload)
    (tag,) = r.unpack(_U64)
    files = r.files()
    entries = []
    for _ in range(r.count(1)):
        (failed,) = r.unpack(_U8)
        if failed:
            message = r.str()
            (code,) = r.unpack(_U8)
            entries.append(([], (message, CODES[code] if code < len(CODES) else "INTERNAL"), {}))
            continue
        parameters = r.parameters()
        outputs = [r.tensor(files) for _ in range(r.count(25))]
        entries.append((outputs, None, parameters))
    if r.at != len(payload):
        raise ProtocolError("the bls_response message has bytes past its end")
    return tag, entries


def tag(tag):
    """A `bls_release` message: the call's tag."""
    return _U64.pack(tag)


def bls_head(tag, decoupled, request):
    """What a `bls` message starts with, before its file table and inputs:
    the call's tag and flags, and the pb_utils InferenceRequest's fields."""
    head = Encoder()
    parts = head.parts
    parts.append(_U64.pack(tag) + _U8.pack(1 if decoupled else 0))
    head.str(request._model_name)
    head.number_or_str(request._model_version, _I64)
    head.str(request._request_id)
    head.number_or_str(request._correlation_id, _U64)
    parts.append(_FLAGS_TIMEOUT.pack(request._flags, request._timeout))
    head.parameters(request._parameters)
    names = sorted(request._requested_output_names)
    parts.append(_U32.pack(len(names)))
    for name in names:
        head.str(name)
    return b"".join(parts)


def decode_release(payload):
    """The `read` count of a `release` message."""
    return _Cursor(payload).unpack(_U64)[0]


def decode_cancel(payload):
    """The request ids of a `cancel` message."""
    r = _Cursor(payload)
    return [r.unpack(_U64)[0] for _ in range(r.count(8))]


class Encoder:
    """Builds an outgoing message: a file table of the arena files its
    tensors lie in, then the body."""

    __slots__ = ("parts", "files")

    def __init__(self):
        self.parts = []
        self.files = {}

    def str(self, text):
        data = text.encode("utf-8")
        self.parts.append(_U32.pack(len(data)))
        self.parts.append(data)

    def number_or_str(self, value, layout):
        """`u8 1, str` for a string, else `u8 0` and the number in `layout`
        (a version, a correlation ID)."""
        if isinstance(value, str):
            self.parts.append(b"\1")
            self.str(value)
        else:
            self.parts.append(b"\0" + layout.pack(value))

    def error(self, message, code):
        self.str(message)
        self.parts.append(_U8.pack(_CODE_NUMBERS.get(code, 1)))

    def parameters(self, parameters):
        self.parts.append(_U32.pack(len(parameters)))
        if not parameters:
            return
        for key, value in parameters.items():
            self.str(str(key))
            if isinstance(value, bool):
                self.parts.append(b"\0" + _U8.pack(value))
            elif isinstance(value, int):
                if value < 0 or value < (1 << 63):
                    self.parts.append(b"\1" + _I64.pack(value))
                else:
                    self.parts.append(b"\2" + _U64.pack(value))
            elif isinstance(value, float):
                self.parts.append(b"\3" + _F64.pack(value))
            else:
                self.parts.append(b"\4")
                self.str(str(value))

    def tensors(self, tensors, arena):
        """Writes Tensors into one new arena Block (see wire.place_tensors)
        and their entries here; returns the Block (None when there are
        none)."""
        self.parts.append(_U32.pack(len(tensors)))
        if not tensors:
            return None
        tensors, sizes, offsets, block = place_tensors(tensors, arena)
        file = self.files.setdefault(block.path, len(self.files))
        region = _REGION
        for tensor, size, offset in zip(tensors, sizes, offsets):
            # The name, type and shape in one call (struct caches the layout).
            name = tensor._name.encode("utf-8")
            shape = tensor._array.shape
            self.parts.append(struct.pack(f"<I{len(name)}sBI{len(shape)}q", len(name), name,
                                          tensor._triton_type, len(shape), *shape))
            self.parts.append(region.pack(file, offset, size))
        return block

    def entry(self, response, wanted, arena, blocks):
        """An InferenceResponse: its error, or its parameters and its outputs
        among `wanted` (names), written to the arena in a Block appended to
        `blocks`."""
        error = response._error
        if error is not None:
            self.parts.append(b"\1")
            self.error(error.message(), error.code().name)
            return
        self.parts.append(b"\0")
        self.parameters(response._parameters)
        tensors = [tensor for tensor in response._output_tensors if tensor._name in wanted]
        block = self.tensors(tensors, arena)
        if block is not None:
            blocks.append(block)

    def message(self, head=b""):
        """The payload: `head`, the file table, then the body."""
        table = [_U32.pack(len(self.files))]
        for path in self.files:
            data = path.encode("utf-8")
            table.append(_U32.pack(len(data)))
            table.append(data)
        return b"".join([head, *table, *self.parts])


def batch_error(message):
    """A `responses` message failing the whole batch."""
    data = message.encode("utf-8")
    return b"\1" + _U32.pack(len(data)) + data


# Slot tags of a `responses` message.
SLOT_KEPT, SLOT_ANSWERED, SLOT_RESCHEDULED = b"\0", b"\1", b"\2"


def response_head(key, final, note=False):
    """What a `response` message starts with, before its file table: the
    request's id and flags (1: final; 2: a final flag the worker sent
    itself, the model having dropped the request without one)."""
    return _U64.pack(key) + _U8.pack((1 if final else 0) | (2 if note else 0))
