"""Triton's trace extension end to end: the `--trace-config` flags (and the
deprecated `--trace-*` spellings), `GET`/`POST /v2/trace/setting` and
`/v2/models/{m}/trace/setting` over HTTP and gRPC `TraceSetting` through
tritonclient (global and per-model settings, clearing with null, the
answers to bad settings, after each of which the server keeps serving), the
trace files of mode triton (log frequency, trace count, what is written at
exit, TIMESTAMPS over HTTP and gRPC, an ensemble's composing traces, TENSORS
data, sampling by rate, a level set for one model only), and mode
opentelemetry against a local OTLP/HTTP receiver (span layout, attributes,
resource, W3C `traceparent` propagation over HTTP and gRPC).

Real tritonserver 2.51 for comparison (tests/triton_ref/probe_trace.py):
the same settings, values, answers and files, except that a wrong JSON type
(`"trace_rate":1`, `"trace_level":"TIMESTAMPS"`) and a body that is no JSON
are a 500 there and a 400 in Nereid (same words), and that Triton writes a
BYTES tensor element holding a double quote into the trace file unescaped
(broken JSON) where Nereid's file stays valid JSON. Timestamps are only
checked for the order that holds in Triton too: the response may be sent
(`*_SEND_START`) before the request is released (`REQUEST_END`), as Triton's
own gRPC traces show."""

from __future__ import annotations

import gzip
import json
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from tritonclient.utils import InferenceServerException

from calls import infer
from conftest import REPO_ROOT, start_server, stop_server

DEFAULTS = {
    "trace_level": ["OFF"],
    "trace_rate": "1000",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_file": "",
    "trace_mode": "triton",
}

ENGINE = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
          "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END"]
COMPUTE = ENGINE[2:6]
FRONTEND = {
    "http": (["HTTP_RECV_START", "HTTP_RECV_END"], ["HTTP_SEND_START", "HTTP_SEND_END"]),
    "grpc": (["GRPC_WAITREAD_START", "GRPC_WAITREAD_END"], ["GRPC_SEND_START", "GRPC_SEND_END"]),
}
A = np.arange(16, dtype=np.int32).reshape(1, 16)
ENSEMBLES = {"mlp_pipeline"}  # no compute of their own
WAIT_S = 60


# --- servers and calls ------------------------------------------------------

def repository(tmp_path: Path, names: list[str]) -> Path:
    repo = tmp_path / "repo"
    for name in names:
        shutil.copytree(REPO_ROOT / "model_repository" / name, repo / name)
    return repo


def trace_config(*values: str) -> list[str]:
    return [arg for value in values for arg in ("--trace-config", value)]


def kind(protocol: str) -> str:
    return "http" if protocol.startswith("http") else "grpc"


