"""The server's side of the request path's binary messages, for the
harness: `execute`, `cancel`, `release` and `bls_response` are written from
the dicts the tests build (the shapes of README.md, ids as strings), and
`responses`, `response`, `bls` and `bls_release` are read back into such
dicts, so that the tests read what the worker sent as plainly as JSON."""

import struct

from nereid_pb.channel import BLS_RESPONSE, CANCEL, EXECUTE, RELEASE
from nereid_pb.dtypes import FROM_WIRE, WIRE_NAMES
from nereid_pb.messages import CODES

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class Keys:
    """Request ids: the tests' strings, u64 on the wire. A string of digits
    is its number; others get numbers from 1 << 32 on."""

    def __init__(self):
        self._numbers = {}
        self._names = {}

    def number(self, key):
        key = str(key)
        if key.isdigit():
            return int(key)
        if key not in self._numbers:
            number = (1 << 32) + len(self._numbers)
            self._numbers[key] = number
            self._names[number] = key
        return self._numbers[key]

    def name(self, number):
        return self._names.get(number, str(number))


class _Out:
    def __init__(self):
        self.parts = []

    def raw(self, data):
        self.parts.append(data)

    def pack(self, layout, *values):
        self.parts.append(struct.pack(layout, *values))

    def str(self, text):
        data = text.encode("utf-8")
        self.pack("<I", len(data))
        self.parts.append(data)

    def bytes(self):
        return b"".join(self.parts)


def _parameters(out, parameters):
    out.pack("<I", len(parameters))
    for key, value in parameters.items():
        out.str(key)
        if isinstance(value, bool):
            out.pack("<BB", 0, value)
        elif isinstance(value, int):
            out.pack("<Bq", 1, value)
        elif isinstance(value, float):
            out.pack("<Bd", 3, value)
        else:
            out.raw(b"\4")
            out.str(str(value))


def _entry(out, files, entry):
    """A response entry given as a dict (`outputs` descriptors, `error`,
    `parameters`)."""
    error = entry.get("error")
    if error:
        out.raw(b"\1")
        out.str(error.get("message", ""))
        out.pack("<B", CODES.index(error.get("code", "INTERNAL")))
        return
    out.raw(b"\0")
    _parameters(out, entry.get("parameters") or {})
    _tensors(out, files, entry.get("outputs") or [])


def _tensors(out, files, descriptors):
    out.pack("<I", len(descriptors))
    for descriptor in descriptors:
        shm = descriptor["shm"]
        file = files.setdefault(shm["path"], len(files))
        out.str(descriptor["name"])
        shape = descriptor["shape"]
        out.pack("<BI", FROM_WIRE[descriptor["datatype"]], len(shape))
        out.pack(f"<{len(shape)}q", *shape)
        out.pack("<IQQ", file, shm["offset"], shm["size"])


def _files(files):
    out = _Out()
    out.pack("<I", len(files))
    for path in files:
        out.str(path)
    return out.bytes()


def encode(message, keys):
    """(kind, payload) of a message given as a dict."""
    op = message["op"]
    if op == "bls_response":
        response, files, body = message["response"], {}, _Out()
        entries = response["responses"] if "responses" in response else [response]
        body.pack("<I", len(entries))
        for entry in entries:
            _entry(body, files, entry)
        return BLS_RESPONSE, _U64.pack(message["tag"]) + _files(files) + body.bytes()
    if op == "release":
        return RELEASE, _U64.pack(message["read"])
    if op == "cancel":
        ids = [keys.number(key) for key in message["request_ids"]]
        return CANCEL, _U32.pack(len(ids)) + b"".join(_U64.pack(i) for i in ids)
    assert op == "execute", op
    files = {}
    body = _Out()
    requests = message["requests"]
    body.pack("<I", len(requests))
    for request in requests:
        body.pack("<Q", keys.number(request["id"]))
        body.str(request.get("request_id", str(request["id"])))
        correlation_id = request.get("correlation_id", 0)
        if isinstance(correlation_id, str):
            body.raw(b"\1")
            body.str(correlation_id)
        else:
            body.pack("<BQ", 0, correlation_id)
        body.pack("<IQ", request.get("flags", 0), request.get("timeout", 0))
        _parameters(body, request.get("parameters") or {})
        names = request.get("requested_output_names", [])
        body.pack("<I", len(names))
        for name in names:
            body.str(name)
        _tensors(body, files, request.get("inputs", []))
    read = _U64.pack(message.get("read", 0xFFFFFFFFFFFFFFFF))
    return EXECUTE, read + _files(files) + body.bytes()


