"""OUT = 2 * IN, after sleeping fixed_ms + per_inference_ms for each
inference of the batch: a batch cost that does not depend on how busy the
machine is."""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.fixed = float(parameters["fixed_ms"]["string_value"]) / 1000
        self.per_inference = float(parameters["per_inference_ms"]["string_value"]) / 1000

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() for r in requests]
        inferences = sum(x.shape[0] for x in inputs)
        time.sleep(self.fixed + self.per_inference * inferences)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", (2 * x).astype(np.float32))])
            for x in inputs
        ]