def infer_simple(server, protocol: str = "http", request_id: str = "", headers=None) -> None:
    """One `simple` request through tritonclient (headers included), checked."""
    module = httpclient if kind(protocol) == "http" else grpcclient
    client = module.InferenceServerClient(server.http_url if module is httpclient else server.grpc_url)
    inputs = [module.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(A)
    inputs[1].set_data_from_numpy(np.full((1, 16), 3, dtype=np.int32))
    try:
        result = client.infer("simple", inputs, request_id=request_id, headers=headers)
    finally:
        client.close()
    assert (result.as_numpy("OUTPUT0") == A + 3).all()
    assert (result.as_numpy("OUTPUT1") == A - 3).all()


def infer_strings(server, protocol: str, values: list[bytes]) -> None:
    array = np.array([values], dtype=np.object_)
    answer = infer(server, protocol, "string_identity", [("INPUT0", array, "BYTES")])
    assert answer.outputs["OUTPUT0"].tolist() == [values]


def infer_pipeline(server, protocol: str = "http-binary") -> None:
    raw = np.arange(256, dtype=np.uint8).reshape(1, 256)
    answer = infer(server, protocol, "mlp_pipeline", [("RAW", raw, "UINT8")])
    assert answer.outputs["OUTPUT"].shape == (1, 16)


def get(server, model: str | None = None) -> dict:
    path = f"/v2/models/{model}/trace/setting" if model else "/v2/trace/setting"
    r = requests.get(server.base + path)
    assert r.status_code == 200, r.text
    return r.json()


def post(server, body, model: str | None = None) -> requests.Response:
    path = f"/v2/models/{model}/trace/setting" if model else "/v2/trace/setting"
    return requests.post(server.base + path, json=body)


def grpc_settings(answer: dict) -> dict:
    """tritonclient's JSON of a TraceSettingResponse as the HTTP answer."""
    values = {k: v.get("value", []) for k, v in answer["settings"].items()}
    return {k: (v if k == "trace_level" else (v[0] if v else "")) for k, v in values.items()}


def grpc_get(server, model: str | None = None) -> dict:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    return grpc_settings(client.get_trace_settings(model_name=model, as_json=True))


def clear_all(server, model: str | None = None) -> None:
    nulls = {"trace_level": None, "trace_rate": None, "trace_count": None, "log_frequency": None}
    r = post(server, nulls, model)
    assert r.status_code == 200, r.text


def wait_until(predicate, what: str):
    deadline = time.monotonic() + WAIT_S
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# --- trace files ------------------------------------------------------------

def indexed_files(path: Path) -> list[Path]:
    files = [p for p in path.parent.glob(path.name + ".*") if p.suffix[1:].isdigit()]
    return sorted(files, key=lambda p: int(p.suffix[1:]))


def read_array(path: Path) -> list[dict]:
    """A trace file: one JSON array of objects (read again while it is being
    written)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        text = path.read_text()
        try:
            objects = json.loads(text)
            break
        except ValueError:
            if time.monotonic() > deadline:
                raise AssertionError(f"{path} is not JSON: {text[:2000]!r}")
            time.sleep(0.05)
    assert isinstance(objects, list) and objects, text[:2000]
    return objects


def traces_in(objects: list[dict]) -> dict[int, SimpleNamespace]:
    """The objects of a file grouped by trace id: the header (model name,
    version, request id, parent id), the timestamps by name, the tensors."""
    traces: dict[int, SimpleNamespace] = {}
    for o in objects:
        assert isinstance(o["id"], int) and o["id"] > 0, o
        t = traces.setdefault(o["id"], SimpleNamespace(header=None, stamps={}, tensors=[]))
        if "model_name" in o:
            assert t.header is None, objects
            t.header = o
        elif "timestamps" in o:
            for stamp in o["timestamps"]:
                assert stamp["name"] not in t.stamps, objects
                assert isinstance(stamp["ns"], int) and stamp["ns"] > 0, stamp
                t.stamps[stamp["name"]] = stamp["ns"]
        elif "activity" in o:
            t.tensors.append(o)
        else:
            raise AssertionError(f"unexpected object {o}")
    return traces


def new_files(path: Path, before: int, count: int) -> list[dict[int, SimpleNamespace]]:
    """Waits for `count` indexed files after the first `before`; the traces
    of each."""
    files = wait_until(lambda: (f := indexed_files(path)[before:]) and len(f) >= count and f,
                       f"{count} trace files after {before} ({path})")
    assert len(files) == count, files
    return [traces_in(read_array(f)) for f in files]


def only(traces: dict[int, SimpleNamespace]) -> tuple[int, SimpleNamespace]:
    assert len(traces) == 1, traces
    return next(iter(traces.items()))


def assert_ordered(stamps: dict[str, int], names: list[str]) -> None:
    values = [stamps[n] for n in names]
    assert values == sorted(values), list(zip(names, values))


def check_request_stamps(stamps: dict[str, int], protocol: str) -> None:
    recv, send = FRONTEND[kind(protocol)]
    assert set(stamps) == set(recv + ENGINE + ["INFER_RESPONSE_COMPLETE"] + send), stamps
    assert_ordered(stamps, recv + ENGINE)
    assert_ordered(stamps, ["COMPUTE_OUTPUT_START", "INFER_RESPONSE_COMPLETE"] + send)


# --- OTLP receiver ----------------------------------------------------------

class _OtlpHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):  # noqa: N802
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while (size := int(self.rfile.readline().split(b";")[0], 16)) > 0:
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Content-Encoding", "") == "gzip":
            body = gzip.decompress(body)
        self.server.received.append((self.path, self.headers.get("Content-Type"), body))
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


class Receiver:
    """An OTLP/HTTP trace collector on a free loopback port: keeps every POST."""

    def __init__(self):
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), _OtlpHandler)
        self.http.received = []
        self.port = self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self):
        self.http.shutdown()
        self.http.server_close()

    def spans(self) -> list[SimpleNamespace]:
        out = []
        for _, _, body in list(self.http.received):
            for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
                resource = attributes(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        out.append(SimpleNamespace(
                            resource=resource, span=span, name=span.name,
                            attrs=attributes(span.attributes),
                            events={e.name: e.time_unix_nano for e in span.events}))
        return out

    def trace_ids(self) -> set[bytes]:
        return {s.span.trace_id for s in self.spans()}

    def wait_trace(self, before: set[bytes], names: list[str]) -> list[SimpleNamespace]:
        """The spans of the one new trace (not in `before`) once it holds a
        span of each of `names` (repeats counted)."""
        def ready():
            by_trace: dict[bytes, list] = {}
            for s in self.spans():
                if s.span.trace_id not in before:
                    by_trace.setdefault(s.span.trace_id, []).append(s)
            for spans in by_trace.values():
                got = [s.name for s in spans]
                if all(got.count(n) >= names.count(n) for n in names):
                    return by_trace
            return None

        by_trace = wait_until(ready, f"a trace with spans {names}")
        assert len(by_trace) == 1, {k.hex(): [s.name for s in v] for k, v in by_trace.items()}
        spans = next(iter(by_trace.values()))
        assert sorted(s.name for s in spans) == sorted(names), [s.name for s in spans]
        return spans


def attributes(kvs) -> dict:
    return {kv.key: (kv.value.WhichOneof("value"),
                     getattr(kv.value, kv.value.WhichOneof("value"))) for kv in kvs}


def named(spans, name: str) -> list[SimpleNamespace]:
    return [s for s in spans if s.name == name]


def check_span_tree(spans, protocol: str, models: dict[str, str | None]) -> SimpleNamespace:
    """Triton's layout: the root `InferRequest` (SERVER, frontend events), a
    span per model under its parent (`None`: the root), each model span with
    its attributes and request events and one `compute` child with the
    compute events; times are wall clock and children lie inside parents."""
    (root,) = named(spans, "InferRequest")
    assert root.span.kind == Span.SPAN_KIND_SERVER
    assert len({s.span.trace_id for s in spans}) == 1
    assert len(root.span.trace_id) == 16 and any(root.span.trace_id)
    ids = [s.span.span_id for s in spans]
    assert len(set(ids)) == len(ids) and all(len(i) == 8 for i in ids)
    recv, send = FRONTEND[kind(protocol)]
    assert set(root.events) - {"INFER_RESPONSE_COMPLETE"} == set(recv + send), root.events
    assert abs(root.span.start_time_unix_nano - time.time_ns()) < 600 * 10**9
    assert root.span.end_time_unix_nano >= max(root.events.values())

    by_name = {}
    for model in models:
        (by_name[model],) = named(spans, model)
    computes = named(spans, "compute")
    assert len(computes) == len(set(models) - ENSEMBLES), [s.name for s in spans]
    for model, parent in models.items():
        span = by_name[model]
        parent_span = root if parent is None else by_name[parent]
        assert span.span.parent_span_id == parent_span.span.span_id, model
        assert span.attrs["triton.model_name"] == ("string_value", model)
        assert span.attrs["triton.model_version"] == ("int_value", 1)
        assert span.attrs["triton.trace_id"][0] == "int_value" and span.attrs["triton.trace_id"][1] > 0
        expected_parent = 0 if parent is None else parent_span.attrs["triton.trace_id"][1]
        assert span.attrs["triton.trace_parent_id"] == ("int_value", expected_parent), model
        assert set(span.events) == {"REQUEST_START", "QUEUE_START", "REQUEST_END"}, span.events
        inside(span, parent_span)
        if model in ENSEMBLES:
            continue
        (compute,) = [c for c in computes if c.span.parent_span_id == span.span.span_id]
        assert set(compute.events) == set(COMPUTE), compute.events
        inside(compute, span)
        stamps = {**span.events, **compute.events}
        assert_ordered(stamps, ENGINE)
        if parent is None:
            assert_ordered({**root.events, **stamps}, recv + ENGINE)
            assert_ordered({**root.events, **stamps}, ["COMPUTE_OUTPUT_START"] + send)
    return root


def inside(child, parent) -> None:
    """`child` lies inside `parent` and its events inside itself."""
    c, p = child.span, parent.span
    assert c.start_time_unix_nano <= min(child.events.values()), child.name
    assert max(child.events.values()) <= c.end_time_unix_nano, child.name
    assert p.start_time_unix_nano <= c.start_time_unix_nano, (parent.name, child.name)
    assert c.end_time_unix_nano <= p.end_time_unix_nano, (parent.name, child.name)


# === settings: a server without trace flags =================================

@pytest.fixture(scope="module")
def plain_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plain")
    s = start_server(tmp, [repository(tmp, ["simple"])])
    yield s
    assert stop_server(s) == 0, s.log()


@pytest.fixture()
def plain(plain_server):
    """The settings server, its global and `simple` settings cleared after
    each test."""
    yield plain_server
    clear_all(plain_server, "simple")
    clear_all(plain_server)
    assert get(plain_server) == DEFAULTS
    assert get(plain_server, "simple") == DEFAULTS


def test_defaults_over_http_and_grpc(plain):
    assert get(plain) == DEFAULTS
    assert get(plain, "simple") == DEFAULTS
    assert httpclient.InferenceServerClient(plain.http_url).get_trace_settings() == DEFAULTS
    assert grpc_get(plain) == DEFAULTS
    assert grpc_get(plain, "simple") == DEFAULTS
    assert "trace" in requests.get(f"{plain.base}/v2").json()["extensions"]


def test_post_updates_the_given_settings_and_answers_all(plain):
    r = post(plain, {"trace_rate": "5", "log_frequency": "3"})
    assert r.status_code == 200, r.text
    assert r.json() == {**DEFAULTS, "trace_rate": "5", "log_frequency": "3"}
    grpc_client = grpcclient.InferenceServerClient(plain.grpc_url)
    answer = grpc_settings(grpc_client.update_trace_settings(settings={"trace_count": "7"}, as_json=True))
    expected = {**DEFAULTS, "trace_rate": "5", "log_frequency": "3", "trace_count": "7"}
    assert answer == expected
    assert get(plain) == expected
    # An empty update only reads; unknown keys and level names are ignored.
    assert post(plain, {}).json() == expected
    assert post(plain, {"no_such": "1"}).json() == expected
    assert post(plain, {"trace_level": ["BOGUS"]}).json() == expected
    assert grpc_settings(grpc_client.update_trace_settings(settings={"trace_level": ["BOGUS"]},
                                                           as_json=True)) == expected
    # null goes back to the startup value (here Triton's default).
    r = post(plain, {"trace_rate": None, "trace_count": None})
    assert r.json() == {**DEFAULTS, "log_frequency": "3"}
    answer = grpc_client.update_trace_settings(settings={"log_frequency": None}, as_json=True)
    assert grpc_settings(answer) == DEFAULTS


def test_model_settings_override_that_model_only(plain):
    r = post(plain, {"trace_rate": "3", "trace_count": "4"}, "simple")
    assert r.status_code == 200, r.text
    assert r.json() == {**DEFAULTS, "trace_rate": "3", "trace_count": "4"}
    assert get(plain, "simple") == r.json()
    assert grpc_get(plain, "simple") == r.json()
    assert get(plain) == DEFAULTS
    assert grpc_get(plain) == DEFAULTS

    # What the model does not override follows the global settings.
    assert post(plain, {"trace_rate": "9", "log_frequency": "2"}).status_code == 200
    assert get(plain, "simple") == {**DEFAULTS, "trace_rate": "3", "trace_count": "4", "log_frequency": "2"}

    # null clears the model's value: back to the global one.
    r = post(plain, {"trace_rate": None}, "simple")
    assert r.json() == {**DEFAULTS, "trace_rate": "9", "trace_count": "4", "log_frequency": "2"}
    grpc_client = grpcclient.InferenceServerClient(plain.grpc_url)
    answer = grpc_client.update_trace_settings(model_name="simple", settings={"trace_count": None},
                                               as_json=True)
    assert grpc_settings(answer) == {**DEFAULTS, "trace_rate": "9", "log_frequency": "2"}
    assert get(plain) == {**DEFAULTS, "trace_rate": "9", "log_frequency": "2"}


NOT_ARRAY = "attempt to access JSON non-array as array"
NOT_STRING = "attempt to access JSON non-string as string"
NO_FILE = "Attempting to set invalid trace setting :trace file name is not given"
FILE_FIXED = "trace file location can not be updated through network protocol"
BAD_HTTP = [
    ({"trace_level": "TIMESTAMPS"}, 400, NOT_ARRAY),
    ({"trace_rate": 1}, 400, NOT_STRING),
    ({"trace_level": [1]}, 400, NOT_STRING),
    ({"trace_rate": "x"}, 400, "Unable to parse 'trace_rate', got: x"),
    ({"log_frequency": "x"}, 400, "Unable to parse 'log_frequency', got: x"),
    ({"trace_count": "-5"}, 400, "Unable to parse 'trace_count'. Expecting value >= -1, got:-5"),
    ({"trace_level": ["OFF", "TIMESTAMPS"]}, 400, "Expect only one trace level 'OFF' is specified"),
    ({"trace_level": ["TIMESTAMPS"]}, 400, NO_FILE),
    ({"trace_file": "/tmp/trace.json"}, 501, FILE_FIXED),
    ({"trace_file": None}, 501, FILE_FIXED),
    # Nothing of a refused update is applied.
    ({"trace_rate": "2", "trace_level": "TIMESTAMPS"}, 400, NOT_ARRAY),
    ({"trace_rate": "2", "trace_file": "/tmp/trace.json"}, 501, FILE_FIXED),
]


@pytest.mark.parametrize("model", [None, "simple"], ids=["global", "model"])
@pytest.mark.parametrize("body,status,message", BAD_HTTP, ids=[json.dumps(b) for b, _, _ in BAD_HTTP])
def test_bad_http_settings_are_refused_and_change_nothing(plain, model, body, status, message):
    r = post(plain, body, model)
    assert (r.status_code, r.json()) == (status, {"error": message})
    assert get(plain) == DEFAULTS
    assert get(plain, "simple") == DEFAULTS
    infer_simple(plain)


@pytest.mark.parametrize("raw", [b"{", b"", b"not json"])
def test_bodies_that_are_no_json_are_400(plain, raw):
    r = requests.post(f"{plain.base}/v2/trace/setting", data=raw)
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith("failed to parse the request JSON buffer"), r.json()
    assert get(plain) == DEFAULTS
    infer_simple(plain)


def test_unknown_model_is_400(plain):
    for r in (requests.get(f"{plain.base}/v2/models/nope/trace/setting"),
              post(plain, {"trace_rate": "2"}, "nope")):
        assert (r.status_code, r.json()) == (400, {"error": "Request for unknown model : nope"})
    client = grpcclient.InferenceServerClient(plain.grpc_url)
    for call in (lambda: client.get_trace_settings(model_name="nope"),
                 lambda: client.update_trace_settings(model_name="nope", settings={"trace_rate": "2"})):
        with pytest.raises(InferenceServerException) as e:
            call()
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert e.value.message() == "Request for unknown model : nope"
    assert get(plain) == DEFAULTS


BAD_GRPC = [
    ({"trace_rate": "x"}, "INVALID_ARGUMENT", "Unable to parse 'trace_rate', got: x"),
    ({"log_frequency": "x"}, "INVALID_ARGUMENT", "Unable to parse 'log_frequency', got: x"),
    ({"trace_count": "-5"}, "INVALID_ARGUMENT",
     "Unable to parse 'trace_count'. Expecting value >= -1, got:-5"),
    ({"trace_level": ["OFF", "TIMESTAMPS"]}, "INVALID_ARGUMENT",
     "Expect only one trace level 'OFF' is specified"),
    ({"trace_level": ["TIMESTAMPS"]}, "INVALID_ARGUMENT", NO_FILE),
    ({"trace_file": "/tmp/trace.json"}, "UNIMPLEMENTED", FILE_FIXED),
    ({"trace_file": None}, "UNIMPLEMENTED", FILE_FIXED),
]


@pytest.mark.parametrize("model", [None, "simple"], ids=["global", "model"])
@pytest.mark.parametrize("settings,code,message", BAD_GRPC, ids=[json.dumps(s) for s, _, _ in BAD_GRPC])
def test_bad_grpc_settings_are_refused_and_change_nothing(plain, model, settings, code, message):
    client = grpcclient.InferenceServerClient(plain.grpc_url)
    with pytest.raises(InferenceServerException) as e:
        client.update_trace_settings(model_name=model, settings=settings)
    assert (e.value.status(), e.value.message()) == (f"StatusCode.{code}", message)
    assert grpc_get(plain) == DEFAULTS
    assert grpc_get(plain, "simple") == DEFAULTS
    infer_simple(plain, "grpc")


def test_deprecated_flags_set_the_settings_and_log_frequency_splits_files(tmp_path):
    path = tmp_path / "trace.json"
    s = start_server(tmp_path, [repository(tmp_path, ["simple"])],
                     [f"--trace-file={path}", "--trace-level=TIMESTAMPS", "--trace-rate=1",
                      "--trace-count=100", "--trace-log-frequency=2"])
    try:
        expected = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "100",
                    "log_frequency": "2", "trace_file": str(path), "trace_mode": "triton"}
        assert get(s) == expected
        assert grpc_get(s) == expected
        for i in range(4):
            infer_simple(s, request_id=f"r{i}")
        # The count goes down as traces are taken.
        assert get(s)["trace_count"] == "96"
        files = new_files(path, 0, 2)
        for i, traces in enumerate(files):
            assert len(traces) == 2, traces
            assert sorted(t.header["request_id"] for t in traces.values()) == [f"r{2 * i}", f"r{2 * i + 1}"]
        assert not path.exists()
    finally:
        assert stop_server(s) == 0, s.log()
    assert not path.exists(), path.read_text()


def test_trace_count_writes_at_zero_and_the_rest_at_exit(tmp_path):
    path = tmp_path / "trace.json"
    s = start_server(tmp_path, [repository(tmp_path, ["simple", "string_identity"])],
                     trace_config(f"triton,file={path}", "level=TIMESTAMPS", "level=TENSORS",
                                  "rate=1", "count=3"))
    try:
        expected = {"trace_level": ["TIMESTAMPS", "TENSORS"], "trace_rate": "1", "trace_count": "3",
                    "log_frequency": "0", "trace_file": str(path), "trace_mode": "triton"}
        assert get(s) == expected
        infer_simple(s, request_id="r0")
        infer_simple(s, request_id="r1")
        assert get(s)["trace_count"] == "1"
        assert not path.exists() and not indexed_files(path)
        infer_simple(s, request_id="r2")
        assert get(s)["trace_count"] == "0"
        (traces,) = new_files(path, 0, 1)
        assert sorted(t.header["request_id"] for t in traces.values()) == ["r0", "r1", "r2"]
        infer_simple(s, request_id="r3")  # no count left: not traced
        assert get(s)["trace_count"] == "0"

        r = post(s, {"trace_count": "2", "trace_level": ["TIMESTAMPS"]})
        assert r.json() == {**expected, "trace_level": ["TIMESTAMPS"], "trace_count": "2"}
        infer_strings(s, "grpc", [b"a"])
        assert get(s)["trace_count"] == "1"
    finally:
        assert stop_server(s) == 0, s.log()
    # The count was not reached: the trace went to the file itself at exit.
    _, trace = only(traces_in(read_array(path)))
    assert trace.header["model_name"] == "string_identity" and not trace.tensors
    check_request_stamps(trace.stamps, "grpc")
    (first,) = [traces_in(read_array(f)) for f in indexed_files(path)]
    assert sorted(t.header["request_id"] for t in first.values()) == ["r0", "r1", "r2"]


# === trace files: per-model settings on a server with a file, level OFF ======

@pytest.fixture(scope="module")
def filed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("filed")
    path = tmp / "traces" / "trace.json"
    path.parent.mkdir()
    s = start_server(tmp, [repository(tmp, ["simple", "string_identity"])],
                     trace_config(f"triton,file={path}", "triton,log-frequency=1"))
    s.trace_path = path
    s.settings = {**DEFAULTS, "log_frequency": "1", "trace_file": str(path)}
    yield s
    assert stop_server(s) == 0, s.log()


def test_global_null_goes_back_to_the_flag_values(filed):
    assert get(filed) == filed.settings
    try:
        r = post(filed, {"log_frequency": "5", "trace_rate": "7", "trace_level": ["TIMESTAMPS"]})
        assert r.json() == {**filed.settings, "log_frequency": "5", "trace_rate": "7",
                            "trace_level": ["TIMESTAMPS"]}
    finally:
        r = post(filed, {"log_frequency": None, "trace_rate": None, "trace_level": None})
    assert r.json() == filed.settings
    assert get(filed, "simple") == filed.settings


def test_a_level_for_one_model_traces_only_that_model(filed):
    before = len(indexed_files(filed.trace_path))
    try:
        r = post(filed, {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}, "simple")
        assert r.json() == {**filed.settings, "trace_level": ["TIMESTAMPS"], "trace_rate": "1"}
        assert get(filed) == filed.settings
        infer_strings(filed, "http-json", [b"x"])
        infer_strings(filed, "grpc", [b"y"])
        infer_simple(filed, "http")
        infer_simple(filed, "grpc")
        files = new_files(filed.trace_path, before, 2)
    finally:
        clear_all(filed, "simple")
    assert get(filed, "simple") == filed.settings
    for traces, protocol in zip(files, ["http", "grpc"]):
        trace_id, trace = only(traces)
        assert trace.header == {"id": trace_id, "model_name": "simple", "model_version": 1}
        check_request_stamps(trace.stamps, protocol)
        assert not trace.tensors
    time.sleep(0.3)
    assert len(indexed_files(filed.trace_path)) == before + 2


def test_rate_traces_every_nth_request(filed):
    before = len(indexed_files(filed.trace_path))
    try:
        post(filed, {"trace_level": ["TIMESTAMPS"], "trace_rate": "3", "trace_count": "10"},
             "simple").raise_for_status()
        infer_simple(filed, request_id="n1")
        infer_simple(filed, request_id="n2")
        assert get(filed, "simple")["trace_count"] == "10"
        infer_simple(filed, request_id="n3")
        assert get(filed, "simple")["trace_count"] == "9"
        for i in range(4, 7):
            infer_simple(filed, request_id=f"n{i}")
        assert get(filed, "simple")["trace_count"] == "8"
        files = new_files(filed.trace_path, before, 2)
    finally:
        clear_all(filed, "simple")
    assert [only(traces)[1].header["request_id"] for traces in files] == ["n3", "n6"]
    time.sleep(0.3)
    assert len(indexed_files(filed.trace_path)) == before + 2


# === trace files: TIMESTAMPS and TENSORS for every request ===================

@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("traced")
    path = tmp / "trace.json"
    models = ["simple", "string_identity", "preprocess", "mlp", "mlp_pipeline"]
    s = start_server(tmp, [repository(tmp, models)],
                     trace_config(f"triton,file={path}", "triton,log-frequency=1", "rate=1",
                                  "level=TIMESTAMPS", "level=TENSORS"))
    s.trace_path = path
    yield s
    assert stop_server(s) == 0, s.log()


@pytest.mark.parametrize("protocol", ["http-json", "http-binary", "grpc"])
def test_a_request_writes_its_timestamps(traced, protocol):
    before = len(indexed_files(traced.trace_path))
    infer_simple(traced, protocol, request_id="req-7")
    (traces,) = new_files(traced.trace_path, before, 1)
    trace_id, trace = only(traces)
    assert trace.header == {"id": trace_id, "model_name": "simple", "model_version": 1,
                            "request_id": "req-7"}
    check_request_stamps(trace.stamps, protocol)


def test_tensors_level_writes_inputs_and_outputs(traced):
    before = len(indexed_files(traced.trace_path))
    infer_simple(traced, "http")
    (traces,) = new_files(traced.trace_path, before, 1)
    trace_id, trace = only(traces)
    got = sorted((t["activity"], t["tensor"]["name"], t["tensor"]["data"], t["tensor"]["shape"],
                  t["tensor"]["dtype"], t["id"]) for t in trace.tensors)

    def data(array):
        return ",".join(str(v) for v in array.flatten())

    assert got == [
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT0", data(A + 3), "1,16", "INT32", trace_id),
        ("TENSOR_BACKEND_OUTPUT", "OUTPUT1", data(A - 3), "1,16", "INT32", trace_id),
        ("TENSOR_QUEUE_INPUT", "INPUT0", data(A), "1,16", "INT32", trace_id),
        ("TENSOR_QUEUE_INPUT", "INPUT1", data(np.full(16, 3)), "1,16", "INT32", trace_id),
    ]


def test_tensors_level_writes_bytes_quoted_as_valid_json(traced):
    before = len(indexed_files(traced.trace_path))
    infer_strings(traced, "grpc", [b"a", b"bc", b"x y"])
    infer_strings(traced, "http-binary", [b"a", b'q"q'])
    plain, quoted = [only(t)[1] for t in new_files(traced.trace_path, before, 2)]
    tensors = {(t["activity"], t["tensor"]["name"]): t["tensor"] for t in plain.tensors}
    expected = {"data": '"a","bc","x y"', "shape": "1,3", "dtype": "BYTES"}
    assert tensors == {("TENSOR_QUEUE_INPUT", "INPUT0"): {"name": "INPUT0", **expected},
                       ("TENSOR_BACKEND_OUTPUT", "OUTPUT0"): {"name": "OUTPUT0", **expected}}
    # Triton's text for the element is `"q"q"`; escaping it once more is
    # as good, as long as the file is JSON (read_array checked that).
    assert {t["tensor"]["data"] for t in quoted.tensors} <= {'"a","q"q"', '"a","q\\"q"'}
    assert len(quoted.tensors) == 2 and {t["tensor"]["shape"] for t in quoted.tensors} == {"1,2"}


@pytest.mark.parametrize("protocol", ["http-binary", "grpc"])
def test_an_ensemble_writes_a_trace_per_model_with_its_parent(traced, protocol):
    before = len(indexed_files(traced.trace_path))
    infer_pipeline(traced, protocol)
    (traces,) = new_files(traced.trace_path, before, 1)
    assert len(traces) == 3, traces
    by_model = {t.header["model_name"]: (i, t) for i, t in traces.items()}
    assert set(by_model) == {"mlp_pipeline", "preprocess", "mlp"}
    ensemble_id, ensemble = by_model["mlp_pipeline"]
    assert ensemble.header == {"id": ensemble_id, "model_name": "mlp_pipeline", "model_version": 1}
    recv, send = FRONTEND[kind(protocol)]
    assert set(recv + send + ["REQUEST_START", "REQUEST_END"]) <= set(ensemble.stamps), ensemble.stamps
    assert_ordered(ensemble.stamps, recv + ["REQUEST_START"])
    for model in ("preprocess", "mlp"):
        trace_id, trace = by_model[model]
        assert trace.header == {"id": trace_id, "model_name": model, "model_version": 1,
                                "parent_id": ensemble_id}
        assert set(trace.stamps) == set(ENGINE), trace.stamps
        assert_ordered(trace.stamps, ENGINE)
        assert ensemble.stamps["REQUEST_START"] <= trace.stamps["REQUEST_START"]
        assert trace.stamps["COMPUTE_START"] <= ensemble.stamps[send[0]]
    assert by_model["preprocess"][1].stamps["COMPUTE_OUTPUT_START"] <= by_model["mlp"][1].stamps["REQUEST_START"]


def test_trace_ids_are_unique_across_the_run(traced):
    before = len(indexed_files(traced.trace_path))
    infer_simple(traced, "http")
    infer_simple(traced, "grpc")
    infer_pipeline(traced)
    new_files(traced.trace_path, before, 3)
    ids = [i for f in indexed_files(traced.trace_path) for i in traces_in(read_array(f))]
    assert len(ids) >= 5 and len(ids) == len(set(ids)), ids


# === OpenTelemetry ===========================================================

def otel_server(tmp, models, scheme, *settings):
    """A server exporting to a fresh local receiver, stopped (and the
    receiver closed) when the generator ends."""
    receiver = Receiver()
    url = f"{scheme}127.0.0.1:{receiver.port}/v1/traces"
    s = start_server(tmp, [repository(tmp, models)],
                     trace_config("mode=opentelemetry", f"opentelemetry,url={url}",
                                  "level=TIMESTAMPS", "opentelemetry,bsp_schedule_delay=100", *settings))
    s.receiver, s.url = receiver, url
    try:
        yield s
        assert stop_server(s) == 0, s.log()
    finally:
        receiver.close()


@pytest.fixture(scope="module")
def otel(tmp_path_factory):
    """Every request traced, exported to a local receiver, default resource."""
    yield from otel_server(tmp_path_factory.mktemp("otel"), ["simple", "preprocess", "mlp", "mlp_pipeline"],
                           "http://", "rate=1")


@pytest.fixture(scope="module")
def otel_sampled(tmp_path_factory):
    """Rate 1000 (only propagated contexts are traced), a url without
    `http://`, resource attributes and batch settings from the flags."""
    yield from otel_server(tmp_path_factory.mktemp("otel_sampled"), ["simple"], "", "rate=1000",
                           "opentelemetry,bsp_max_queue_size=64",
                           "opentelemetry,bsp_max_export_batch_size=32",
                           "opentelemetry,resource=service.name=nereid-test",
                           "opentelemetry,resource=test.key=test.value")


def test_opentelemetry_settings(otel, otel_sampled):
    expected = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "-1",
                "trace_mode": "opentelemetry", "url": otel.url, "bsp_max_export_batch_size": "512",
                "bsp_schedule_delay": "100", "bsp_max_queue_size": "2048"}
    assert get(otel) == expected
    assert get(otel, "simple") == expected
    assert grpc_get(otel) == expected
    assert post(otel, {"trace_rate": "1"}).json() == expected
    assert get(otel_sampled) == {**expected, "trace_rate": "1000", "url": otel_sampled.url,
                                 "bsp_max_export_batch_size": "32", "bsp_max_queue_size": "64"}


@pytest.mark.parametrize("protocol", ["http-json", "grpc"])
def test_opentelemetry_spans_of_a_request(otel, protocol):
    before = otel.receiver.trace_ids()
    infer_simple(otel, protocol)
    spans = otel.receiver.wait_trace(before, ["InferRequest", "simple", "compute"])
    root = check_span_tree(spans, protocol, {"simple": None})
    assert root.span.parent_span_id == b""
    assert {s.resource["service.name"] for s in spans} == {("string_value", "triton-inference-server")}
    assert {(path, ctype) for path, ctype, _ in otel.receiver.http.received} == \
        {("/v1/traces", "application/x-protobuf")}


def test_opentelemetry_spans_of_an_ensemble(otel):
    before = otel.receiver.trace_ids()
    infer_pipeline(otel)
    spans = otel.receiver.wait_trace(
        before, ["InferRequest", "mlp_pipeline", "preprocess", "mlp", "compute", "compute"])
    check_span_tree(spans, "http", {"mlp_pipeline": None, "preprocess": "mlp_pipeline",
                                    "mlp": "mlp_pipeline"})


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_opentelemetry_traceparent_is_traced_and_continued(otel_sampled, protocol):
    trace_id = "0af7651916cd43dd8448eb211c12666c" if protocol == "http" else "4bf92f3577b34da6a3ce929d0e0e4736"
    parent = "b7ad6b7169242424" if protocol == "http" else "00f067aa0ba902b7"
    receiver = otel_sampled.receiver
    before = receiver.trace_ids()
    infer_simple(otel_sampled, protocol)  # rate 1000: not traced
    infer_simple(otel_sampled, protocol, headers={"traceparent": f"00-{trace_id}-{parent}-01"})
    spans = receiver.wait_trace(before, ["InferRequest", "simple", "compute"])
    root = check_span_tree(spans, protocol, {"simple": None})
    assert root.span.trace_id.hex() == trace_id
    assert root.span.parent_span_id.hex() == parent
    resource = spans[0].resource
    assert resource["service.name"] == ("string_value", "nereid-test")
    assert resource["test.key"] == ("string_value", "test.value")
