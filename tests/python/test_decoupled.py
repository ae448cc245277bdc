"""Decoupled Python models (tests/python/decoupled/, in the style of Triton's
python_backend examples) through tritonclient: gRPC `ModelStreamInfer` with
`triton_final_response` and empty final responses, errors midway, zero
responses, `async def execute`, BLS `exec(decoupled=True)`, the response
sender's rules, cancellation, and Triton's errors for unary calls.

The same models and checks pass against real Triton 2.51's Python backend:
set DECOUPLED_SERVER=host:http_port:grpc_port to run them against a server
that is already up (the nereid-only checks are skipped then)."""

from __future__ import annotations

import os
import queue
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import REPO_ROOT, start_server, stop_server, wait_until

MODELS = REPO_ROOT / "tests/python/decoupled"
EXTERNAL = os.environ.get("DECOUPLED_SERVER")


@dataclass
class Target:
    http_url: str
    grpc_url: str
    server: object | None  # nereid's, when the test started it


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    if EXTERNAL:
        host, http_port, grpc_port = EXTERNAL.split(":")
        yield Target(f"{host}:{http_port}", f"{host}:{grpc_port}", None)
        return
    tmp = tmp_path_factory.mktemp("decoupled")
    repo = tmp / "models"
    shutil.copytree(MODELS, repo)
    python = str(REPO_ROOT / ".venv/bin/python")
    server = start_server(tmp, [repo], [f"--backend-config=python,python-path={python}"])
    yield Target(server.http_url, server.grpc_url, server)
    stop_server(server)


def nereid_only(target):
    if target.server is None:
        pytest.skip("looks at nereid's own log")


class Stream:
    """A gRPC stream whose answers queue up as (result, error)."""

    def __init__(self, target):
        self.client = grpcclient.InferenceServerClient(target.grpc_url)
        self.answers = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.answers.put((result, error)))

    def send(self, model, inputs, request_id="", empty_final=False):
        self.client.async_stream_infer(
            model, inputs, request_id=request_id, enable_empty_final_response=empty_final
        )

    def take(self, count, timeout=60):
        return [self.answers.get(timeout=timeout) for _ in range(count)]

    def nothing_more(self, wait=0.5):
        with pytest.raises(queue.Empty):
            self.answers.get(timeout=wait)

    def close(self, cancel=False):
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def grpc_input(name, values, datatype):
    tensor = grpcclient.InferInput(name, list(np.shape(values)), datatype)
    tensor.set_data_from_numpy(np.asarray(values))
    return tensor


def int32_in(value):
    return [grpc_input("IN", np.array([value], dtype=np.int32), "INT32")]


def final(result):
    return result.get_response().parameters["triton_final_response"].bool_param


def outputs(result, name="OUT"):
    array = result.as_numpy(name)
    return None if array is None else array.tolist()


def test_repeat_answers_after_execute_returns_then_sends_the_final_flag_alone(target):
    stream = Stream(target)
    inputs = [
        grpc_input("IN", np.array([4, 2, 0, 1], dtype=np.int32), "INT32"),
        grpc_input("DELAY", np.array([1, 2, 3, 4], dtype=np.uint32), "UINT32"),
        grpc_input("WAIT", np.array([5], dtype=np.uint32), "UINT32"),
    ]
    try:
        stream.send("repeat_int32", inputs, request_id="r1", empty_final=True)
        answers = stream.take(5)
        assert [error for _, error in answers] == [None] * 5
        results = [result for result, _ in answers]
        assert [outputs(r) for r in results[:4]] == [[4], [2], [0], [1]]
        assert [outputs(r, "IDX") for r in results[:4]] == [[0], [1], [2], [3]]
        assert [final(r) for r in results] == [False, False, False, False, True]
        empty = results[4].get_response()
        assert (empty.id, empty.model_name, list(empty.outputs)) == ("r1", "repeat_int32", [])
        # Without asking, the lone final flag sends nothing.
        stream.send("repeat_int32", inputs, request_id="r2")
        assert [final(result) for result, _ in stream.take(4)] == [False] * 4
        stream.nothing_more()
    finally:
        stream.close()


def test_requests_on_one_stream_interleave_each_in_order(target):
    stream = Stream(target)
    try:
        for count in (3, 1, 0, 2):
            stream.send("square_int32", int32_in(count), request_id=f"n{count}", empty_final=True)
        answers = stream.take(3 + 1 + 0 + 2 + 4)
        by_request = {}
        for result, error in answers:
            assert error is None
            response = result.get_response()
            by_request.setdefault(response.id, []).append((outputs(result), final(result)))
        assert by_request == {
            "n3": [([3], False)] * 3 + [(None, True)],
            "n1": [([1], False), (None, True)],
            "n0": [(None, True)],
            "n2": [([2], False)] * 2 + [(None, True)],
        }
    finally:
        stream.close()


