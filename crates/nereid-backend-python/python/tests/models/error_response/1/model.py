"""Answers each request on its own: a request whose IN holds a negative value
gets an error response (INVALID_ARG), the others OUT = 2 * IN."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if (data < 0).any():
                error = pb_utils.TritonError(
                    "IN must not be negative", pb_utils.TritonError.INVALID_ARG
                )
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                responses.append(
                    pb_utils.InferenceResponse(
                        output_tensors=[pb_utils.Tensor("OUT", data * 2)],
                        parameters={"doubled": True},
                    )
                )
        return responses
