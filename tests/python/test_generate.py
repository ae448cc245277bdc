"""Triton's generate extension (`/generate`, `/generate_stream`) on the
models of tests/python/decoupled/: how a flat JSON body maps onto inputs
and parameters (a nested "parameters" object, the request "id"), what the
responses and events look like, and which errors come back as plain JSON
before any event. Triton 2.51's answers are the reference: with
DECOUPLED_SERVER=host:http_port:grpc_port set, the checks run against a
server that is already up (see test_decoupled.py)."""

from __future__ import annotations

import json
import shutil
import time

import pytest
import requests

from conftest import REPO_ROOT, start_server, stop_server
from test_decoupled import EXTERNAL, MODELS, target  # noqa: F401 (a fixture)


def post(target, model, route, body, stream=False):
    data = body if isinstance(body, str) else json.dumps(body)
    return requests.post(
        f"http://{target.http_url}/v2/models/{model}/{route}", data=data,
        timeout=30, stream=stream,
    )


def events(answer):
    """The JSON objects of a server-sent event stream."""
    assert answer.headers["content-type"] == "text/event-stream; charset=utf-8"
    frames = answer.text.split("\n\n")
    assert frames[-1] == ""
    return [json.loads(frame.removeprefix("data: ")) for frame in frames[:-1]]


def refused(answer):
    """The (status, message) of a plain JSON error."""
    assert answer.headers["content-type"] == "application/json", answer.text
    return answer.status_code, answer.json()["error"]


NOT_ONE = (
    "generate expects model to produce exactly 1 response, use generate stream for model "
    "that generates various number of responses"
)


def test_generate_maps_keys_to_inputs_and_answers_a_flat_object(target):
    answer = post(target, "single_sender", "generate", {"IN": 5, "tag": "x", "level": 2})
    assert answer.status_code == 200
    assert answer.json() == {"OUT": 10, "model_name": "single_sender", "model_version": "1"}
    # A decoupled model that happens to answer once is fine.
    assert post(target, "square_int32", "generate", {"IN": 1}).json()["OUT"] == 1


@pytest.mark.parametrize("count", [0, 3])
def test_generate_wants_exactly_one_response(target, count):
    answer = post(target, "square_int32", "generate", {"IN": count})
    assert (answer.status_code, answer.json()) == (200, {"error": NOT_ONE})


def test_generate_stream_sends_every_response_as_an_event(target):
    answer = post(target, "square_int32", "generate_stream", {"IN": 3})
    assert answer.status_code == 200
    assert events(answer) == [{"OUT": 3, "model_name": "square_int32", "model_version": "1"}] * 3
    answer = post(target, "midway_error", "generate_stream", {"IN": [4]})
    assert [e.get("OUT", e.get("error")) for e in events(answer)] == [4, "midway failure", 5]


def test_a_model_that_is_not_decoupled_streams_its_one_response_as_one_event(target):
    answer = post(target, "single_sender", "generate_stream", {"IN": 2, "id": "7"})
    assert answer.status_code == 200
    assert events(answer) == [{"OUT": 4, "id": "7", "model_name": "single_sender", "model_version": "1"}]


@pytest.mark.parametrize("model, body", [
    ("square_int32", {"IN": 0}),
    ("generate_echo", {"text_input": "hi", "parameters": {"repetition": 0}}),
])
def test_a_final_flag_alone_is_an_empty_event_stream(target, model, body):
    answer = post(target, model, "generate_stream", body)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert answer.content == b""