def test_an_error_midway_arrives_in_the_stream_which_stays_usable(target):
    stream = Stream(target)
    try:
        stream.send("midway_error", int32_in(7), request_id="m")
        (first, e1), (failed, error), (last, e3) = stream.take(3)
        assert (e1, e3) == (None, None)
        assert (outputs(first), final(first)) == ([7], False)
        assert failed is None and "midway failure" in str(error)
        assert (outputs(last), final(last)) == ([8], True)
        stream.send("square_int32", int32_in(1), request_id="after")
        (result, error), = stream.take(1)
        assert error is None and outputs(result) == [1]
    finally:
        stream.close()


def test_an_async_execute_streams_in_the_background(target):
    stream = Stream(target)
    try:
        stream.send("async_square", int32_in(3), empty_final=True)
        answers = stream.take(4)
        assert [outputs(r) for r, _ in answers] == [[0], [1], [2], None]
        assert [final(r) for r, _ in answers] == [False, False, False, True]
    finally:
        stream.close()


def test_a_decoupled_step_streams_through_an_ensemble(target):
    stream = Stream(target)
    try:
        stream.send("square_plus_one", int32_in(3), request_id="e", empty_final=True)
        answers = stream.take(3)
        while not final(answers[-1][0]):
            answers += stream.take(1)
        assert [error for _, error in answers] == [None] * len(answers)
        # The final flag comes with the last response when the decoupled
        # step had ended by then (as here, on Triton too), else alone.
        assert [outputs(r) for r, _ in answers] in ([[4], [4], [4]], [[4], [4], [4], None])
        assert [final(r) for r, _ in answers][:3] == [False, False, len(answers) == 3]
        assert {r.get_response().model_name for r, _ in answers} == {"square_plus_one"}
    finally:
        stream.close()


def test_a_model_that_is_not_decoupled_is_marked_final_on_the_stream(target):
    stream = Stream(target)
    try:
        stream.send("single_sender", int32_in(21))
        (result, error), = stream.take(1)
        assert error is None
        assert (outputs(result), final(result)) == ([42], True)
    finally:
        stream.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bls_iterates_over_a_decoupled_models_responses(target, protocol):
    if protocol == "http":
        client = httpclient.InferenceServerClient(target.http_url)
        tensor = httpclient.InferInput("IN", [1], "INT32")
    else:
        client = grpcclient.InferenceServerClient(target.grpc_url)
        tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([3], dtype=np.int32))
    result = client.infer("bls_square_sum", [tensor])
    # Three responses of 3, and the final flag's empty response.
    assert result.as_numpy("SUM").tolist() == [9]
    assert result.as_numpy("COUNT").tolist() == [4]


def test_a_response_sender_refuses_as_triton_does(target):
    stream = Stream(target)
    try:
        for request_id in ("first", "second"):
            stream.send("sender_rules", int32_in(0), request_id=request_id)
        texts = {}
        for result, error in stream.take(6):
            assert error is None
            texts.setdefault(result.get_response().id, []).append(result.as_numpy("TEXT")[0].decode())
        assert texts["first"] == [
            "previous: none yet",
            "Unable to send response. Unsupported flag provided.",
            "Inference Response object must be provided when the response flags is set to zero.",
        ]
        assert texts["second"][0] == "previous: Unable to send response. Response sender has been closed."
    finally:
        stream.close()


def test_a_model_that_is_not_decoupled_may_answer_through_its_sender(target):
    client = httpclient.InferenceServerClient(target.http_url)
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([5], dtype=np.int32))
    assert client.infer("single_sender", [tensor]).as_numpy("OUT").tolist() == [10]


def test_unary_calls_on_a_decoupled_model_get_tritons_errors(target):
    body = {"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [1]}]}
    answer = requests.post(f"http://{target.http_url}/v2/models/square_int32/infer", json=body, timeout=30)
    assert answer.status_code == 501, answer.text
    assert answer.json() == {
        "error": "HTTP end point doesn't support models with decoupled transaction policy"
    }
    client = grpcclient.InferenceServerClient(target.grpc_url)
    with pytest.raises(InferenceServerException) as error:
        client.infer("square_int32", int32_in(1))
    assert error.value.status() == "StatusCode.UNIMPLEMENTED"
    assert error.value.message() == (
        "ModelInfer RPC doesn't support models with decoupled transaction policy"
    )


def test_a_client_that_goes_away_cancels_its_stream(target):
    nereid_only(target)
    stream = Stream(target)
    stream.send("until_cancelled", int32_in(0))
    assert [outputs(r) for r, _ in stream.take(3)] == [[0], [1], [2]]
    stream.close(cancel=True)
    wait_until(lambda: "until_cancelled: cancelled after" in target.server.log(),
               "the model to see the cancellation")
    # The instance is free again.
    stream = Stream(target)
    try:
        stream.send("square_int32", int32_in(1))
        (result, error), = stream.take(1)
        assert error is None and outputs(result) == [1]
    finally:
        stream.close()

