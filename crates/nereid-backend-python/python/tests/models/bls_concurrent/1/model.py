"""Business Logic Scripting off the main thread, with a plain (not async)
`execute`: sends two requests at once (to models "left" and "right") and
waits for both; OUT_LEFT and OUT_RIGHT are their OUTPUT0. The request's
"how" parameter picks the way: "threads" calls `exec()` in two threads of
the model's own (which also log), "asyncio_run" awaits two `async_exec()`
calls in an event loop of the model's own (`asyncio.run`). Meanwhile the
main thread only waits for them."""

import asyncio
import json
import threading

import triton_python_backend_utils as pb_utils


def bls_request(name, inputs):
    return pb_utils.InferenceRequest(model_name=name, requested_output_names=["OUTPUT0"], inputs=inputs)


def in_threads(inputs):
    answers = {}

    def call(name):
        pb_utils.Logger.log_info(f"calling {name}")
        answers[name] = bls_request(name, inputs).exec()

    threads = [threading.Thread(target=call, args=(name,)) for name in ("left", "right")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers["left"], answers["right"]


async def in_event_loop(inputs):
    return await asyncio.gather(*(bls_request(name, inputs).async_exec() for name in ("left", "right")))


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [
                pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                pb_utils.get_input_tensor_by_name(request, "INPUT1"),
            ]
            if json.loads(request.parameters())["how"] == "threads":
                left, right = in_threads(inputs)
            else:
                left, right = asyncio.run(in_event_loop(inputs))
            for answer in (left, right):
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
            outputs = [
                pb_utils.Tensor("OUT_LEFT", pb_utils.get_output_tensor_by_name(left, "OUTPUT0").as_numpy()),
                pb_utils.Tensor("OUT_RIGHT", pb_utils.get_output_tensor_by_name(right, "OUTPUT0").as_numpy()),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
