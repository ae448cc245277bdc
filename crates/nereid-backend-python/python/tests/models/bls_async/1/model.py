"""Business Logic Scripting, async style: `async def execute` sends two
requests at once with `async_exec` (to models "left" and "right") and awaits
both; OUT_LEFT and OUT_RIGHT are their OUTPUT0."""

import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [
                pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                pb_utils.get_input_tensor_by_name(request, "INPUT1"),
            ]
            calls = [
                pb_utils.InferenceRequest(
                    model_name=name, requested_output_names=["OUTPUT0"], inputs=inputs
                ).async_exec()
                for name in ("left", "right")
            ]
            left, right = await asyncio.gather(*calls)
            for answer in (left, right):
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
            outputs = [
                pb_utils.Tensor("OUT_LEFT", pb_utils.get_output_tensor_by_name(left, "OUTPUT0").as_numpy()),
                pb_utils.Tensor("OUT_RIGHT", pb_utils.get_output_tensor_by_name(right, "OUTPUT0").as_numpy()),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
