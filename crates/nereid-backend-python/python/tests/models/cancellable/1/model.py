"""A slow model: waits (up to 2 minutes) until one of its requests is cancelled,
then answers the cancelled ones with a CANCELLED error and the others with
OUT = IN, as Triton's request-cancellation guide suggests."""

import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        deadline = time.monotonic() + 120
        while not any(r.is_cancelled() for r in requests) and time.monotonic() < deadline:
            time.sleep(0.005)
        responses = []
        for request in requests:
            if request.is_cancelled():
                error = pb_utils.TritonError("request cancelled", pb_utils.TritonError.CANCELLED)
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                data = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", data)]))
        return responses
