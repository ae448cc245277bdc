"""echo_words: answers with the words of its prompt, as a language model
would answer with new ones, so that the OpenAI frontend can be checked
without weights.

A token is a whitespace-separated word. The answer is the prompt's words,
at most `max_tokens` of them (16 when unset, vLLM's default), cut before
the first `stop` sequence, which it leaves out. With `stream`, each word
is a response of its own (the first without a leading space, the others
with one); without, one response holds the whole answer. With
`exclude_input_in_output` false the prompt comes first, as vLLM echoes it.
`num_input_tokens` / `num_output_tokens` answer `return_num_*_tokens`:
the prompt's words, and the words of each response. Inputs and outputs are
those of Triton's vLLM backend (TensorRT-LLM's `max_tokens` and
`stop_words` tensors are read too, when a config declares them); other
sampling parameters are accepted and have no effect (the answer is always
the same)."""

import json
import re

import numpy as np
import triton_python_backend_utils as pb_utils

DEFAULT_MAX_TOKENS = 16


def _scalar(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    value = tensor.as_numpy().reshape(-1)[0]
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _stops(request, parameters):
    words = pb_utils.get_input_tensor_by_name(request, "stop_words")
    if words is not None:
        return [w.decode("utf-8") for w in words.as_numpy().reshape(-1) if w]
    stop = parameters.get("stop") or []
    return [stop] if isinstance(stop, str) else [s for s in stop if s]


def _pieces(words, lead, stops):
    """The answer's pieces: each word with the space before it, the text
    cut before the first stop sequence (which is left out)."""
    text = lead + " ".join(words)
    cut = min((text.find(s) for s in stops if s in text), default=len(text))
    return re.findall(r"\s*\S+", text[:cut])


class TritonPythonModel:
    def initialize(self, args):
        # Outputs of a batching model carry a batch dimension of one.
        config = json.loads(args["model_config"])
        self.batch = [1] if config.get("max_batch_size", 0) > 0 else []

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                self.answer(request, sender)
            except Exception as e:  # noqa: BLE001 - the client gets the reason
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def answer(self, request, sender):
        prompt = _scalar(request, "text_input", "")
        parameters = json.loads(_scalar(request, "sampling_parameters", "") or "{}")
        if _scalar(request, "return_logprobs", False):
            raise ValueError("echo_words has no log probabilities")
        stream = bool(_scalar(request, "stream", False))
        echo = not bool(_scalar(request, "exclude_input_in_output", True))
        counts = (bool(_scalar(request, "return_num_input_tokens", False)),
                  bool(_scalar(request, "return_num_output_tokens", False)))
        max_tokens = int(_scalar(request, "max_tokens", parameters.get("max_tokens", DEFAULT_MAX_TOKENS)))
        words = prompt.split()
        lead = " " if echo and prompt else ""
        pieces = _pieces(words[:max_tokens], lead, _stops(request, parameters))
        first = prompt if echo else ""
        if not stream:
            text = first + "".join(pieces)
            sender.send(self.response(text, len(words), len(pieces), counts),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        if not pieces:
            sender.send(self.response(first, len(words), 0, counts),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        for index, piece in enumerate(pieces):
            if request.is_cancelled():
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            last = index == len(pieces) - 1
            text = (first if index == 0 else "") + piece
            sender.send(self.response(text, len(words), 1, counts),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0)

    def response(self, text, input_tokens, output_tokens, counts):
        def tensor(name, values, dtype):
            return pb_utils.Tensor(name, np.array(values, dtype=dtype).reshape(self.batch + [1]))

        tensors = [tensor("text_output", [text.encode("utf-8")], np.object_)]
        if counts[0]:
            tensors.append(tensor("num_input_tokens", [input_tokens], np.uint32))
        if counts[1]:
            tensors.append(tensor("num_output_tokens", [output_tokens], np.uint32))
        return pb_utils.InferenceResponse(output_tensors=tensors)
