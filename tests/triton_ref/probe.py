#!/usr/bin/env python3
"""Records what the real Triton 2.51 answers, over HTTP and gRPC, for a list of
good and bad requests.  The findings are in docs/triton-reference.md.

Usage (regenerates tests/triton_ref/results.json and results.md):

    scripts/setup-triton.sh
    .tools/triton-venv/bin/python tests/triton_ref/probe.py            # starts Triton itself
    .tools/triton-venv/bin/python tests/triton_ref/probe.py --no-start # Triton already running

By default it starts `scripts/run-triton.sh tests/triton_ref/models
--model-control-mode=explicit --load-model=simple --load-model=identity_bytes`
on ports 18000 (HTTP) / 18001 (gRPC) / 18002 (metrics), and stops it at the end.
The model `broken` (fails in initialize) is loaded through the repository API
during the probe, so it ends up UNAVAILABLE.  Needs `requests` and
`tritonclient[grpc]` (both are in .tools/triton-venv).
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import time

import grpc
import requests
from google.protobuf import json_format
from tritonclient.grpc import service_pb2, service_pb2_grpc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

HTTP = None
GRPC_STUB = None
RESULTS = []  # list of dicts: section, case, request, http/grpc result
KEEP_HEADERS = ("content-type", "inference-header-content-length", "content-length", "content-encoding")

I16 = list(range(1, 17))
ONES = [1] * 16


def http_record(section, case, method, path, body=None, headers=None, note=None):
    """Send one HTTP request and record status, selected headers and body."""
    if isinstance(body, (dict, list)):
        raw = json.dumps(body, separators=(",", ":")).encode()
    elif isinstance(body, str):
        raw = body.encode()
    else:
        raw = body
    # requests sends "Accept-Encoding: gzip, deflate" by default and Triton then
    # compresses; ask for identity unless the case sets it.
    send = {"Accept-Encoding": "identity"}
    send.update(headers or {})
    r = requests.request(method, HTTP + path, data=raw, headers=send, timeout=30)
    hdrs = {k.lower(): v for k, v in r.headers.items() if k.lower() in KEEP_HEADERS}
    content = r.content
    hlen = r.headers.get("Inference-Header-Content-Length")
    if hlen is not None:
        n = int(hlen)
        body_text = content[:n].decode("utf-8", "replace")
        binary = content[n:].hex()
    else:
        body_text = content.decode("utf-8", "replace")
        binary = None
    req_desc = {"method": method, "path": path}
    if raw is not None:
        shown = raw if len(raw) <= 600 else raw[:600] + b"...(%d bytes)" % len(raw)
        req_desc["body"] = shown.decode("utf-8", "backslashreplace")
    if headers:
        req_desc["headers"] = headers
    entry = {
        "section": section,
        "case": case,
        "proto": "http",
        "request": req_desc,
        "status": r.status_code,
        "headers": hdrs,
        "body": body_text,
    }
    if binary is not None:
        entry["binary_hex"] = binary
    if note:
        entry["note"] = note
    RESULTS.append(entry)
    return r


def grpc_record(section, case, rpc, request, note=None):
    """Call one gRPC method and record the code and message (or the response)."""
    fn = getattr(GRPC_STUB, rpc)
    entry = {
        "section": section,
        "case": case,
        "proto": "grpc",
        "request": {"rpc": rpc, "message": pb_dict(request)},
    }
    try:
        resp = fn(request, timeout=30)
        entry["code"] = "OK"
        entry["response"] = pb_dict(resp)
    except grpc.RpcError as e:
        entry["code"] = e.code().name
        entry["message"] = e.details()
    if note:
        entry["note"] = note
    RESULTS.append(entry)
    return entry


# ---------------------------------------------------------------- helpers


def pb_dict(msg):
    try:  # protobuf < 5.26
        return json_format.MessageToDict(msg, including_default_value_fields=True,
                                         preserving_proto_field_name=True)
    except TypeError:  # protobuf >= 5.26 renamed the flag
        return json_format.MessageToDict(msg, always_print_fields_with_no_presence=True,
                                         preserving_proto_field_name=True)


def jin(name, dt, shape, data, **extra):
    d = {"name": name, "datatype": dt, "shape": shape, "data": data}
    d.update(extra)
    return d


def good_json_inputs(batch=1):
    return [
        jin("INPUT0", "INT32", [batch, 16], I16 * batch),
        jin("INPUT1", "INT32", [batch, 16], ONES * batch),
    ]


def binary_request(header, blobs, extra_headers=None, header_len=None):
    h = json.dumps(header, separators=(",", ":")).encode()
    body = h + b"".join(blobs)
    hdrs = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(h) if header_len is None else header_len),
    }
    if extra_headers:
        hdrs.update(extra_headers)
    return body, hdrs


def i32(vals):
    return struct.pack("<%di" % len(vals), *vals)


def bytes_elems(*elems):
    return b"".join(struct.pack("<I", len(e)) + e for e in elems)


def ginput(name, dt, shape, contents=None):
    t = service_pb2.ModelInferRequest.InferInputTensor(name=name, datatype=dt, shape=shape)
    if contents is not None:
        if dt == "BYTES":
            t.contents.bytes_contents.extend(contents)
        else:
            t.contents.int_contents.extend(contents)
    return t


def ginfer(model, inputs, raw=None, outputs=None, version="", **kw):
    req = service_pb2.ModelInferRequest(model_name=model, model_version=version, **kw)
    req.inputs.extend(inputs)
    if raw is not None:
        req.raw_input_contents.extend(raw)
    for o in outputs or []:
        req.outputs.add(name=o)
    return req


# ---------------------------------------------------------------- cases


def probe_http_success():
    s = "success"
    http_record(s, "server metadata", "GET", "/v2")
    http_record(s, "server live", "GET", "/v2/health/live")
    http_record(s, "server ready", "GET", "/v2/health/ready")
    http_record(s, "model ready", "GET", "/v2/models/simple/ready")
    http_record(s, "model version ready", "GET", "/v2/models/simple/versions/1/ready")
    http_record(s, "model metadata", "GET", "/v2/models/simple")
    http_record(s, "model metadata (version)", "GET", "/v2/models/simple/versions/1")
    http_record(s, "model metadata BYTES model", "GET", "/v2/models/identity_bytes")
    http_record(s, "model config", "GET", "/v2/models/simple/config")
    http_record(s, "repository index (explicit mode, before loading broken)", "POST", "/v2/repository/index")
    http_record(s, "repository index ready=true", "POST", "/v2/repository/index", {"ready": True})
    http_record(s, "infer JSON", "POST", "/v2/models/simple/infer", {"inputs": good_json_inputs()})
    http_record(s, "infer JSON with id and requested outputs", "POST", "/v2/models/simple/infer",
                {"id": "my-id", "inputs": good_json_inputs(),
                 "outputs": [{"name": "OUTPUT1"}]})
    http_record(s, "infer JSON, client accepts gzip", "POST", "/v2/models/simple/infer",
                {"inputs": good_json_inputs()}, {"Accept-Encoding": "gzip"},
                note="body shown decompressed; content-length is the compressed size")
    http_record(s, "infer JSON batch 2", "POST", "/v2/models/simple/versions/1/infer",
                {"inputs": good_json_inputs(2)})
    http_record(s, "infer JSON, binary_data_output=true (request parameters)", "POST",
                "/v2/models/simple/infer",
                {"inputs": good_json_inputs(), "parameters": {"binary_data_output": True}})
    http_record(s, "infer JSON, one output binary_data=true", "POST", "/v2/models/simple/infer",
                {"inputs": good_json_inputs(),
                 "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                             {"name": "OUTPUT1"}]})
    body, hdrs = binary_request(
        {"inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}}],
         "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                     {"name": "OUTPUT1", "parameters": {"binary_data": False}}]},
        [i32(I16), i32(ONES)])
    http_record(s, "infer binary inputs, mixed outputs", "POST", "/v2/models/simple/infer", body, hdrs)
    body, hdrs = binary_request(
        {"inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}}]},
        [i32(I16), i32(ONES)], extra_headers={"Content-Type": "application/json"})
    http_record(s, "infer binary inputs without binary outputs (no Content-Type octet-stream)",
                "POST", "/v2/models/simple/infer", body, hdrs)
    http_record(s, "BYTES identity JSON", "POST", "/v2/models/identity_bytes/infer",
                {"inputs": [jin("INPUT0", "BYTES", [1, 3], ["a", "bc", ""])]})
    blob = bytes_elems(b"a", b"bc", b"\x00\xff")
    body, hdrs = binary_request(
        {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, 3],
                     "parameters": {"binary_data_size": len(blob)}}],
         "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}, [blob])
    http_record(s, "BYTES identity binary in/out", "POST", "/v2/models/identity_bytes/infer", body, hdrs)
    http_record(s, "BYTES identity, non-UTF-8 output as JSON", "POST", "/v2/models/identity_bytes/infer",
                body.replace(b'"binary_data":true', b'"binary_data":false'),
                {**hdrs, "Inference-Header-Content-Length": str(int(hdrs["Inference-Header-Content-Length"]) + 1)})
    http_record(s, "model statistics (after inferences)", "GET", "/v2/models/simple/stats")
    http_record(s, "model statistics, version 1", "GET", "/v2/models/simple/versions/1/stats")
    http_record(s, "all model statistics", "GET", "/v2/models/stats")


def probe_http_routing():
    s = "routing"
    http_record(s, "unknown path", "GET", "/v2/foo")
    http_record(s, "unknown path outside /v2", "GET", "/nothing")
    http_record(s, "unknown path under model", "GET", "/v2/models/simple/foo")
    http_record(s, "GET on infer", "GET", "/v2/models/simple/infer")
    http_record(s, "PUT on infer", "PUT", "/v2/models/simple/infer", {"inputs": good_json_inputs()})
    http_record(s, "DELETE /v2", "DELETE", "/v2")
    http_record(s, "POST /v2/health/ready", "POST", "/v2/health/ready")
    http_record(s, "POST /v2/models/simple (metadata)", "POST", "/v2/models/simple")
    http_record(s, "GET /v2/repository/index", "GET", "/v2/repository/index")
    http_record(s, "GET /v2/models/simple/config trailing slash", "GET", "/v2/models/simple/config/")
    http_record(s, "metrics on HTTP port", "GET", "/metrics")


def probe_http_unknown():
    s = "unknown model / version / not ready"
    for path in ("", "/ready", "/config", "/stats"):
        http_record(s, "unknown model GET" + (path or " metadata"), "GET", "/v2/models/nope" + path)
    http_record(s, "unknown model infer", "POST", "/v2/models/nope/infer", {"inputs": good_json_inputs()})
    for v in ("3", "2", "abc", "0", "-1"):
        http_record(s, "version %s metadata" % v, "GET", "/v2/models/simple/versions/%s" % v)
        http_record(s, "version %s ready" % v, "GET", "/v2/models/simple/versions/%s/ready" % v)
        http_record(s, "version %s infer" % v, "POST", "/v2/models/simple/versions/%s/infer" % v,
                    {"inputs": good_json_inputs()})
    http_record(s, "version 3 stats", "GET", "/v2/models/simple/versions/3/stats")
    http_record(s, "version 3 config", "GET", "/v2/models/simple/versions/3/config")
    # explicit mode: 'broken' is in the repository but not loaded yet
    http_record(s, "model in repository but not loaded: metadata", "GET", "/v2/models/broken")
    http_record(s, "model in repository but not loaded: ready", "GET", "/v2/models/broken/ready")
    http_record(s, "model in repository but not loaded: config", "GET", "/v2/models/broken/config")
    http_record(s, "model in repository but not loaded: stats", "GET", "/v2/models/broken/stats")
    http_record(s, "model in repository but not loaded: infer", "POST", "/v2/models/broken/infer",
                {"inputs": [jin("INPUT0", "INT32", [1, 16], I16)]})
    # now load it: it fails in initialize() -> UNAVAILABLE
    http_record(s, "load model that fails to initialize", "POST", "/v2/repository/models/broken/load")
    http_record(s, "load unknown model", "POST", "/v2/repository/models/nope/load")
    http_record(s, "UNAVAILABLE model: metadata", "GET", "/v2/models/broken")
    http_record(s, "UNAVAILABLE model: ready", "GET", "/v2/models/broken/ready")
    http_record(s, "UNAVAILABLE model: config", "GET", "/v2/models/broken/config")
    http_record(s, "UNAVAILABLE model: stats", "GET", "/v2/models/broken/stats")
    http_record(s, "UNAVAILABLE model: infer", "POST", "/v2/models/broken/infer",
                {"inputs": [jin("INPUT0", "INT32", [1, 16], I16)]})
    http_record(s, "UNAVAILABLE model: version 1 infer", "POST", "/v2/models/broken/versions/1/infer",
                {"inputs": [jin("INPUT0", "INT32", [1, 16], I16)]})
    http_record(s, "server ready with an UNAVAILABLE model (--strict-readiness=true)", "GET",
                "/v2/health/ready")
    http_record(s, "repository index with UNAVAILABLE model", "POST", "/v2/repository/index")


def probe_http_json_errors():
    s = "malformed / schema"
    url = "/v2/models/simple/infer"
    http_record(s, "malformed JSON (truncated)", "POST", url, '{"inputs": [')
    http_record(s, "malformed JSON (garbage)", "POST", url, "hello")
    http_record(s, "empty body", "POST", url, b"")
    http_record(s, "body is a JSON array", "POST", url, [])
    http_record(s, "body is {}", "POST", url, {})
    http_record(s, "inputs not an array", "POST", url, {"inputs": {}})
    http_record(s, "inputs is empty array", "POST", url, {"inputs": []})
    http_record(s, "input element not an object", "POST", url, {"inputs": [1]})
    http_record(s, "missing name", "POST", url,
                {"inputs": [{"datatype": "INT32", "shape": [1, 16], "data": I16}]})
    http_record(s, "missing datatype", "POST", url,
                {"inputs": [{"name": "INPUT0", "shape": [1, 16], "data": I16},
                            jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "missing shape", "POST", url,
                {"inputs": [{"name": "INPUT0", "datatype": "INT32", "data": I16},
                            jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "missing data", "POST", url,
                {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16]},
                            jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "shape not ints (strings)", "POST", url,
                {"inputs": [jin("INPUT0", "INT32", ["1", "16"], I16), jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "shape not ints (float)", "POST", url,
                {"inputs": [jin("INPUT0", "INT32", [1.5, 16], I16), jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "shape negative", "POST", url,
                {"inputs": [jin("INPUT0", "INT32", [-1, 16], I16), jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "shape not an array", "POST", url,
                {"inputs": [jin("INPUT0", "INT32", 16, I16), jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "name not a string", "POST", url,
                {"inputs": [jin(5, "INT32", [1, 16], I16), jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "datatype unknown string", "POST", url,
                {"inputs": [jin("INPUT0", "INT33", [1, 16], I16), jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "datatype not a string", "POST", url,
                {"inputs": [jin("INPUT0", 5, [1, 16], I16), jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "data not an array", "POST", url,
                {"inputs": [jin("INPUT0", "INT32", [1, 16], 5), jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "data element wrong JSON type (string for INT32)", "POST", url,
                {"inputs": [jin("INPUT0", "INT32", [1, 16], ["x"] * 16), jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "data element float for INT32", "POST", url,
                {"inputs": [jin("INPUT0", "INT32", [1, 16], [1.5] * 16), jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "data nested arrays (row-major, valid?)", "POST", url,
                {"inputs": [jin("INPUT0", "INT32", [1, 16], [I16]), jin("INPUT1", "INT32", [1, 16], [ONES])]})
    http_record(s, "id not a string", "POST", url, {"id": 5, "inputs": good_json_inputs()})
    http_record(s, "parameters not an object", "POST", url, {"parameters": 5, "inputs": good_json_inputs()})
    http_record(s, "outputs not an array", "POST", url, {"inputs": good_json_inputs(), "outputs": {}})
    http_record(s, "output missing name", "POST", url, {"inputs": good_json_inputs(), "outputs": [{}]})
    http_record(s, "binary_data_output not a bool", "POST", url,
                {"inputs": good_json_inputs(), "parameters": {"binary_data_output": 1}})
    http_record(s, "unknown top-level field", "POST", url, {"inputs": good_json_inputs(), "foo": 1})


def probe_http_semantic():
    s = "semantic infer errors"
    url = "/v2/models/simple/infer"
    http_record(s, "missing input", "POST", url, {"inputs": [jin("INPUT0", "INT32", [1, 16], I16)]})
    http_record(s, "missing input, request has id", "POST", url,
                {"id": "req-42", "inputs": [jin("INPUT0", "INT32", [1, 16], I16)]})
    http_record(s, "duplicated input", "POST", url,
                {"inputs": good_json_inputs() + [jin("INPUT0", "INT32", [1, 16], I16)]})
    http_record(s, "unknown input", "POST", url,
                {"inputs": good_json_inputs() + [jin("INPUT2", "INT32", [1, 16], I16)]})
    http_record(s, "wrong datatype", "POST", url,
                {"inputs": [jin("INPUT0", "FP32", [1, 16], I16), jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "wrong rank (no batch dim)", "POST", url,
                {"inputs": [jin("INPUT0", "INT32", [16], I16), jin("INPUT1", "INT32", [16], ONES)]})
    http_record(s, "wrong rank (3 dims)", "POST", url,
                {"inputs": [jin("INPUT0", "INT32", [1, 1, 16], I16), jin("INPUT1", "INT32", [1, 1, 16], ONES)]})
    http_record(s, "wrong dim [1,15]", "POST", url,
                {"inputs": [jin("INPUT0", "INT32", [1, 15], I16[:15]), jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "batch 9 > max_batch_size 8", "POST", url, {"inputs": good_json_inputs(9)})
    http_record(s, "batch 0", "POST", url,
                {"inputs": [jin("INPUT0", "INT32", [0, 16], []), jin("INPUT1", "INT32", [0, 16], [])]})
    http_record(s, "inputs with different batch sizes", "POST", url,
                {"inputs": [jin("INPUT0", "INT32", [2, 16], I16 * 2), jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "JSON data too short (15 for [1,16])", "POST", url,
                {"inputs": [jin("INPUT0", "INT32", [1, 16], I16[:15]), jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "JSON data too long (17 for [1,16])", "POST", url,
                {"inputs": [jin("INPUT0", "INT32", [1, 16], I16 + [17]), jin("INPUT1", "INT32", [1, 16], ONES)]})
    http_record(s, "unknown requested output", "POST", url,
                {"inputs": good_json_inputs(), "outputs": [{"name": "OUTPUT9"}]})
    http_record(s, "duplicated requested output", "POST", url,
                {"inputs": good_json_inputs(), "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]})
    http_record(s, "BYTES model: INT32 datatype", "POST", "/v2/models/identity_bytes/infer",
                {"inputs": [jin("INPUT0", "INT32", [1, 2], [1, 2])]})
    http_record(s, "BYTES model: JSON number instead of string", "POST", "/v2/models/identity_bytes/infer",
                {"inputs": [jin("INPUT0", "BYTES", [1, 2], [1, 2])]})
    http_record(s, "BYTES model: JSON data too short", "POST", "/v2/models/identity_bytes/infer",
                {"inputs": [jin("INPUT0", "BYTES", [1, 3], ["a", "b"])]})
    http_record(s, "BYTES model: JSON data too long", "POST", "/v2/models/identity_bytes/infer",
                {"inputs": [jin("INPUT0", "BYTES", [1, 1], ["a", "b"])]})


def probe_http_binary():
    s = "binary data"
    url = "/v2/models/simple/infer"

    def two(size0, size1, blobs, header_len=None, extra=None):
        hdr = {"inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": size0}},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": size1}}]}
        return binary_request(hdr, blobs, header_len=header_len, extra_headers=extra)

    b0, b1 = i32(I16), i32(ONES)
    body, h = two(64, 64, [b0, b1[:32]])
    http_record(s, "binary_data_size exceeds body (second input truncated)", "POST", url, body, h)
    body, h = two(64, 64, [b0, b1, b"extra-bytes"])
    http_record(s, "body longer than sum of binary_data_size", "POST", url, body, h)
    body, h = two(60, 68, [b0, b1])
    http_record(s, "sizes add up but do not match shape (60 + 68)", "POST", url, body, h)
    body, h = two(32, 32, [b0[:32], b1[:32]])
    http_record(s, "binary_data_size smaller than shape needs (32 for [1,16] INT32)", "POST", url, body, h)
    body, h = two(64, 1 << 40, [b0, b1])
    http_record(s, "huge binary_data_size (2^40)", "POST", url, body, h)
    body, h = two(64, -1, [b0, b1])
    http_record(s, "negative binary_data_size", "POST", url, body, h)
    body, h = two(64, "64", [b0, b1])
    http_record(s, "binary_data_size is a string", "POST", url, body, h)
    hdr = {"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "parameters": {"binary_data_size": 64}, "data": I16},
        jin("INPUT1", "INT32", [1, 16], ONES)]}
    body, h = binary_request(hdr, [b0])
    http_record(s, "both data and binary_data_size", "POST", url, body, h)
    body, h = two(64, 64, [b0, b1], header_len=10_000)
    http_record(s, "Inference-Header-Content-Length larger than body", "POST", url, body, h)
    body, h = two(64, 64, [b0, b1], header_len=20)
    http_record(s, "Inference-Header-Content-Length cuts the JSON", "POST", url, body, h)
    body, h = two(64, 64, [b0, b1], extra={"Inference-Header-Content-Length": "abc"})
    http_record(s, "Inference-Header-Content-Length not a number", "POST", url, body, h)
    body, h = two(64, 64, [b0, b1], extra={"Inference-Header-Content-Length": "-5"})
    http_record(s, "Inference-Header-Content-Length negative", "POST", url, body, h)
    body, h = two(64, 64, [b0, b1])
    del h["Inference-Header-Content-Length"]
    http_record(s, "binary_data_size without Inference-Header-Content-Length", "POST", url, body, h)
    hdr = {"inputs": good_json_inputs()}
    body, h = binary_request(hdr, [b"trailing"])
    http_record(s, "JSON inputs + trailing binary bytes nobody claims", "POST", url, body, h)
    # BYTES framing
    burl = "/v2/models/identity_bytes/infer"

    def bytes_req(blob, shape, size=None):
        hdr = {"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": shape,
                           "parameters": {"binary_data_size": len(blob) if size is None else size}}]}
        return binary_request(hdr, [blob])

    body, h = bytes_req(struct.pack("<I", 100) + b"abc", [1, 1])
    http_record(s, "BYTES: element length prefix exceeds data", "POST", burl, body, h)
    body, h = bytes_req(b"\x01\x00", [1, 1])
    http_record(s, "BYTES: truncated 4-byte length prefix", "POST", burl, body, h)
    body, h = bytes_req(bytes_elems(b"a", b"b"), [1, 3])
    http_record(s, "BYTES: fewer elements than shape (2 for [1,3])", "POST", burl, body, h)
    body, h = bytes_req(bytes_elems(b"a", b"b", b"c"), [1, 2])
    http_record(s, "BYTES: more elements than shape (3 for [1,2])", "POST", burl, body, h)
    body, h = bytes_req(bytes_elems(b"a") + b"zz", [1, 1])
    http_record(s, "BYTES: trailing bytes after last element", "POST", burl, body, h)


def probe_grpc_success():
    s = "grpc success (before 'broken' is loaded)"
    P = service_pb2
    grpc_record(s, "ServerLive", "ServerLive", P.ServerLiveRequest())
    grpc_record(s, "ServerReady", "ServerReady", P.ServerReadyRequest())
    grpc_record(s, "ServerMetadata", "ServerMetadata", P.ServerMetadataRequest())
    grpc_record(s, "ModelMetadata simple", "ModelMetadata", P.ModelMetadataRequest(name="simple"))
    grpc_record(s, "ModelConfig simple", "ModelConfig", P.ModelConfigRequest(name="simple"))
    grpc_record(s, "ModelReady simple", "ModelReady", P.ModelReadyRequest(name="simple"))
    grpc_record(s, "RepositoryIndex", "RepositoryIndex", P.RepositoryIndexRequest())
    grpc_record(s, "RepositoryIndex ready=true", "RepositoryIndex", P.RepositoryIndexRequest(ready=True))
    grpc_record(s, "ModelStatistics simple", "ModelStatistics", P.ModelStatisticsRequest(name="simple"))
    grpc_record(s, "ModelStatistics all", "ModelStatistics", P.ModelStatisticsRequest())
    grpc_record(s, "ModelInfer BYTES contents ok", "ModelInfer",
                ginfer("identity_bytes", [ginput("INPUT0", "BYTES", [1, 2], [b"a", b"bc"])]))
    grpc_record(s, "ModelMetadata not-loaded model (explicit mode)", "ModelMetadata", P.ModelMetadataRequest(name="broken"))
    grpc_record(s, "ModelReady not-loaded model (explicit mode)", "ModelReady", P.ModelReadyRequest(name="broken"))
    grpc_record(s, "ModelInfer not-loaded model (explicit mode)", "ModelInfer",
                ginfer("broken", [ginput("INPUT0", "INT32", [1, 16], I16)]))


def probe_grpc():
    s = "grpc errors (after 'broken' failed to load)"
    P = service_pb2
    grpc_record(s, "ServerReady with an UNAVAILABLE model", "ServerReady", P.ServerReadyRequest())
    # unknown model / version
    grpc_record(s, "ModelMetadata unknown model", "ModelMetadata", P.ModelMetadataRequest(name="nope"))
    grpc_record(s, "ModelConfig unknown model", "ModelConfig", P.ModelConfigRequest(name="nope"))
    grpc_record(s, "ModelStatistics unknown model", "ModelStatistics", P.ModelStatisticsRequest(name="nope"))
    grpc_record(s, "ModelReady unknown model", "ModelReady", P.ModelReadyRequest(name="nope"))
    grpc_record(s, "ModelMetadata version 3", "ModelMetadata", P.ModelMetadataRequest(name="simple", version="3"))
    grpc_record(s, "ModelMetadata version abc", "ModelMetadata", P.ModelMetadataRequest(name="simple", version="abc"))
    grpc_record(s, "ModelConfig version 3", "ModelConfig", P.ModelConfigRequest(name="simple", version="3"))
    grpc_record(s, "ModelStatistics version 3", "ModelStatistics", P.ModelStatisticsRequest(name="simple", version="3"))
    grpc_record(s, "ModelReady version 2 (on disk, not loaded)", "ModelReady", P.ModelReadyRequest(name="simple", version="2"))
    grpc_record(s, "ModelMetadata UNAVAILABLE model", "ModelMetadata", P.ModelMetadataRequest(name="broken"))
    grpc_record(s, "ModelConfig UNAVAILABLE model", "ModelConfig", P.ModelConfigRequest(name="broken"))
    grpc_record(s, "ModelStatistics UNAVAILABLE model", "ModelStatistics", P.ModelStatisticsRequest(name="broken"))
    grpc_record(s, "ModelReady UNAVAILABLE model", "ModelReady", P.ModelReadyRequest(name="broken"))
    grpc_record(s, "ModelMetadata empty name", "ModelMetadata", P.ModelMetadataRequest(name=""))

    good = [ginput("INPUT0", "INT32", [1, 16], I16), ginput("INPUT1", "INT32", [1, 16], ONES)]
    raw = [i32(I16), i32(ONES)]
    nodata = [ginput("INPUT0", "INT32", [1, 16]), ginput("INPUT1", "INT32", [1, 16])]
    grpc_record(s, "ModelInfer contents ok", "ModelInfer", ginfer("simple", good, id="req-1"))
    grpc_record(s, "ModelInfer raw ok", "ModelInfer", ginfer("simple", nodata, raw=raw))
    grpc_record(s, "ModelInfer requested output OUTPUT1", "ModelInfer", ginfer("simple", nodata, raw=raw, outputs=["OUTPUT1"]))
    grpc_record(s, "ModelInfer unknown model", "ModelInfer", ginfer("nope", good))
    grpc_record(s, "ModelInfer unknown version", "ModelInfer", ginfer("simple", good, version="3"))
    grpc_record(s, "ModelInfer version 2 (on disk, not loaded)", "ModelInfer", ginfer("simple", good, version="2"))
    grpc_record(s, "ModelInfer version abc", "ModelInfer", ginfer("simple", good, version="abc"))
    grpc_record(s, "ModelInfer UNAVAILABLE model", "ModelInfer",
                ginfer("broken", [ginput("INPUT0", "INT32", [1, 16], I16)]))
    grpc_record(s, "ModelInfer UNAVAILABLE model, version 1", "ModelInfer",
                ginfer("broken", [ginput("INPUT0", "INT32", [1, 16], I16)], version="1"))
    grpc_record(s, "ModelReady UNAVAILABLE model, version 1", "ModelReady", P.ModelReadyRequest(name="broken", version="1"))
    grpc_record(s, "ModelInfer missing input", "ModelInfer", ginfer("simple", good[:1]))
    grpc_record(s, "ModelInfer missing input, request has id", "ModelInfer", ginfer("simple", good[:1], id="req-42"))
    grpc_record(s, "ModelInfer duplicated input", "ModelInfer", ginfer("simple", good + good[:1]))
    grpc_record(s, "ModelInfer unknown input", "ModelInfer",
                ginfer("simple", good + [ginput("INPUT2", "INT32", [1, 16], I16)]))
    grpc_record(s, "ModelInfer wrong datatype", "ModelInfer",
                ginfer("simple", [ginput("INPUT0", "FP32", [1, 16]), nodata[1]], raw=raw))
    grpc_record(s, "ModelInfer unknown datatype string", "ModelInfer",
                ginfer("simple", [ginput("INPUT0", "INT33", [1, 16]), nodata[1]], raw=raw))
    grpc_record(s, "ModelInfer wrong rank", "ModelInfer",
                ginfer("simple", [ginput("INPUT0", "INT32", [16], I16), ginput("INPUT1", "INT32", [16], ONES)]))
    grpc_record(s, "ModelInfer wrong dim [1,15]", "ModelInfer",
                ginfer("simple", [ginput("INPUT0", "INT32", [1, 15], I16[:15]), good[1]]))
    grpc_record(s, "ModelInfer batch 9 > 8", "ModelInfer",
                ginfer("simple", [ginput("INPUT0", "INT32", [9, 16], I16 * 9), ginput("INPUT1", "INT32", [9, 16], ONES * 9)]))
    grpc_record(s, "ModelInfer negative dim", "ModelInfer",
                ginfer("simple", [ginput("INPUT0", "INT32", [-1, 16], I16), good[1]]))
    grpc_record(s, "ModelInfer contents too short", "ModelInfer",
                ginfer("simple", [ginput("INPUT0", "INT32", [1, 16], I16[:15]), good[1]]))
    grpc_record(s, "ModelInfer contents too long", "ModelInfer",
                ginfer("simple", [ginput("INPUT0", "INT32", [1, 16], I16 + [17]), good[1]]))
    grpc_record(s, "ModelInfer contents of wrong type (fp32_contents for INT32)", "ModelInfer",
                ginfer("simple", [P.ModelInferRequest.InferInputTensor(
                    name="INPUT0", datatype="INT32", shape=[1, 16],
                    contents=P.InferTensorContents(fp32_contents=[1.0] * 16)), good[1]]))
    grpc_record(s, "ModelInfer raw too short", "ModelInfer", ginfer("simple", nodata, raw=[raw[0], raw[1][:60]]))
    grpc_record(s, "ModelInfer raw too long", "ModelInfer", ginfer("simple", nodata, raw=[raw[0], raw[1] + b"\0\0\0\0"]))
    grpc_record(s, "ModelInfer fewer raw_input_contents than inputs", "ModelInfer", ginfer("simple", nodata, raw=raw[:1]))
    grpc_record(s, "ModelInfer more raw_input_contents than inputs", "ModelInfer", ginfer("simple", nodata, raw=raw + raw[:1]))
    grpc_record(s, "ModelInfer contents and raw_input_contents mixed", "ModelInfer", ginfer("simple", good, raw=raw))
    grpc_record(s, "ModelInfer input without any data", "ModelInfer", ginfer("simple", nodata))
    grpc_record(s, "ModelInfer unknown requested output", "ModelInfer", ginfer("simple", good, outputs=["OUTPUT9"]))
    grpc_record(s, "ModelInfer BYTES contents ok", "ModelInfer",
                ginfer("identity_bytes", [ginput("INPUT0", "BYTES", [1, 2], [b"a", b"bc"])]))
    grpc_record(s, "ModelInfer BYTES raw ok", "ModelInfer",
                ginfer("identity_bytes", [ginput("INPUT0", "BYTES", [1, 2])], raw=[bytes_elems(b"a", b"bc")]))
    grpc_record(s, "ModelInfer BYTES raw: length prefix exceeds data", "ModelInfer",
                ginfer("identity_bytes", [ginput("INPUT0", "BYTES", [1, 1])], raw=[struct.pack("<I", 100) + b"abc"]))
    grpc_record(s, "ModelInfer BYTES raw: truncated prefix", "ModelInfer",
                ginfer("identity_bytes", [ginput("INPUT0", "BYTES", [1, 1])], raw=[b"\x01\x00"]))
    grpc_record(s, "ModelInfer BYTES raw: fewer elements than shape", "ModelInfer",
                ginfer("identity_bytes", [ginput("INPUT0", "BYTES", [1, 3])], raw=[bytes_elems(b"a", b"b")]))
    grpc_record(s, "ModelInfer BYTES raw: more elements than shape", "ModelInfer",
                ginfer("identity_bytes", [ginput("INPUT0", "BYTES", [1, 1])], raw=[bytes_elems(b"a", b"b")]))
    grpc_record(s, "ModelInfer BYTES contents count mismatch", "ModelInfer",
                ginfer("identity_bytes", [ginput("INPUT0", "BYTES", [1, 3], [b"a"])]))
    grpc_record(s, "RepositoryModelLoad unknown model", "RepositoryModelLoad",
                P.RepositoryModelLoadRequest(model_name="nope"))


# ---------------------------------------------------------------- output


def md_escape(s):
    return s.replace("|", "\\|").replace("\n", "\\n")


def write_outputs(outdir):
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump(RESULTS, f, indent=1, ensure_ascii=False)
    lines = ["# Triton 2.51 probe results (generated by tests/triton_ref/probe.py; do not edit)", ""]
    section = None
    for e in RESULTS:
        if e["section"] != section:
            section = e["section"]
            lines += ["", "## " + section, ""]
            if e["proto"] == "http":
                lines += ["| case | request | status | headers | body |", "|---|---|---|---|---|"]
            else:
                lines += ["| case | request | code | message / response |", "|---|---|---|---|"]
        if e["proto"] == "http":
            rq = "%s %s" % (e["request"]["method"], e["request"]["path"])
            if "body" in e["request"]:
                rq += " `" + md_escape(e["request"]["body"][:300]) + "`"
            if "headers" in e["request"]:
                rq += " " + md_escape(json.dumps(e["request"]["headers"]))
            hdrs = ", ".join("%s: %s" % kv for kv in e["headers"].items())
            body = "`" + md_escape(e["body"]) + "`" if e["body"] else "(empty)"
            if "binary_hex" in e:
                body += " + binary " + e["binary_hex"]
            if e.get("note"):
                body += " (note: %s)" % md_escape(e["note"])
            lines.append("| %s | %s | %d | %s | %s |" % (md_escape(e["case"]), rq, e["status"], md_escape(hdrs), body))
        else:
            rq = "%s `%s`" % (e["request"]["rpc"], md_escape(json.dumps(e["request"]["message"])[:300]))
            if e["code"] == "OK":
                msg = "`" + md_escape(json.dumps(e["response"])) + "`"
            else:
                msg = "`" + md_escape(e["message"]) + "`"
            lines.append("| %s | %s | %s | %s |" % (md_escape(e["case"]), rq, e["code"], msg))
    with open(os.path.join(outdir, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def wait_ready(timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if requests.get(HTTP + "/v2/health/live", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise SystemExit("Triton did not come up at " + HTTP)


def main():
    global HTTP, GRPC_STUB
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", default="localhost:" + os.environ.get("TRITON_HTTP_PORT", "18000"))
    ap.add_argument("--grpc", default="localhost:" + os.environ.get("TRITON_GRPC_PORT", "18001"))
    ap.add_argument("--no-start", action="store_true", help="use an already running Triton")
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--log", default="/tmp/triton-probe.log")
    args = ap.parse_args()
    HTTP = "http://" + args.http
    proc = None
    if not args.no_start:
        logf = open(args.log, "w")
        proc = subprocess.Popen(
            [os.path.join(ROOT, "scripts", "run-triton.sh"), os.path.join(HERE, "models"),
             "--model-control-mode=explicit", "--load-model=simple", "--load-model=identity_bytes",
             "--log-verbose=1"],
            stdout=logf, stderr=subprocess.STDOUT)
    try:
        wait_ready()
        # wait until the two models are READY
        for _ in range(120):
            if all(requests.get(HTTP + "/v2/models/%s/ready" % m).status_code == 200
                   for m in ("simple", "identity_bytes")):
                break
            time.sleep(0.5)
        GRPC_STUB = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(args.grpc))
        probe_http_success()
        probe_grpc_success()
        probe_http_routing()
        probe_http_json_errors()
        probe_http_semantic()
        probe_http_binary()
        probe_http_unknown()  # loads 'broken' (-> UNAVAILABLE), so it runs after the others
        probe_grpc()
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
    write_outputs(args.out)
    print("wrote %d results to %s/results.{json,md}" % (len(RESULTS), args.out))


if __name__ == "__main__":
    sys.exit(main())
