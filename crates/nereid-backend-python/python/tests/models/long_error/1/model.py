"""Answers each request with an error response whose message is "x"
repeated as many times as the request's "size" parameter says."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                error=pb_utils.TritonError("x" * json.loads(request.parameters())["size"])
            )
            for request in requests
        ]
