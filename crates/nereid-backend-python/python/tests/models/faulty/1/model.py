"""Breaks Triton's execute contract on demand. The first request's "mode"
parameter picks how: "raise" raises ValueError, "short" returns one response
too few, "not_list" returns a tuple, "bad_item" returns a string in the list,
"exit" calls sys.exit; anything else answers normally (OUT = IN)."""

import json
import sys

import triton_python_backend_utils as pb_utils


def helper_that_fails():
    raise ValueError("boom")


class TritonPythonModel:
    def execute(self, requests):
        mode = json.loads(requests[0].parameters()).get("mode", "")
        responses = [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
        if mode == "raise":
            helper_that_fails()
        if mode == "short":
            return responses[:-1]
        if mode == "not_list":
            return tuple(responses)
        if mode == "bad_item":
            return responses[:-1] + ["not a response"]
        if mode == "exit":
            sys.exit(3)
        return responses
