"""Triton's sequence client examples (`simple_http_sequence_sync_infer_client.py`,
`simple_grpc_sequence_stream_infer_client.py`, with and without `--dyna`)
against models with the examples' names, configs and I/O: Triton's own
`docs/examples/model_repository/simple_sequence` and `simple_dyna_sequence`
configs (the corpus copies), with ONNX files made here that answer as the
examples expect:

- simple_sequence: OUTPUT = INPUT + START (the first answer is the first
  input plus one, the others echo their input);
- simple_dyna_sequence (oldest strategy, CORRID UINT64): the same, plus the
  correlation ID on the request that ends the sequence.

The checks are the examples' own (sequence IDs 1000 and 1001, the values
[0, 11, 7, 5, 3, 2, 0, 1] and their negatives after 100, a string ID on
simple_sequence), written again here. Real Triton 2.51 with its ONNX
Runtime backend gives the same answers for these models."""

from __future__ import annotations

import queue
import uuid
from functools import partial

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from onnx import TensorProto, helper

from conftest import REPO_ROOT, start_server, stop_server

EXAMPLES = REPO_ROOT / "tests/corpus/triton-configs/docs/examples/model_repository"
VALUES = [11, 7, 5, 3, 2, 0, 1]


def example_model(dyna: bool) -> onnx.ModelProto:
    def io(name, dtype=TensorProto.INT32):
        return helper.make_tensor_value_info(name, dtype, ["batch", 1])

    nodes = [
        helper.make_node("Add", ["INPUT", "START"], ["started"]),
        helper.make_node("Mul", ["started", "READY"], ["ready" if dyna else "OUTPUT"]),
    ]
    inputs = [io("INPUT"), io("START"), io("READY")]
    if dyna:
        nodes += [
            helper.make_node("Cast", ["CORRID"], ["corrid"], to=TensorProto.INT32),
            helper.make_node("Mul", ["corrid", "END"], ["ending"]),
            helper.make_node("Add", ["ready", "ending"], ["OUTPUT"]),
        ]
        inputs += [io("END"), io("CORRID", TensorProto.UINT64)]
    graph = helper.make_graph(nodes, "example_sequence", inputs, [io("OUTPUT")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


# simple_sequence's config leaves max_sequence_idle_microseconds at the
# default (1 s): a client thread that came back more than a second late on
# a busy machine would find its sequence released. The copy here names a
# long one; simple_dyna_sequence's own is 10 s.
IDLE = "sequence_batching {\n  max_sequence_idle_microseconds: 60000000\n"


def write_examples(repo) -> None:
    for name, dyna in (("simple_sequence", False), ("simple_dyna_sequence", True)):
        (repo / name / "1").mkdir(parents=True)
        config = (EXAMPLES / name / "config.pbtxt").read_text()
        if "max_sequence_idle_microseconds" not in config:
            config = config.replace("sequence_batching {\n", IDLE, 1)
        (repo / name / "config.pbtxt").write_text(config)
        onnx.save(example_model(dyna), repo / name / "1" / "model.onnx")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sequence_examples")
    write_examples(tmp / "models")
    server = start_server(tmp, [tmp / "models"])
    yield server
    assert stop_server(server) == 0, server.log()


def expected(first: int, values: list[int], sequence_id: int, dyna: bool) -> list[int]:
    """What the example expects: the first input plus one, then each input
    echoed, the ID added on the last one for the dyna model."""
    answers = [first + 1] + list(values)
    if dyna:
        answers[-1] += sequence_id
    return answers


def http_sequence(url, model, sequence_id, inputs) -> list[int]:
    client = httpclient.InferenceServerClient(url)
    answers = []
    try:
        for i, value in enumerate(inputs):
            x = httpclient.InferInput("INPUT", [1, 1], "INT32")
            x.set_data_from_numpy(np.full([1, 1], value, dtype=np.int32))
            result = client.infer(model, [x], outputs=[httpclient.InferRequestedOutput("OUTPUT")],
                                  sequence_id=sequence_id, sequence_start=i == 0,
                                  sequence_end=i == len(inputs) - 1)
            answers.append(int(result.as_numpy("OUTPUT")[0][0]))
    finally:
        client.close()
    return answers


@pytest.mark.parametrize("dyna", [False, True])
def test_the_http_sync_example(server, dyna):
    model = "simple_dyna_sequence" if dyna else "simple_sequence"
    negatives = [-v for v in VALUES]
    assert http_sequence(server.http_url, model, 1000, [0] + VALUES) == expected(0, VALUES, 1000, dyna)
    assert http_sequence(server.http_url, model, 1001, [100] + negatives) == expected(
        100, negatives, 1001, dyna)
    if not dyna:
        # A UUID string ID on the model without CORRID.
        answers = http_sequence(server.http_url, "simple_sequence", str(uuid.uuid4()),
                                [20] + negatives)
        assert answers == [21] + negatives


@pytest.mark.parametrize("dyna", [False, True])
def test_the_grpc_stream_example(server, dyna):
    model = "simple_dyna_sequence" if dyna else "simple_sequence"
    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), answers))
    sequences = {1000: [0] + VALUES, 1001: [100] + [-v for v in VALUES]}
    try:
        # Both sequences' requests interleaved on one stream, as the example.
        for i in range(len(VALUES) + 1):
            for sid, inputs in sequences.items():
                x = grpcclient.InferInput("INPUT", [1, 1], "INT32")
                x.set_data_from_numpy(np.full([1, 1], inputs[i], dtype=np.int32))
                client.async_stream_infer(model, [x], request_id=f"{sid}_{i}", sequence_id=sid,
                                          sequence_start=i == 0, sequence_end=i == len(VALUES))
        got: dict[int, dict[int, int]] = {sid: {} for sid in sequences}
        for _ in range(2 * (len(VALUES) + 1)):
            result, error = answers.get(timeout=30)
            assert error is None, error
            sid, step = (int(p) for p in result.get_response().id.split("_"))
            got[sid][step] = int(result.as_numpy("OUTPUT")[0][0])
    finally:
        client.stop_stream()
        client.close()
    for sid, inputs in sequences.items():
        answers_in_order = [got[sid][i] for i in range(len(inputs))]
        assert answers_in_order == expected(inputs[0], inputs[1:], sid, dyna)
