"""Business Logic Scripting with a decoupled model, after Triton's
python_backend example bls_decoupled/async_model.py: `async def execute`
sends two requests to "square_int32" with `async_exec(decoupled=True)`,
awaits both, and answers SUM, the sum of every OUT they returned. The
request parameter "iterate" says how the awaited responses are read: "for"
(as Triton's example reads them) or "async for"."""

import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils


async def read(responses, iterate):
    if iterate == "for":
        return list(responses)
    return [response async for response in responses]


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            iterate = json.loads(request.parameters())["iterate"]
            count = pb_utils.get_input_tensor_by_name(request, "IN")
            calls = [
                pb_utils.InferenceRequest(
                    model_name="square_int32", inputs=[count], requested_output_names=["OUT"]
                ).async_exec(decoupled=True)
                for _ in range(2)
            ]
            total = np.zeros(1, dtype=np.int32)
            for answers in await asyncio.gather(*calls):
                for answer in await read(answers, iterate):
                    if answer.has_error():
                        raise pb_utils.TritonModelException(answer.error().message())
                    out = pb_utils.get_output_tensor_by_name(answer, "OUT")
                    if out is not None:  # the final response may be empty
                        total += out.as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total)]))
        return responses
