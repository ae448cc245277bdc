"""Sequence batching (issue 22): Triton's sequence batcher, direct
strategy, with control inputs and implicit state, over tritonclient HTTP
and gRPC (streaming included).

The model is an ONNX accumulator made here: each step adds INPUT to the
sequence's state (`INPUT_STATE` -> `OUTPUT_STATE`, which the server keeps
between steps and never sends), starting from zero at START; it echoes the
END and CORRID control tensors so the test sees what the server fed it."""

from __future__ import annotations

import queue
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import onnx
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from conftest import start_server, stop_server, wait_until

CONFIG = """
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {max_batch}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "END_OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "CORRID_OUT" data_type: {corrid_type} dims: [ 1 ] }}
]
sequence_batching {{
  max_sequence_idle_microseconds: {idle_us}
  {strategy}
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "END" control [ {{ kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY" control [ {{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: {corrid_type} }} ] }}
  ]
  state [
    {{
      input_name: "INPUT_STATE"
      output_name: "OUTPUT_STATE"
      data_type: TYPE_INT32
      dims: [ 1 ]
      initial_state: {{ data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" }}
    }}
  ]
}}
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
"""


def accumulator(corrid=TensorProto.UINT64) -> onnx.ModelProto:
    """OUTPUT = OUTPUT_STATE = (INPUT_STATE * (1 - START) + INPUT) * READY;
    END_OUT = END; CORRID_OUT = CORRID (of type `corrid`). Every tensor is
    [batch, 1]."""

    def io(name, dtype):
        return helper.make_tensor_value_info(name, dtype, ["batch", 1])

    one = helper.make_tensor("one", TensorProto.INT32, [], [1])
    nodes = [
        helper.make_node("Sub", ["one", "START"], ["keep"]),
        helper.make_node("Mul", ["INPUT_STATE", "keep"], ["kept"]),
        helper.make_node("Add", ["kept", "INPUT"], ["sum"]),
        helper.make_node("Mul", ["sum", "READY"], ["acc"]),
        helper.make_node("Identity", ["acc"], ["OUTPUT"]),
        helper.make_node("Identity", ["acc"], ["OUTPUT_STATE"]),
        helper.make_node("Identity", ["END"], ["END_OUT"]),
        helper.make_node("Identity", ["CORRID"], ["CORRID_OUT"]),
    ]
    graph = helper.make_graph(
        nodes,
        "accumulator",
        [io("INPUT", TensorProto.INT32), io("START", TensorProto.INT32),
         io("END", TensorProto.INT32), io("READY", TensorProto.INT32),
         io("CORRID", corrid), io("INPUT_STATE", TensorProto.INT32)],
        [io("OUTPUT", TensorProto.INT32), io("OUTPUT_STATE", TensorProto.INT32),
         io("END_OUT", TensorProto.INT32), io("CORRID_OUT", corrid)],
        initializer=[one],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


# A sequence is released when it has had no request for its model's idle
# time. Only the reaping tests' models (`*_idle`) have a short one: on
# the others a client thread that comes back late on a busy machine would
# find its sequence gone, which is not what those tests are about.
LONG_IDLE_US = 60_000_000
SHORT_IDLE_US = 200_000

DIRECT = "direct { }"
OLDEST = ("oldest { max_candidate_sequences: 6 preferred_batch_size: [ 2, 4 ] "
          "max_queue_delay_microseconds: 2000 }")
MODELS = {
    # name: (max_batch_size, instances, idle µs, CORRID type, strategy)
    "acc": (8, 1, LONG_IDLE_US, "TYPE_UINT64", DIRECT),
    "acc_two": (4, 2, LONG_IDLE_US, "TYPE_UINT64", DIRECT),
    "acc_one_slot": (1, 1, LONG_IDLE_US, "TYPE_UINT64", DIRECT),
    "acc_idle": (1, 1, SHORT_IDLE_US, "TYPE_UINT64", DIRECT),
    "acc_string": (4, 1, LONG_IDLE_US, "TYPE_STRING", DIRECT),
    "acc_oldest": (4, 2, LONG_IDLE_US, "TYPE_UINT64", OLDEST),
}


def write_models(repo):
    """The accumulator under every name of MODELS, with its config."""
    for name, (max_batch, instances, idle_us, corrid_type, strategy) in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        corrid = TensorProto.STRING if corrid_type == "TYPE_STRING" else TensorProto.UINT64
        onnx.save(accumulator(corrid), repo / name / "1" / "model.onnx")
        (repo / name / "config.pbtxt").write_text(CONFIG.format(
            name=name, max_batch=max_batch, instances=instances, idle_us=idle_us,
            corrid_type=corrid_type, strategy=strategy))


PYTHON_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "FLAGS" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "ENDED" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: {idle_us}
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
}
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
# The Python accumulator under each name, with its idle time.
PYTHON_MODELS = {"pyacc": LONG_IDLE_US, "pyacc_idle": SHORT_IDLE_US}

