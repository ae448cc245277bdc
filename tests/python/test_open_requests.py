"""A decoupled Python model's requests stay open after `execute` returns,
as in Triton: one instance answers many streams at once (Triton's repeat
example, vLLM's model.py). The model (tests/python/open_requests/gate)
answers from threads and holds each request open until a later request
opens its gate, so every check here waits on events, not on time.

The same model and checks pass against real Triton 2.51's Python backend
(set OPEN_REQUESTS_SERVER=host:grpc_port; nereid-only checks are skipped)."""

from __future__ import annotations

import os
import queue
import shutil

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from conftest import REPO_ROOT, start_server, stop_server

MODELS = REPO_ROOT / "tests/python/open_requests"
EXTERNAL = os.environ.get("OPEN_REQUESTS_SERVER")


@pytest.fixture(scope="module")
def grpc_url(tmp_path_factory):
    if EXTERNAL:
        yield EXTERNAL
        return
    tmp = tmp_path_factory.mktemp("open")
    repo = tmp / "models"
    shutil.copytree(MODELS, repo)
    python = str(REPO_ROOT / ".venv/bin/python")
    server = start_server(tmp, [repo], [f"--backend-config=python,python-path={python}"])
    yield server.grpc_url
    stop_server(server)


class Stream:
    """A gRPC stream whose answers queue up as (value or None, final, error)."""

    def __init__(self, url):
        self.client = grpcclient.InferenceServerClient(url)
        self.answers = queue.Queue()
        self.client.start_stream(callback=self._answer)

    def _answer(self, result, error):
        if error is not None:
            self.answers.put((None, True, str(error)))
            return
        response = result.get_response()
        final = response.parameters["triton_final_response"].bool_param
        out = result.as_numpy("OUT")
        self.answers.put((None if out is None else int(out[0]), final, None))

    def send(self, model, value, request_id=""):
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
        self.client.async_stream_infer(
            model, [tensor], request_id=request_id, enable_empty_final_response=True
        )

    def take(self, count, timeout=30):
        return [self.answers.get(timeout=timeout) for _ in range(count)]

    def close(self, cancel=False):
        self.client.stop_stream(cancel_requests=cancel)
        self.client.close()


def test_an_open_request_does_not_hold_the_instance(grpc_url):
    held, opener = Stream(grpc_url), Stream(grpc_url)
    try:
        held.send("gate", 2)
        assert held.take(2) == [(0, False, None), (1, False, None)]
        # The one instance takes the next request while the first is open;
        # if it did not, the first would wait for ever for this one.
        opener.send("gate", -1)
        assert opener.take(1) == [(-1, True, None)]
        assert held.take(1) == [(None, True, None)]
    finally:
        held.close()
        opener.close()


def test_many_requests_are_open_on_one_stream_at_once(grpc_url):
    stream = Stream(grpc_url)
    try:
        for i in range(8):
            stream.send("gate", 1, request_id=f"held-{i}")
        answers = stream.take(8)
        assert sorted(answers) == [(0, False, None)] * 8
        stream.send("gate", -1, request_id="opener")
        answers = stream.take(9)
        assert sorted(a for a in answers if a[0] is None) == [(None, True, None)] * 8
        assert (-1, True, None) in answers
    finally:
        stream.close()


def test_an_open_request_sees_its_client_go_away(grpc_url):
    before = Stream(grpc_url)
    before.send("gate", -2)
    [(cancelled_before, _, _)] = before.take(1)
    before.close()
    stream = Stream(grpc_url)
    stream.send("gate", 1)
    assert stream.take(1) == [(0, False, None)]
    stream.close(cancel=True)
    # The model's thread counts the cancellation and ends the request.
    while True:
        check = Stream(grpc_url)
        check.send("gate", -2)
        [(cancelled, _, _)] = check.take(1)
        check.close()
        if cancelled == cancelled_before + 1:
            break
        assert cancelled == cancelled_before


def test_past_the_open_limit_requests_wait_in_the_queue(grpc_url):
    if EXTERNAL:
        pytest.skip("nereid.max_open_requests is nereid's")
    held, waiting = Stream(grpc_url), Stream(grpc_url)
    try:
        held.send("gate_one_open", 1)
        assert held.take(1) == [(0, False, None)]
        # One request is open, the limit: the opener waits, so the gate
        # stays shut until the held request's client goes away.
        waiting.send("gate_one_open", -1)
        with pytest.raises(queue.Empty):
            waiting.answers.get(timeout=1)
        held.close(cancel=True)
        assert waiting.take(1) == [(-1, True, None)]
    finally:
        waiting.close()


def test_a_worker_that_dies_fails_its_open_requests_and_starts_again(grpc_url):
    if EXTERNAL:
        pytest.skip("a crashing worker's wording is nereid's")
    held, crasher = Stream(grpc_url), Stream(grpc_url)
    try:
        held.send("gate", 1)
        assert held.take(1) == [(0, False, None)]
        crasher.send("gate", -3)
        [(_, final, error)] = held.take(1)
        assert final and "the Python worker" in error, error
        [(_, final, error)] = crasher.take(1)
        assert final and error, error
        # A new worker answers the next request.
        crasher.send("gate", -1)
        assert crasher.take(1) == [(-1, True, None)]
    finally:
        held.close()
        crasher.close()


def test_a_model_thread_calls_another_model_after_execute_returned(grpc_url):
    stream = Stream(grpc_url)
    try:
        for value in (3, 5, 7):
            stream.send("bls_later", value, request_id=str(value))
        assert sorted(stream.take(3)) == [(6, True, None), (10, True, None), (14, True, None)]
    finally:
        stream.close()