def test_parameters_members_become_inputs_and_parameters(target):
    body = {"text_input": "hello", "parameters": {"max_tokens": 2, "repetition": 2, "temperature": 0.5}}
    answers = events(post(target, "generate_echo", "generate_stream", body))
    assert [a["text_output"] for a in answers] == ["he", "he"]
    # max_tokens named an input: it is no parameter.
    assert json.loads(answers[0]["request_parameters"]) == {"repetition": 2, "temperature": 0.5}
    body = {"text_input": "hello", "seed": 3, "parameters": {"stream": False}}
    answer = post(target, "generate_echo", "generate", body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["text_output"] == "hello"
    assert json.loads(answer.json()["request_parameters"]) == {"seed": 3, "stream": False}


@pytest.mark.parametrize("model, body, message", [
    ("generate_echo", {"text_input": "a", "parameters": {"nested": {"twice": 1}}},
     "Converting keyword: 'parameters': parameter 'nested' has invalid type. "
     "It should be either 'int', 'bool', or 'string'."),
    ("generate_echo", {"text_input": "a", "parameters": 1},
     "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object"),
    ("parameters_input", {"parameters": 1},
     "Keyword 'parameters' for nested schema also given as input tensor name"),
    ("single_sender", {"IN": 5, "p": {"a": 1}},
     "parameter 'p' has invalid type. It should be either 'int', 'bool', or 'string'."),
    ("single_sender", {"IN": 5, "id": 5},
     "Unable to parse 'id': attempt to access JSON non-string as string"),
])
def test_body_refusals_are_tritons(target, model, body, message):
    # Triton answers the 'parameters' that is no object and the id that is
    # no string with 500, nereid with 400: the request is at fault.
    for route in ("generate", "generate_stream"):
        status, error = refused(post(target, model, route, body))
        assert error == message
        assert status == 400 or (EXTERNAL and status == 500)


def test_the_id_is_echoed_first_and_passed_to_the_model(target):
    answer = post(target, "generate_echo", "generate", {"id": "42", "text_input": "hi"})
    assert answer.status_code == 200, answer.text
    assert list(answer.json()) == ["id", "model_name", "model_version", "request_parameters", "text_output"]
    assert answer.json()["id"] == "42"
    # Triton hands the id to the model as a parameter too.
    assert json.loads(answer.json()["request_parameters"]) == {"id": "42"}
    body = {"id": "43", "text_input": "hi", "parameters": {"repetition": 2}}
    answers = events(post(target, "generate_echo", "generate_stream", body))
    assert [list(a)[0] for a in answers] == ["id", "id"]
    assert [a["id"] for a in answers] == ["43", "43"]
    # An empty id is no id.
    answer = post(target, "generate_echo", "generate", {"id": "", "text_input": "hi"})
    assert "id" not in answer.json()


MISSING = ("expected number of inputs between 1 and 2 but got 0 inputs for model 'generate_echo'. "
           "Got input(s) [], but missing required input(s) ['text_input']. "
           "Please provide all required input(s).")


@pytest.mark.parametrize("model, body, status, message", [
    ("generate_echo", {}, 400, f"[request id: <id_unknown>] {MISSING}"),
    ("generate_echo", {"max_tokens_x": 1, "id": "r-1"}, 400, f"[request id: r-1] {MISSING}"),
    ("generate_echo", {"text_input": ["a", "b"]}, 400,
     "The schema can not convert input 'text_input' to tensor with proper shape"),
    ("single_sender", {"IN": [1, 2]}, 400,
     "The schema can not convert input 'IN' to tensor with proper shape"),
    ("not_a_model", {"IN": 1}, 404, "Request for unknown model: 'not_a_model' is not found"),
])
def test_request_errors_are_plain_json_before_any_event(target, model, body, status, message):
    for route in ("generate", "generate_stream"):
        assert refused(post(target, model, route, body)) == (status, message)


def test_a_stream_longer_than_the_read_timeout_runs_to_its_end(tmp_path):
    if EXTERNAL:
        pytest.skip("starts a nereid of its own")
    repo = tmp_path / "models"
    shutil.copytree(MODELS / "repeat_int32", repo / "repeat_int32")
    python = str(REPO_ROOT / ".venv/bin/python")
    server = start_server(tmp_path, [repo], [
        f"--backend-config=python,python-path={python}", "--http-read-timeout-secs=1",
    ])
    try:
        body = {"IN": [1, 2, 3], "DELAY": [700, 700, 700], "WAIT": [0]}
        started = time.monotonic()
        answer = requests.post(
            f"http://{server.http_url}/v2/models/repeat_int32/generate_stream",
            data=json.dumps(body), timeout=30,
        )
        assert time.monotonic() - started > 2
        assert [e["OUT"] for e in events(answer)] == [1, 2, 3]
    finally:
        stop_server(server)