# A Python model keeping its own sums by correlation_id(), as a Triton
# user writes one; START and READY arrive as inputs, flags() as Triton's.
PYTHON_MODEL = """
import os, sys
for _p in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):
    if _p and _p not in sys.path:
        sys.path.insert(0, _p)
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}
        self.ended = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            x = int(pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().flatten()[0])
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            ready = pb_utils.get_input_tensor_by_name(request, "READY").as_numpy()
            assert start.shape == (1, 1) and ready.flatten()[0] == 1
            key = request.correlation_id()
            if start.flatten()[0] == 1:
                self.sums[key] = 0
            self.sums[key] = self.sums.get(key, 0) + x
            if request.flags() & 2:
                self.ended += 1
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT", np.array([[self.sums[key]]], dtype=np.int32)),
                pb_utils.Tensor("FLAGS", np.array([[request.flags()]], dtype=np.int32)),
                pb_utils.Tensor("ENDED", np.array([[self.ended]], dtype=np.int32)),
            ]))
        return responses
"""


ENSEMBLE_CONFIG = """
name: "acc_pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling {
  step [ {
    model_name: "acc"
    model_version: -1
    input_map { key: "INPUT" value: "IN" }
    output_map { key: "OUTPUT" value: "SUM" }
  } ]
}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sequence")
    repo = tmp / "models"
    write_models(repo)
    for name, idle_us in PYTHON_MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        config = PYTHON_CONFIG.replace("{name}", name).replace("{idle_us}", str(idle_us))
        (repo / name / "config.pbtxt").write_text(config)
        (repo / name / "1" / "model.py").write_text(PYTHON_MODEL)
    (repo / "acc_pipeline" / "1").mkdir(parents=True)
    (repo / "acc_pipeline" / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    server = start_server(tmp, [repo], [f"--backend-config=python,python-path={sys.executable}"])
    yield server
    assert stop_server(server) == 0, server.log()


def http_step(url, model, value, sequence_id, start=False, end=False):
    client = httpclient.InferenceServerClient(url)
    try:
        x = httpclient.InferInput("INPUT", [1, 1], "INT32")
        x.set_data_from_numpy(np.array([[value]], dtype=np.int32))
        result = client.infer(model, [x], sequence_id=sequence_id, sequence_start=start,
                              sequence_end=end)
        corrid = result.as_numpy("CORRID_OUT")[0, 0]
        corrid = corrid.decode() if isinstance(corrid, bytes) else int(corrid)
        return (int(result.as_numpy("OUTPUT")[0, 0]), int(result.as_numpy("END_OUT")[0, 0]),
                corrid, result.get_output("OUTPUT_STATE"))
    finally:
        client.close()


def run_sequence(url, model, sequence_id, values):
    """Sends `values` as one sequence, one step at a time; the outputs."""
    answers = []
    for i, value in enumerate(values):
        answers.append(http_step(url, model, value, sequence_id, start=i == 0,
                                 end=i == len(values) - 1))
    return answers


def check(answers, sequence_id, values):
    sums = np.cumsum(values).tolist()
    assert [a[0] for a in answers] == sums
    assert [a[1] for a in answers] == [0] * (len(values) - 1) + [1]
    assert {a[2] for a in answers} == {sequence_id}
    assert all(a[3] is None for a in answers), "the state output is never sent"


@pytest.mark.parametrize("model", ["acc", "acc_two", "acc_one_slot", "acc_oldest"])
def test_interleaved_sequences_accumulate_their_own_state(server, model):
    # More sequences than slots on every model: some wait in the backlog.
    ids = list(range(101, 121))
    values = {i: [(i * 7 + k) % 11 for k in range(6)] for i in ids}
    with ThreadPoolExecutor(len(ids)) as pool:
        results = dict(zip(ids, pool.map(
            lambda i: run_sequence(server.http_url, model, i, values[i]), ids)))
    for i in ids:
        check(results[i], i, values[i])
    stats = requests.get(f"http://{server.http_url}/v2/models/{model}/stats", timeout=30).json()
    inference = stats["model_stats"][0]["inference_stats"]
    assert int(inference["success"]["count"]) >= len(ids) * 6


def test_sequences_are_batched_one_step_each(server):
    # Eight sequences at once on one instance with eight slots: executions
    # hold several sequences' steps.
    ids = list(range(201, 209))
    before = requests.get(f"http://{server.http_url}/v2/models/acc/stats", timeout=30).json()
    with ThreadPoolExecutor(len(ids)) as pool:
        list(pool.map(lambda i: run_sequence(server.http_url, "acc", i, [1] * 10), ids))
    after = requests.get(f"http://{server.http_url}/v2/models/acc/stats", timeout=30).json()
    executions = (int(after["model_stats"][0]["execution_count"])
                  - int(before["model_stats"][0]["execution_count"]))
    assert executions < len(ids) * 10, executions


def test_a_start_on_a_live_sequence_starts_it_again(server):
    assert http_step(server.http_url, "acc", 5, 300, start=True)[0] == 5
    assert http_step(server.http_url, "acc", 2, 300)[0] == 7
    assert http_step(server.http_url, "acc", 4, 300, start=True)[0] == 4
    assert http_step(server.http_url, "acc", 1, 300, end=True)[0] == 5


def error_of(call) -> str:
    with pytest.raises(InferenceServerException) as raised:
        call()
    return raised.value.message()


def test_tritons_errors(server):
    url = server.http_url
    assert error_of(lambda: http_step(url, "acc", 1, 999_999)) == (
        "inference request for sequence 999999 to model 'acc' must specify the START flag on "
        "the first request of the sequence")
    assert error_of(lambda: http_step(url, "acc", 1, 0, start=True)) == (
        "inference request to model 'acc' must specify a non-zero or non-empty correlation ID")
    client = httpclient.InferenceServerClient(url)
    x = httpclient.InferInput("INPUT", [2, 1], "INT32")
    x.set_data_from_numpy(np.array([[1], [2]], dtype=np.int32))
    assert error_of(lambda: client.infer("acc", [x], sequence_id=5, sequence_start=True)) == (
        "inference request to model 'acc' must specify batch-size 1 due to requirements of "
        "sequence batcher")
    # CORRID is UINT64 here: a string ID cannot be fed to it. (Triton 2.51
    # accepts it and feeds the model the string's length-prefixed bytes
    # read as a number; Nereid says why it cannot.)
    assert "CORRID" in error_of(lambda: http_step(url, "acc", 1, "abc", start=True))
    # After its END a sequence is unknown again.
    run_sequence(url, "acc", 301, [1, 2])
    assert "must specify the START flag" in error_of(lambda: http_step(url, "acc", 1, 301))


def reaped(server, model: str) -> float:
    """nereid_sequence_reaped for `model` (0 before the first release)."""
    metrics = requests.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=30).text
    lines = [line for line in metrics.splitlines()
             if line.startswith("nereid_sequence_reaped{") and f'model="{model}"' in line]
    return float(lines[0].split()[-1]) if lines else 0.0


def wait_reaped(server, model: str, count: float) -> None:
    """Waits until `model` has released `count` idle sequences. The server
    forgets a sequence before it counts it, so afterwards its next request
    needs START."""
    wait_until(lambda: reaped(server, model) >= count, f"{count:g} sequences of '{model}' reaped")


def test_an_idle_sequence_is_released(server):
    url = server.http_url
    before = reaped(server, "acc_idle")
    assert http_step(url, "acc_idle", 3, 400, start=True)[0] == 3
    # Idle beyond max_sequence_idle_microseconds (0.2 s): the slot goes,
    # and (beyond Triton) the release is counted.
    wait_reaped(server, "acc_idle", before + 1)
    assert "must specify the START flag" in error_of(lambda: http_step(url, "acc_idle", 1, 400))
    # The only slot is free for another sequence: one that starts and
    # ends in one request, as a longer one would be reaped itself if its
    # client came back late.
    check(run_sequence(url, "acc_idle", 401, [5]), 401, [5])


def test_grpc_streams_keep_each_sequences_order(server):
    answers: queue.Queue = queue.Queue()

    def callback(result, error):
        answers.put((result, error))

    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=partial(callback))
    ids = [501, 502, 503]
    steps = 8
    try:
        for k in range(steps):
            for i in ids:
                x = grpcclient.InferInput("INPUT", [1, 1], "INT32")
                x.set_data_from_numpy(np.array([[i % 10 + k]], dtype=np.int32))
                client.async_stream_infer("acc", [x], request_id=f"{i}-{k}", sequence_id=i,
                                          sequence_start=k == 0, sequence_end=k == steps - 1)
        got: dict[int, list[int]] = {i: [] for i in ids}
        for _ in range(steps * len(ids)):
            result, error = answers.get(timeout=30)
            assert error is None, error
            sequence = int(result.get_response().id.split("-")[0])
            got[sequence].append(int(result.as_numpy("OUTPUT")[0, 0]))
    finally:
        client.stop_stream()
        client.close()
    for i in ids:
        assert got[i] == np.cumsum([i % 10 + k for k in range(steps)]).tolist()


def test_string_ids_reach_a_string_corrid(server):
    values = [3, 1, 4, 1, 5]
    check(run_sequence(server.http_url, "acc_string", "sequence-a", values), "sequence-a", values)
    # Over gRPC (string_param), interleaved with a second one.
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        sums = {"g-1": 0, "g-2": 0}
        for k in range(4):
            for sid in sums:
                x = grpcclient.InferInput("INPUT", [1, 1], "INT32")
                x.set_data_from_numpy(np.array([[k + 1]], dtype=np.int32))
                result = client.infer("acc_string", [x], sequence_id=sid, sequence_start=k == 0,
                                      sequence_end=k == 3)
                sums[sid] += k + 1
                assert int(result.as_numpy("OUTPUT")[0, 0]) == sums[sid]
                assert result.as_numpy("CORRID_OUT")[0, 0].decode() == sid
        # A numeric CORRID refuses a string ID over gRPC too.
        x = grpcclient.InferInput("INPUT", [1, 1], "INT32")
        x.set_data_from_numpy(np.array([[1]], dtype=np.int32))
        with pytest.raises(InferenceServerException) as raised:
            client.infer("acc", [x], sequence_id="text-id", sequence_start=True)
        assert "CORRID" in raised.value.message()
    finally:
        client.close()


def test_server_metadata_lists_the_sequence_extension(server):
    meta = requests.get(f"http://{server.http_url}/v2", timeout=30).json()
    assert "sequence" in meta["extensions"]


def test_several_clients_on_one_sequence_model_at_once(server):
    # Many short sequences from many threads through both protocols.
    failures = []

    def worker(n):
        try:
            sid = 1000 + n
            check(run_sequence(server.http_url, "acc_two", sid, [n, 1, 1]), sid, [n, 1, 1])
        except Exception as e:  # noqa: BLE001 (reported below)
            failures.append(repr(e))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]


def test_a_python_model_sees_the_controls_correlation_id_and_flags(server):
    # Checked against real Triton 2.51's Python backend: the same sums and
    # flags (1: START, 2: END), START and READY as [1, 1] INT32 inputs.
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        for sid in (7, "seven"):
            sums, flags = [], []
            for i, v in enumerate([1, 2, 3]):
                x = httpclient.InferInput("INPUT", [1, 1], "INT32")
                x.set_data_from_numpy(np.array([[v]], dtype=np.int32))
                r = client.infer("pyacc", [x], sequence_id=sid, sequence_start=i == 0,
                                 sequence_end=i == 2)
                sums.append(int(r.as_numpy("OUTPUT")[0, 0]))
                flags.append(int(r.as_numpy("FLAGS")[0, 0]))
            assert sums == [1, 3, 6]
            assert flags == [1, 0, 2]
    finally:
        client.close()


def test_an_ensemble_carries_the_sequence_to_its_step(server):
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        sums = []
        for i, v in enumerate([2, 3, 4]):
            x = httpclient.InferInput("IN", [1, 1], "INT32")
            x.set_data_from_numpy(np.array([[v]], dtype=np.int32))
            r = client.infer("acc_pipeline", [x], sequence_id=7007, sequence_start=i == 0,
                             sequence_end=i == 2)
            sums.append(int(r.as_numpy("SUM")[0, 0]))
        assert sums == [2, 5, 9]
    finally:
        client.close()


def test_malformed_sequence_parameters_get_tritons_words(server):
    def post(parameters):
        body = {"parameters": parameters,
                "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [1]}]}
        r = requests.post(f"http://{server.http_url}/v2/models/acc/infer", json=body, timeout=30)
        return r.status_code, r.json().get("error")

    # Triton 2.51 answers these with the same words but status 500.
    bad_id = "Unable to parse 'sequence_id': attempt to access JSON non-string as string"
    bad_flag = "Unable to parse '{}': attempt to access JSON non-boolean as boolean"
    assert post({"sequence_id": -1, "sequence_start": True}) == (400, bad_id)
    assert post({"sequence_id": True}) == (400, bad_id)
    assert post({"sequence_id": 5, "sequence_start": "yes"}) == (
        400, bad_flag.format("sequence_start"))
    assert post({"sequence_id": 5, "sequence_start": True, "sequence_end": 1}) == (
        400, bad_flag.format("sequence_end"))


def test_a_reaped_sequence_tells_the_model_it_ended(server):
    # Beyond Triton (its issues #3652, #3492): before its slot is released,
    # an idle sequence gets an END step (zeros, flags() == 2, its
    # correlation_id()), which the statistics leave out.
    client = httpclient.InferenceServerClient(server.http_url)

    def start(sid):
        x = httpclient.InferInput("INPUT", [1, 1], "INT32")
        x.set_data_from_numpy(np.array([[1]], dtype=np.int32))
        r = client.infer("pyacc_idle", [x], sequence_id=sid, sequence_start=True)
        return int(r.as_numpy("ENDED")[0, 0])

    def inferences():
        stats = requests.get(f"http://{server.http_url}/v2/models/pyacc_idle/stats",
                             timeout=30).json()
        return int(stats["model_stats"][0]["inference_count"])

    try:
        counted = inferences()
        before = reaped(server, "pyacc_idle")
        ended = start(8001)
        # Idle beyond 0.2 s: reaped. The END step is queued on the one
        # instance before the release is counted, so it runs before 8002.
        wait_reaped(server, "pyacc_idle", before + 1)
        assert start(8002) == ended + 1
        assert inferences() == counted + 2
    finally:
        client.close()