class _In:
    def __init__(self, data):
        self.data = data
        self.at = 0

    def unpack(self, layout):
        values = struct.unpack_from(layout, self.data, self.at)
        self.at += struct.calcsize(layout)
        return values

    def one(self, layout):
        return self.unpack(layout)[0]

    def str(self):
        length = self.one("<I")
        text = self.data[self.at:self.at + length].decode("utf-8")
        self.at += length
        return text

    def files(self):
        return [self.str() for _ in range(self.one("<I"))]

    def parameters(self):
        parameters = {}
        for _ in range(self.one("<I")):
            key = self.str()
            tag = self.one("<B")
            parameters[key] = {
                0: lambda: bool(self.one("<B")), 1: lambda: self.one("<q"),
                2: lambda: self.one("<Q"), 3: lambda: self.one("<d"), 4: self.str,
            }[tag]()
        return parameters

    def tensors(self, files):
        tensors = []
        for _ in range(self.one("<I")):
            name = self.str()
            triton_type, rank = self.unpack("<BI")
            shape = list(self.unpack(f"<{rank}q"))
            file, offset, size = self.unpack("<IQQ")
            tensors.append({"name": name, "datatype": WIRE_NAMES[triton_type], "shape": shape,
                            "shm": {"path": files[file], "offset": offset, "size": size}})
        return tensors

    def entry(self, files):
        if self.one("<B"):
            message = self.str()
            return {"outputs": [], "error": {"message": message, "code": CODES[self.one("<B")]},
                    "parameters": {}}
        parameters = self.parameters()
        return {"outputs": self.tensors(files), "error": None, "parameters": parameters}


def decode_responses(payload, keys, request_ids):
    """A `responses` message as the dict README.md's JSON shapes describe;
    `request_ids` are the execute's ids, in order (for `rescheduled`)."""
    r = _In(payload)
    if r.one("<B"):
        return {"op": "responses", "responses": None,
                "error": {"message": r.str(), "code": "INTERNAL"}}
    files = r.files()
    responses, rescheduled = [], []
    for index in range(r.one("<I")):
        tag = r.one("<B")
        if tag == 1:
            responses.append(r.entry(files))
        else:
            responses.append(None)
            if tag == 2:
                rescheduled.append(str(request_ids[index]))
    assert r.at == len(payload), "bytes past the end of a responses message"
    answer = {"op": "responses", "responses": responses, "error": None}
    if rescheduled:
        answer["rescheduled"] = rescheduled
    return answer


def decode_response(payload, keys):
    """A `response` message as a dict."""
    r = _In(payload)
    key = r.one("<Q")
    flags = r.one("<B")
    files = r.files()
    response = r.entry(files) if r.one("<B") else None
    assert r.at == len(payload), "bytes past the end of a response message"
    message = {"op": "response", "id": keys.name(key), "response": response, "final": bool(flags & 1)}
    if flags & 2:
        message["note"] = "released"
    return message


def decode_bls(payload):
    """A `bls` message as a dict: {"op": "bls", "tag", "decoupled",
    "request": {...the call's fields, "inputs": [descriptors]}}."""
    r = _In(payload)
    tag, flags = r.unpack("<QB")
    request = {"model_name": r.str()}
    request["model_version"] = r.str() if r.one("<B") else r.one("<q")
    request["requested_output_names"] = None  # in the order README.md gives
    request["request_id"] = r.str()
    request["correlation_id"] = r.str() if r.one("<B") else r.one("<Q")
    request["flags"], request["timeout"] = r.unpack("<IQ")
    request["parameters"] = r.parameters()
    request["requested_output_names"] = [r.str() for _ in range(r.one("<I"))]
    files = r.files()
    request["inputs"] = r.tensors(files)
    assert r.at == len(payload), "bytes past the end of a bls message"
    return {"op": "bls", "tag": tag, "decoupled": bool(flags & 1), "request": request}
