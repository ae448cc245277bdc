"""Releases each request as its `mode` parameter says: "reschedule"
(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, answering None), "reschedule
answered" (the flag, and a response all the same), or anything else (a
plain response). A decoupled instance sends one response through the
sender first, and the final flag only for requests it does not reschedule."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(
            json.loads(args["model_config"]))

    def execute(self, requests):
        responses = []
        for request in requests:
            mode = json.loads(request.parameters()).get("mode", "")
            response = pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", np.array([len(mode)], np.int32))])
            if mode.startswith("reschedule"):
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            if self.decoupled:
                final = 0 if mode.startswith("reschedule") else pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
                request.get_response_sender().send(response, flags=final)
                continue
            responses.append(None if mode == "reschedule" else response)
        return None if self.decoupled else responses
